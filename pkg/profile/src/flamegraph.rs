//! The flame-graph tree: the call tree of a profile, frames merged by function, with total and
//! self values per node (and both sides' values for a diff).

use std::io::{self, Write};

use rustc_hash::FxHashMap;

use crate::profile::{Meta, Profile};
use crate::tables::{FunctionId, LocationId, StackId, Tables};

/// What a node stands for, and what makes two frames one node among siblings: the function
/// when symbolized, else the location.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlameFrame {
    /// Node 0.
    Root,
    /// A function (the frames of every location naming it, at any line).
    Function(FunctionId),
    /// An unsymbolized location: its object and address.
    Address(LocationId),
}

/// One node of the tree.
#[derive(Debug, Clone)]
struct Node {
    parent: u32,
    frame: FlameFrame,
    /// What else keeps this node apart from its siblings of the same frame (see
    /// [`FlameGrouping`]): 0, or the location (address grouping) or mapping (object file
    /// grouping) plus one.
    split: u32,
    /// Source line when every merged occurrence has the same one, else 0.
    line: i64,
    total: i64,
    self_value: i64,
    base_total: i64,
    base_self: i64,
}

/// Finds a node's child by frame while the tree grows. Most nodes of real trees have one child
/// or a few: their children are a linked list, scanned (the nodes were just touched, so this
/// stays in cache). Only the children of nodes with more than [`ChildIndex::WIDE`] are hashed,
/// which keeps the hash table small: a table with an entry per node cost a cache miss per frame,
/// most of the time of building the tree of a large profile.
struct ChildIndex {
    first: Vec<u32>,
    next: Vec<u32>,
    count: Vec<u32>,
    wide: FxHashMap<(u32, FlameFrame, u32), u32>,
}

impl ChildIndex {
    /// More children than this and a node's children are found by hash.
    const WIDE: u32 = 8;
    const NONE: u32 = u32::MAX;

    fn with_capacity(n: usize) -> Self {
        let mut index = ChildIndex {
            first: Vec::with_capacity(n),
            next: Vec::with_capacity(n),
            count: Vec::with_capacity(n),
            wide: FxHashMap::default(),
        };
        // The root.
        index.first.push(Self::NONE);
        index.next.push(Self::NONE);
        index.count.push(0);
        index
    }

    fn find(&self, parent: u32, is: impl Fn(u32) -> bool, key: (FlameFrame, u32)) -> Option<u32> {
        if self.count[parent as usize] > Self::WIDE {
            return self.wide.get(&(parent, key.0, key.1)).copied();
        }
        let mut c = self.first[parent as usize];
        while c != Self::NONE {
            if is(c) {
                return Some(c);
            }
            c = self.next[c as usize];
        }
        None
    }

    /// Records `child` (the newest node) under `parent`.
    fn add(
        &mut self,
        parent: u32,
        child: u32,
        key: (FlameFrame, u32),
        key_of: impl Fn(u32) -> (FlameFrame, u32),
    ) {
        let p = parent as usize;
        self.first.push(Self::NONE);
        self.next.push(self.first[p]);
        self.count.push(0);
        self.first[p] = child;
        self.count[p] += 1;
        if self.count[p] == Self::WIDE + 1 {
            let mut c = self.first[p];
            while c != Self::NONE {
                let (frame, split) = key_of(c);
                self.wide.insert((parent, frame, split), c);
                c = self.next[c as usize];
            }
        } else if self.count[p] > Self::WIDE {
            self.wide.insert((parent, key.0, key.1), child);
        }
    }
}

/// What besides the function keeps function frames apart in a [`FlameGraph`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlameGrouping {
    /// One node per function and address (location).
    pub by_address: bool,
    /// One node per function and object file.
    pub by_binary: bool,
}

impl FlameGrouping {
    /// The split key of a symbolized `location`'s frames: 0 when nothing is grouped.
    fn split(self, tables: &Tables, location: LocationId) -> u32 {
        if self.by_address {
            location.0 + 1
        } else if self.by_binary {
            tables
                .location_address(location)
                .mapping
                .map_or(0, |m| m.0 + 1)
        } else {
            0
        }
    }
}

/// One node of a [`FlameGraph`] ([`FlameGraph::node`]).
#[derive(Debug, Clone, Copy)]
pub struct FlameNode<'g> {
    /// The tables its function or location refer to.
    pub tables: &'g Tables,
    /// Its function, when frames were merged by function (symbolized).
    pub function: Option<&'g crate::tables::Function>,
    /// Its address: an unsymbolized location's, or a function's when the graph keeps
    /// functions apart by address or object file ([`FlameGraph::build_grouped`]).
    pub location: Option<crate::tables::LocationAddress>,
    /// Source line when every merged occurrence has the same one, else 0.
    pub line: i64,
    /// Value of samples through this node.
    pub total: i64,
    /// Value of samples ending here.
    pub self_value: i64,
    /// For a diff: the base side's `total`.
    pub base_total: i64,
    /// For a diff: the base side's `self_value`.
    pub base_self: i64,
    /// Its children's node indexes, ordered by name.
    pub children: &'g [u32],
}

