//! The flame-graph tree: the call tree of a profile, frames merged by function, with total and
//! self values per node (and both sides' values for a diff).

use std::io::{self, Write};

use rustc_hash::FxHashMap;

use crate::profile::{Meta, Profile};
use crate::tables::{FunctionId, LocationId, StackId, Tables};

/// What makes two frames one node among siblings: the function when symbolized, else the location.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Frame {
    Root,
    Function(FunctionId),
    Address(LocationId),
}

/// One node of the tree.
#[derive(Debug, Clone)]
struct Node {
    parent: u32,
    frame: Frame,
    /// Source line when every merged occurrence has the same one, else 0.
    line: i64,
    total: i64,
    self_value: i64,
    base_total: i64,
    base_self: i64,
}

/// A flame graph (icicle) tree built from a profile. Node 0 is the root.
#[derive(Debug, Clone)]
pub struct FlameGraph<'a> {
    tables: &'a Tables,
    meta: &'a Meta,
    is_diff: bool,
    nodes: Vec<Node>,
    /// Children of node `i` are `children[child_start[i]..child_start[i + 1]]`, sorted by name
    /// (one array for all nodes: trees of real profiles have hundreds of thousands of nodes).
    children: Vec<u32>,
    child_start: Vec<u32>,
}

impl<'a> FlameGraph<'a> {
    /// Builds the tree of `profile`. Inlined frames become nodes of their own, as in pprof.
    pub fn build(profile: &'a Profile) -> Self {
        let tables = &*profile.tables;
        let samples = &profile.samples;
        let mut graph = FlameGraph {
            tables,
            meta: &profile.meta,
            is_diff: profile.is_diff(),
            nodes: vec![Node {
                parent: u32::MAX,
                frame: Frame::Root,
                line: 0,
                total: 0,
                self_value: 0,
                base_total: 0,
                base_self: 0,
            }],
            children: Vec::new(),
            child_start: Vec::new(),
        };
        // Real stacks share few frames once below the top: expect about a node per frame.
        let n_frames: usize = samples.stacks.iter().map(|&s| tables.stack(s).len()).sum();
        let mut child_of: FxHashMap<(u32, Frame), u32> = FxHashMap::default();
        child_of.reserve(n_frames);
        graph.nodes.reserve(n_frames);
        let mut node_of_stack: FxHashMap<StackId, u32> = FxHashMap::default();
        for i in 0..samples.len() {
            let stack = samples.stacks[i];
            let node = match node_of_stack.get(&stack) {
                Some(&node) => node,
                None => {
                    // Root first: outermost location first, and within a location its caller line
                    // before the lines inlined into it.
                    let mut parent = 0;
                    for &location in tables.stack(stack).iter().rev() {
                        let lines = tables.lines(location);
                        if lines.is_empty() {
                            parent =
                                graph.child(&mut child_of, parent, Frame::Address(location), 0);
                        } else {
                            for line in lines.iter().rev() {
                                parent = graph.child(
                                    &mut child_of,
                                    parent,
                                    Frame::Function(line.function),
                                    line.line,
                                );
                            }
                        }
                    }
                    node_of_stack.insert(stack, parent);
                    parent
                }
            };
            let n = &mut graph.nodes[node as usize];
            n.self_value = n.self_value.wrapping_add(samples.values[i]);
            if let Some(base) = &samples.diff_base {
                n.base_self = n.base_self.wrapping_add(base[i]);
            }
        }
        // Children always come after their parent: one backwards pass sums totals up the tree.
        for n in &mut graph.nodes {
            n.total = n.self_value;
            n.base_total = n.base_self;
        }
        for idx in (1..graph.nodes.len()).rev() {
            let (total, base_total, parent) = (
                graph.nodes[idx].total,
                graph.nodes[idx].base_total,
                graph.nodes[idx].parent as usize,
            );
            graph.nodes[parent].total = graph.nodes[parent].total.wrapping_add(total);
            graph.nodes[parent].base_total =
                graph.nodes[parent].base_total.wrapping_add(base_total);
        }
        // Counting sort of nodes by parent gives every node's children as one slice.
        let n = graph.nodes.len();
        let mut child_start = vec![0u32; n + 1];
        for node in &graph.nodes[1..] {
            child_start[node.parent as usize + 1] += 1;
        }
        for i in 0..n {
            child_start[i + 1] += child_start[i];
        }
        let mut children = vec![0u32; n - 1];
        let mut fill = child_start.clone();
        for (idx, node) in graph.nodes.iter().enumerate().skip(1) {
            let slot = &mut fill[node.parent as usize];
            children[*slot as usize] = idx as u32;
            *slot += 1;
        }
        for i in 0..n {
            let list = &mut children[child_start[i] as usize..child_start[i + 1] as usize];
            if list.len() > 1 {
                list.sort_by(|&a, &b| graph.name(a).cmp(&graph.name(b)));
            }
        }
        graph.children = children;
        graph.child_start = child_start;
        graph
    }

    fn child(
        &mut self,
        child_of: &mut FxHashMap<(u32, Frame), u32>,
        parent: u32,
        frame: Frame,
        line: i64,
    ) -> u32 {
        let next = self.nodes.len() as u32;
        let idx = *child_of.entry((parent, frame)).or_insert(next);
        if idx == next {
            self.nodes.push(Node {
                parent,
                frame,
                line,
                total: 0,
                self_value: 0,
                base_total: 0,
                base_self: 0,
            });
        } else if self.nodes[idx as usize].line != line {
            self.nodes[idx as usize].line = 0;
        }
        idx
    }

    fn children_of(&self, node: u32) -> &[u32] {
        let (start, end) = (
            self.child_start[node as usize],
            self.child_start[node as usize + 1],
        );
        &self.children[start as usize..end as usize]
    }

    /// Number of nodes, the root included.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the tree holds only the root.
    pub fn is_empty(&self) -> bool {
        self.nodes.len() == 1
    }

    /// The total of the whole profile (the root's value).
    pub fn total(&self) -> i64 {
        self.nodes[0].total
    }

    fn name(&self, idx: u32) -> std::borrow::Cow<'a, str> {
        match self.nodes[idx as usize].frame {
            Frame::Root => "root".into(),
            Frame::Function(f) => self.tables.string(self.tables.function(f).name).into(),
            Frame::Address(l) => self.tables.location_display_name(l).into(),
        }
    }

    fn file(&self, idx: u32) -> &'a str {
        match self.nodes[idx as usize].frame {
            Frame::Function(f) => self.tables.string(self.tables.function(f).filename),
            _ => "",
        }
    }

    fn binary(&self, idx: u32) -> &'a str {
        match self.nodes[idx as usize].frame {
            Frame::Address(l) => self.tables.location_binary(l),
            _ => "",
        }
    }

    /// Writes the tree as the JSON of the HTTP API (`/api/v1/query?format=json`):
    /// `{"sample_type", "unit", "period_type", "period", "total", ["base_total",] "root": node}` where
    /// a node is `{"name", ["file", "line", "binary",] "value", "self", ["base", "base_self",]
    /// "children": [...]}`, children ordered by name. Written without recursion, so stack depth is
    /// no limit.
    pub fn write_json(&self, out: &mut (impl Write + ?Sized)) -> io::Result<()> {
        let meta = self.meta;
        write!(out, "{{\"sample_type\":")?;
        write_str(out, &meta.sample_type.kind)?;
        write!(out, ",\"unit\":")?;
        write_str(out, &meta.sample_type.unit)?;
        write!(out, ",\"period_type\":")?;
        write_str(out, &meta.period_type.kind)?;
        write!(out, ",\"period_unit\":")?;
        write_str(out, &meta.period_type.unit)?;
        write!(
            out,
            ",\"period\":{},\"total\":{}",
            meta.period, self.nodes[0].total
        )?;
        if self.is_diff {
            write!(out, ",\"base_total\":{}", self.nodes[0].base_total)?;
        }
        write!(out, ",\"root\":")?;
        // Explicit stack of (node, index of next child to write).
        let mut stack: Vec<(u32, usize)> = vec![(0, 0)];
        self.write_node_head(out, 0)?;
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            let children = self.children_of(node);
            if *next < children.len() {
                let child = children[*next];
                if *next > 0 {
                    out.write_all(b",")?;
                }
                *next += 1;
                self.write_node_head(out, child)?;
                stack.push((child, 0));
            } else {
                out.write_all(b"]}")?;
                stack.pop();
            }
        }
        out.write_all(b"}")
    }

    fn write_node_head(&self, out: &mut (impl Write + ?Sized), idx: u32) -> io::Result<()> {
        let n = &self.nodes[idx as usize];
        write!(out, "{{\"name\":")?;
        write_str(out, &self.name(idx))?;
        let file = self.file(idx);
        if !file.is_empty() {
            write!(out, ",\"file\":")?;
            write_str(out, file)?;
        }
        if n.line != 0 {
            write!(out, ",\"line\":{}", n.line)?;
        }
        let binary = self.binary(idx);
        if !binary.is_empty() {
            write!(out, ",\"binary\":")?;
            write_str(out, binary)?;
        }
        write!(out, ",\"value\":{},\"self\":{}", n.total, n.self_value)?;
        if self.is_diff {
            write!(
                out,
                ",\"base\":{},\"base_self\":{}",
                n.base_total, n.base_self
            )?;
        }
        out.write_all(b",\"children\":[")
    }

    /// Writes folded stacks (`frame;frame;frame value`, root first, one line per distinct path),
    /// the input of flamegraph.pl and inferno. A diff writes `base comparison`, the two-column
    /// form of inferno's differential flame graphs.
    pub fn write_folded(&self, out: &mut (impl Write + ?Sized)) -> io::Result<()> {
        // Depth-first in name order, carrying the path as text: lines come out sorted.
        let mut path = String::new();
        let mut stack: Vec<(u32, usize, usize)> = vec![(0, 0, 0)]; // (node, next child, path length)
        while let Some(&mut (node, ref mut next, path_len)) = stack.last_mut() {
            let children = self.children_of(node);
            if *next == 0 && node != 0 {
                let n = &self.nodes[node as usize];
                if n.self_value != 0 || n.base_self != 0 {
                    out.write_all(path.as_bytes())?;
                    if self.is_diff {
                        writeln!(out, " {} {}", n.base_self, n.self_value)?;
                    } else {
                        writeln!(out, " {}", n.self_value)?;
                    }
                }
            }
            if *next < children.len() {
                let child = children[*next];
                *next += 1;
                path.truncate(path_len);
                if node != 0 {
                    path.push(';');
                }
                // `;` separates frames and a newline ends the line: neither may appear in a name.
                path.extend(
                    self.name(child)
                        .chars()
                        .map(|c| if c == ';' || c == '\n' { ' ' } else { c }),
                );
                stack.push((child, 0, path.len()));
            } else {
                stack.pop();
                if let Some(&(_, _, len)) = stack.last() {
                    path.truncate(len);
                }
            }
        }
        Ok(())
    }
}

fn write_str(out: &mut (impl Write + ?Sized), s: &str) -> io::Result<()> {
    serde_json::to_writer(&mut *out, s).map_err(io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::profile;

    #[test]
    fn json_has_totals_and_self_values() {
        let p = profile(&[("main;work", 3), ("main", 1)]);
        let mut out = Vec::new();
        FlameGraph::build(&p).write_json(&mut out).expect("write");
        let json: serde_json::Value = serde_json::from_slice(&out).expect("valid json");
        assert_eq!(json["total"], 4);
        let main = &json["root"]["children"][0];
        assert_eq!(
            (
                main["name"].as_str(),
                main["value"].as_i64(),
                main["self"].as_i64()
            ),
            (Some("main"), Some(4), Some(1))
        );
        assert_eq!(main["children"][0]["value"], 3);
    }

    #[test]
    fn very_deep_stacks_do_not_overflow() {
        let deep = vec!["f"; 200_000].join(";");
        let p = profile(&[(&deep, 1)]);
        let mut out = Vec::new();
        let graph = FlameGraph::build(&p);
        assert_eq!(graph.len(), 200_001);
        graph.write_json(&mut out).expect("write");
        assert!(out.ends_with(b"]}]}}"));
    }
}