/// A flame graph (icicle) tree built from a profile. Node 0 is the root.
#[derive(Debug, Clone)]
pub struct FlameGraph<'a> {
    tables: &'a Tables,
    meta: &'a Meta,
    is_diff: bool,
    nodes: Vec<Node>,
    /// Per node, when functions are grouped by address or object file: the location of a
    /// function node (the first seen). `None` (no vector) otherwise, keeping nodes small.
    at: Option<Vec<Option<LocationId>>>,
    /// Children of node `i` are `children[child_start[i]..child_start[i + 1]]`, sorted by name
    /// (one array for all nodes: trees of real profiles have hundreds of thousands of nodes).
    children: Vec<u32>,
    child_start: Vec<u32>,
}

impl<'a> FlameGraph<'a> {
    /// Builds the tree of `profile`. Inlined frames become nodes of their own, as in pprof.
    pub fn build(profile: &'a Profile) -> Self {
        Self::build_grouped(profile, FlameGrouping::default())
    }

    /// The tree of `profile` with function frames also kept apart by address or by object file
    /// (Parca's `group_by` of `location_address` and `mapping_file`): two calls of one
    /// function from different addresses are two nodes when grouped by address.
    #[expect(
        clippy::too_many_lines,
        reason = "one walk over the stacks building the tree and its groups together"
    )]
    pub fn build_grouped(profile: &'a Profile, grouping: FlameGrouping) -> Self {
        let tables = &*profile.tables;
        let samples = &profile.samples;
        let mut graph = FlameGraph {
            tables,
            meta: &profile.meta,
            is_diff: profile.is_diff(),
            nodes: vec![Node {
                parent: u32::MAX,
                frame: FlameFrame::Root,
                split: 0,
                line: 0,
                total: 0,
                self_value: 0,
                base_total: 0,
                base_self: 0,
            }],
            at: (grouping != FlameGrouping::default()).then(|| vec![None]),
            children: Vec::new(),
            child_start: Vec::new(),
        };
        // Real stacks share few frames once below the top: expect about a node per frame.
        let n_frames: usize = samples.stacks.iter().map(|&s| tables.stack(s).len()).sum();
        let mut child_of = ChildIndex::with_capacity(n_frames);
        graph.nodes.reserve(n_frames);
        let mut node_of_stack: FxHashMap<StackId, u32> = FxHashMap::default();
        // The previous stack's locations root first, each with the node its last line reached:
        // the part a stack shares with the previous one from the root costs no lookup.
        let mut path: Vec<(LocationId, u32)> = Vec::new();
        for i in 0..samples.len() {
            let stack = samples.stacks[i];
            let node = match node_of_stack.get(&stack) {
                Some(&node) => node,
                None => {
                    let frames = tables.stack(stack);
                    let shared = path
                        .iter()
                        .zip(frames.iter().rev())
                        .take_while(|((a, _), b)| a == *b)
                        .count();
                    path.truncate(shared);
                    // Root first: outermost location first, and within a location its caller line
                    // before the lines inlined into it.
                    let mut parent = path.last().map_or(0, |&(_, node)| node);
                    for &location in frames[..frames.len() - shared].iter().rev() {
                        let lines = tables.lines(location);
                        if lines.is_empty() {
                            parent = graph.child(
                                &mut child_of,
                                parent,
                                (FlameFrame::Address(location), 0),
                                None,
                                0,
                            );
                        } else {
                            let split = grouping.split(tables, location);
                            let at = (split != 0).then_some(location);
                            for line in lines.iter().rev() {
                                parent = graph.child(
                                    &mut child_of,
                                    parent,
                                    (FlameFrame::Function(line.function), split),
                                    at,
                                    line.line,
                                );
                            }
                        }
                        path.push((location, parent));
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

    /// The child of `parent` for `frame`, created if missing.
    fn child(
        &mut self,
        index: &mut ChildIndex,
        parent: u32,
        key: (FlameFrame, u32),
        at: Option<LocationId>,
        line: i64,
    ) -> u32 {
        let nodes = &self.nodes;
        let is = |c: u32| {
            let n = &nodes[c as usize];
            n.frame == key.0 && n.split == key.1
        };
        if let Some(idx) = index.find(parent, is, key) {
            if self.nodes[idx as usize].line != line {
                self.nodes[idx as usize].line = 0;
            }
            return idx;
        }
        let idx = self.nodes.len() as u32;
        if let Some(at_of) = &mut self.at {
            at_of.push(at);
        }
        self.nodes.push(Node {
            parent,
            frame: key.0,
            split: key.1,
            line,
            total: 0,
            self_value: 0,
            base_total: 0,
            base_self: 0,
        });
        let nodes = &self.nodes;
        index.add(parent, idx, key, |c| {
            let n = &nodes[c as usize];
            (n.frame, n.split)
        });
        idx
    }

    /// The children of node `node`, ordered by name.
    pub fn children(&self, node: u32) -> &[u32] {
        let (start, end) = (
            self.child_start[node as usize],
            self.child_start[node as usize + 1],
        );
        &self.children[start as usize..end as usize]
    }

    /// Node `index` (0 is the root), for writers of other formats than ours (Parca's
    /// flame-graph table).
    pub fn node(&self, index: u32) -> FlameNode<'_> {
        let node = &self.nodes[index as usize];
        let (function, location) = match node.frame {
            FlameFrame::Root => (None, None),
            FlameFrame::Function(f) => (
                Some(self.tables.function(f)),
                self.at
                    .as_ref()
                    .and_then(|at| at[index as usize])
                    .map(|l| self.tables.location_address(l)),
            ),
            FlameFrame::Address(l) => (None, Some(self.tables.location_address(l))),
        };
        FlameNode {
            tables: self.tables,
            function,
            location,
            line: node.line,
            total: node.total,
            self_value: node.self_value,
            base_total: node.base_total,
            base_self: node.base_self,
            children: self.children(index),
        }
    }

    /// What node `index` stands for.
    pub fn frame(&self, index: u32) -> FlameFrame {
        self.nodes[index as usize].frame
    }

    /// The tables the nodes' functions and locations refer to.
    pub fn tables(&self) -> &'a Tables {
        self.tables
    }

    /// The profile's sample type, period and period type.
    pub fn meta(&self) -> &'a Meta {
        self.meta
    }

    /// Whether the tree is of a diff (its nodes have base values too).
    pub fn is_diff(&self) -> bool {
        self.is_diff
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

    /// The name node `idx` shows: its function's, or `binary+0xaddress` for an unsymbolized
    /// frame (as the top table names it); `root` for node 0.
    pub fn name(&self, idx: u32) -> std::borrow::Cow<'a, str> {
        match self.nodes[idx as usize].frame {
            FlameFrame::Root => "root".into(),
            FlameFrame::Function(f) => self.tables.string(self.tables.function(f).name).into(),
            FlameFrame::Address(l) => self.tables.location_display_name(l).into(),
        }
    }

    /// The source file of node `idx`'s function; empty for unsymbolized frames.
    pub fn file(&self, idx: u32) -> &'a str {
        match self.nodes[idx as usize].frame {
            FlameFrame::Function(f) => self.tables.string(self.tables.function(f).filename),
            _ => "",
        }
    }

    /// The object (binary) of an unsymbolized node `idx`; empty for functions.
    pub fn binary(&self, idx: u32) -> &'a str {
        match self.nodes[idx as usize].frame {
            FlameFrame::Address(l) => self.tables.location_binary(l),
            _ => "",
        }
    }

    /// Writes folded stacks (`frame;frame;frame value`, root first, one line per distinct path),
    /// the input of flamegraph.pl and inferno. A diff writes `base comparison`, the two-column
    /// form of inferno's differential flame graphs.
    pub fn write_folded(&self, out: &mut (impl Write + ?Sized)) -> io::Result<()> {
        // Depth-first in name order, carrying the path as text: lines come out sorted.
        let mut path = String::new();
        let mut stack: Vec<(u32, usize, usize)> = vec![(0, 0, 0)]; // (node, next child, path length)
        while let Some(&mut (node, ref mut next, path_len)) = stack.last_mut() {
            let children = self.children(node);
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
#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::profile;

    #[test]
    fn nodes_have_totals_self_values_and_children_by_name() {
        let p = profile(&[("main;work", 3), ("main", 1), ("gc", 2)]);
        let graph = FlameGraph::build(&p);
        assert_eq!((graph.total(), graph.len()), (6, 4));
        let names: Vec<_> = graph.children(0).iter().map(|&c| graph.name(c)).collect();
        assert_eq!(names, ["gc", "main"]);
        let main = graph.children(0)[1];
        let node = graph.node(main);
        assert_eq!((node.total, node.self_value), (4, 1));
        assert!(matches!(graph.frame(main), FlameFrame::Function(_)));
        assert_eq!(graph.name(node.children[0]), "work");
        assert!(!graph.is_diff());
    }

    #[test]
    fn very_deep_stacks_build_and_fold_without_recursion() {
        let deep = vec!["f"; 200_000].join(";");
        let p = profile(&[(&deep, 1)]);
        let graph = FlameGraph::build(&p);
        assert_eq!(graph.len(), 200_001);
        let mut folded = Vec::new();
        graph.write_folded(&mut folded).expect("write");
        assert!(folded.ends_with(b"f 1\n"));
    }
}
