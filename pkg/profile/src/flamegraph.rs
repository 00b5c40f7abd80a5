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

/// Finds a node's child by frame while the tree grows. Most nodes of real trees have one child
/// or a few: their children are a linked list, scanned (the nodes were just touched, so this
/// stays in cache). Only the children of nodes with more than [`ChildIndex::WIDE`] are hashed,
/// which keeps the hash table small: a table with an entry per node cost a cache miss per frame,
/// most of the time of building the tree of a large profile.
struct ChildIndex {
    first: Vec<u32>,
    next: Vec<u32>,
    count: Vec<u32>,
    wide: FxHashMap<(u32, Frame), u32>,
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

    fn find(&self, parent: u32, is: impl Fn(u32) -> bool, frame: Frame) -> Option<u32> {
        if self.count[parent as usize] > Self::WIDE {
            return self.wide.get(&(parent, frame)).copied();
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
    fn add(&mut self, parent: u32, child: u32, frame: Frame, frame_of: impl Fn(u32) -> Frame) {
        let p = parent as usize;
        self.first.push(Self::NONE);
        self.next.push(self.first[p]);
        self.count.push(0);
        self.first[p] = child;
        self.count[p] += 1;
        if self.count[p] == Self::WIDE + 1 {
            let mut c = self.first[p];
            while c != Self::NONE {
                self.wide.insert((parent, frame_of(c)), c);
                c = self.next[c as usize];
            }
        } else if self.count[p] > Self::WIDE {
            self.wide.insert((parent, frame), child);
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
    /// Its address, when it is an unsymbolized location.
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
    fn child(&mut self, index: &mut ChildIndex, parent: u32, frame: Frame, line: i64) -> u32 {
        let nodes = &self.nodes;
        if let Some(idx) = index.find(parent, |c| nodes[c as usize].frame == frame, frame) {
            if self.nodes[idx as usize].line != line {
                self.nodes[idx as usize].line = 0;
            }
            return idx;
        }
        let idx = self.nodes.len() as u32;
        self.nodes.push(Node {
            parent,
            frame,
            line,
            total: 0,
            self_value: 0,
            base_total: 0,
            base_self: 0,
        });
        let nodes = &self.nodes;
        index.add(parent, idx, frame, |c| nodes[c as usize].frame);
        idx
    }

    fn children_of(&self, node: u32) -> &[u32] {
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
            Frame::Root => (None, None),
            Frame::Function(f) => (Some(self.tables.function(f)), None),
            Frame::Address(l) => (None, Some(self.tables.location_address(l))),
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
            children: self.children_of(index),
        }
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

/// The flame graphs of one answer in the compact layout of `/api/v1/query?format=columns`: per
/// graph, parallel arrays in pre-order (node 0 the root, children in name order, a node's
/// subtree right after it), and one JSON header with the string table. A browser lays typed
/// arrays over the bytes instead of parsing a tree. The header comes last, so the columns are
/// written once, straight into the answer (`documentation/http-api.md` has the layout):
///
/// ```text
/// 0   "PARCACOL"
/// 8   u64 LE: where the header starts
/// 16  per graph, per column of `header.columns`: `nodes` little-endian values, then zeros to a
///     multiple of 8
/// …   the header, UTF-8 JSON, to the end
/// ```
pub struct ColumnsWriter<'a> {
    strings: Vec<std::borrow::Cow<'a, str>>,
    borrowed: FxHashMap<&'a str, u32>,
    owned: FxHashMap<String, u32>,
    graphs: Vec<serde_json::Map<String, serde_json::Value>>,
    body: Vec<u8>,
    is_diff: Option<bool>,
}

/// The magic bytes that open a `columns` answer (the layout's version is in the header).
pub const COLUMNS_MAGIC: &[u8; 8] = b"PARCACOL";

/// Version of the `columns` layout, in its header.
pub const COLUMNS_VERSION: u32 = 1;

impl Default for ColumnsWriter<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'a> ColumnsWriter<'a> {
    /// An answer with no graph yet; string 0 is the empty string.
    pub fn new() -> Self {
        let mut w = ColumnsWriter {
            strings: Vec::new(),
            borrowed: FxHashMap::default(),
            owned: FxHashMap::default(),
            graphs: Vec::new(),
            // Magic and the header's offset, filled in by `finish`.
            body: vec![0; 16],
            is_diff: None,
        };
        w.intern_borrowed("");
        w
    }

    fn intern_borrowed(&mut self, s: &'a str) -> u32 {
        intern_borrowed(&mut self.strings, &mut self.borrowed, &self.owned, s)
    }

    /// Adds `graph`, leaving out every subtree whose width (`|value|`, plus `|base|` for a diff)
    /// is below `min_share` of the root's (0 keeps every node). What is left out stays counted
    /// in its ancestors' values, so totals are exact. Returns the graph's header entry, for the
    /// caller to add fields (labels of a group, say). Graphs of one answer are all diffs or none.
    pub fn add(
        &mut self,
        graph: &FlameGraph<'a>,
        min_share: f64,
    ) -> &mut serde_json::Map<String, serde_json::Value> {
        let is_diff = *self.is_diff.get_or_insert(graph.is_diff);
        debug_assert_eq!(
            is_diff, graph.is_diff,
            "graphs of one answer differ in kind"
        );
        let width = |n: &Node| n.total.unsigned_abs() as f64 + n.base_total.unsigned_abs() as f64;
        let threshold = width(&graph.nodes[0]) * min_share.max(0.0);
        // Pre-order with an explicit stack: `order[k]` is the node written at position `k`.
        let mut order: Vec<u32> = Vec::with_capacity(graph.nodes.len());
        let mut parent: Vec<i32> = Vec::with_capacity(graph.nodes.len());
        let mut stack: Vec<(u32, i32)> = vec![(0, -1)];
        while let Some((node, up)) = stack.pop() {
            let at = order.len() as i32;
            order.push(node);
            parent.push(up);
            for &child in graph.children_of(node).iter().rev() {
                if threshold == 0.0 || width(&graph.nodes[child as usize]) >= threshold {
                    stack.push((child, at));
                }
            }
        }
        // One pass in pre-order fills every column (a node is read once: nodes are in creation
        // order, so pre-order visits them out of order). Strings are memoized per string id and
        // per location, so a node costs no hashing.
        let tables = graph.tables;
        let mut by_string = vec![u32::MAX; tables.n_strings()];
        let mut by_location: FxHashMap<LocationId, (u32, u32)> = FxHashMap::default();
        let root_name = self.intern_borrowed("root");
        let n = order.len();
        let n_f64 = if is_diff { 4 } else { 2 };
        let f64_len = (n * 8).next_multiple_of(8);
        let u32_len = (n * 4).next_multiple_of(8);
        let start = self.body.len();
        self.body.resize(start + n_f64 * f64_len + 5 * u32_len, 0);
        let (f64_cols, u32_cols) = self.body[start..].split_at_mut(n_f64 * f64_len);
        let mut f64_cols: Vec<&mut [u8]> = f64_cols.chunks_mut(f64_len).collect();
        let mut u32_cols: Vec<&mut [u8]> = u32_cols.chunks_mut(u32_len).collect();
        let put_f64 = |col: &mut [u8], k: usize, v: i64| {
            col[k * 8..k * 8 + 8].copy_from_slice(&(v as f64).to_le_bytes());
        };
        let put_u32 = |col: &mut [u8], k: usize, v: u32| {
            col[k * 4..k * 4 + 4].copy_from_slice(&v.to_le_bytes());
        };
        for (k, &idx) in order.iter().enumerate() {
            let node = &graph.nodes[idx as usize];
            put_f64(f64_cols[0], k, node.total);
            put_f64(f64_cols[1], k, node.self_value);
            if is_diff {
                put_f64(f64_cols[2], k, node.base_total);
                put_f64(f64_cols[3], k, node.base_self);
            }
            let (name, file, binary) = match node.frame {
                Frame::Root => (root_name, 0, 0),
                Frame::Function(f) => {
                    let function = tables.function(f);
                    let mut get = |id: crate::tables::StringId| {
                        let slot = &mut by_string[id.idx()];
                        if *slot == u32::MAX {
                            *slot = intern_borrowed(
                                &mut self.strings,
                                &mut self.borrowed,
                                &self.owned,
                                tables.string(id),
                            );
                        }
                        *slot
                    };
                    (get(function.name), get(function.filename), 0)
                }
                Frame::Address(l) => {
                    let (name, binary) = *by_location.entry(l).or_insert_with(|| {
                        let name = tables.location_display_name(l);
                        let name = match self.borrowed.get(name.as_str()) {
                            Some(&id) => id,
                            None => *self.owned.entry(name).or_insert_with_key(|s| {
                                self.strings.push(s.clone().into());
                                self.strings.len() as u32 - 1
                            }),
                        };
                        let binary = intern_borrowed(
                            &mut self.strings,
                            &mut self.borrowed,
                            &self.owned,
                            tables.location_binary(l),
                        );
                        (name, binary)
                    });
                    (name, 0, binary)
                }
            };
            put_u32(u32_cols[0], k, parent[k] as u32);
            put_u32(u32_cols[1], k, name);
            put_u32(u32_cols[2], k, file);
            put_u32(u32_cols[3], k, node.line.clamp(0, i32::MAX as i64) as u32);
            put_u32(u32_cols[4], k, binary);
        }

        let meta = graph.meta;
        let mut head = serde_json::Map::new();
        head.insert("nodes".into(), n.into());
        head.insert("sample_type".into(), meta.sample_type.kind.clone().into());
        head.insert("unit".into(), meta.sample_type.unit.clone().into());
        head.insert("period_type".into(), meta.period_type.kind.clone().into());
        head.insert("period_unit".into(), meta.period_type.unit.clone().into());
        head.insert("period".into(), meta.period.into());
        head.insert("total".into(), graph.nodes[0].total.into());
        if is_diff {
            head.insert("base_total".into(), graph.nodes[0].base_total.into());
        }
        let omitted = graph.nodes.len() - n;
        if omitted > 0 {
            head.insert("omitted_nodes".into(), omitted.into());
        }
        self.graphs.push(head);
        self.graphs.last_mut().expect("just pushed")
    }

    /// The answer: magic, the header's offset, the graphs' columns, the header.
    pub fn finish(self) -> Vec<u8> {
        let is_diff = self.is_diff.unwrap_or(false);
        let mut columns = vec![("value", "f64"), ("self", "f64")];
        if is_diff {
            columns.extend([("base", "f64"), ("base_self", "f64")]);
        }
        columns.extend([
            ("parent", "i32"),
            ("name", "u32"),
            ("file", "u32"),
            ("line", "u32"),
            ("binary", "u32"),
        ]);
        let header = serde_json::json!({
            "version": COLUMNS_VERSION,
            "columns": columns,
            "strings": self.strings,
            "graphs": self.graphs,
        });
        let mut out = self.body;
        let header_at = out.len() as u64;
        out[..8].copy_from_slice(COLUMNS_MAGIC);
        out[8..16].copy_from_slice(&header_at.to_le_bytes());
        serde_json::to_writer(&mut out, &header).expect("a JSON value always serializes");
        out
    }
}

/// The index of `s` in `strings`, added if new (`owned` holds the strings made here, such as
/// the names of unsymbolized frames, `borrowed` those of the profiles' tables).
fn intern_borrowed<'a>(
    strings: &mut Vec<std::borrow::Cow<'a, str>>,
    borrowed: &mut FxHashMap<&'a str, u32>,
    owned: &FxHashMap<String, u32>,
    s: &'a str,
) -> u32 {
    if let Some(&id) = borrowed.get(s) {
        return id;
    }
    let id = match owned.get(s) {
        Some(&id) => id,
        None => {
            strings.push(s.into());
            strings.len() as u32 - 1
        }
    };
    borrowed.insert(s, id);
    id
}

fn write_str(out: &mut (impl Write + ?Sized), s: &str) -> io::Result<()> {
    serde_json::to_writer(&mut *out, s).map_err(io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

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

    /// Reads a `columns` answer back as a script would, and writes each graph as the text of
    /// `write_json` (same keys in the same order), so the two formats compare byte for byte.
    /// Returns the texts and the graphs' header entries.
    fn columns_to_json(bytes: &[u8]) -> (Vec<String>, Vec<serde_json::Value>) {
        use serde_json::Value;
        assert_eq!(&bytes[..8], COLUMNS_MAGIC);
        let header_at = u64::from_le_bytes(bytes[8..16].try_into().unwrap()) as usize;
        let header: Value = serde_json::from_slice(&bytes[header_at..]).expect("header");
        assert_eq!(header["version"], COLUMNS_VERSION);
        let strings: Vec<&str> = header["strings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        let quoted = |i: f64| serde_json::to_string(strings[i as usize]).unwrap();
        let mut at = 16;
        let (mut texts, mut heads) = (Vec::new(), Vec::new());
        for graph in header["graphs"].as_array().unwrap() {
            let n = graph["nodes"].as_u64().unwrap() as usize;
            let mut cols: FxHashMap<&str, Vec<f64>> = FxHashMap::default();
            for col in header["columns"].as_array().unwrap() {
                let (name, ty) = (col[0].as_str().unwrap(), col[1].as_str().unwrap());
                let width = if ty == "f64" { 8 } else { 4 };
                let values = bytes[at..at + n * width]
                    .chunks_exact(width)
                    .map(|c| match ty {
                        "f64" => f64::from_le_bytes(c.try_into().unwrap()),
                        "i32" => i32::from_le_bytes(c.try_into().unwrap()) as f64,
                        _ => u32::from_le_bytes(c.try_into().unwrap()) as f64,
                    })
                    .collect();
                cols.insert(name, values);
                at = (at + n * width).next_multiple_of(8);
            }
            let is_diff = cols.contains_key("base");
            let mut t = format!(
                r#"{{"sample_type":{},"unit":{},"period_type":{},"period_unit":{},"period":{},"total":{}"#,
                graph["sample_type"],
                graph["unit"],
                graph["period_type"],
                graph["period_unit"],
                graph["period"],
                graph["total"]
            );
            if is_diff {
                t += &format!(r#","base_total":{}"#, graph["base_total"]);
            }
            t += r#","root":"#;
            // Pre-order: before node i, close the open nodes that are not its parent.
            let mut open: Vec<usize> = Vec::new();
            for (i, &parent) in cols["parent"].iter().enumerate() {
                assert!(parent < i as f64, "a parent comes before its children");
                while let Some(&top) = open.last() {
                    if top as f64 == parent {
                        break;
                    }
                    t += "]}";
                    open.pop();
                }
                if i > 0 && !t.ends_with('[') {
                    t.push(',');
                }
                t += &format!(r#"{{"name":{}"#, quoted(cols["name"][i]));
                if cols["file"][i] != 0.0 {
                    t += &format!(r#","file":{}"#, quoted(cols["file"][i]));
                }
                if cols["line"][i] != 0.0 {
                    t += &format!(r#","line":{}"#, cols["line"][i]);
                }
                if cols["binary"][i] != 0.0 {
                    t += &format!(r#","binary":{}"#, quoted(cols["binary"][i]));
                }
                t += &format!(
                    r#","value":{},"self":{}"#,
                    cols["value"][i], cols["self"][i]
                );
                if is_diff {
                    t += &format!(
                        r#","base":{},"base_self":{}"#,
                        cols["base"][i], cols["base_self"][i]
                    );
                }
                t += r#","children":["#;
                open.push(i);
            }
            t += &"]}".repeat(open.len());
            t.push('}');
            texts.push(t);
            heads.push(graph.clone());
        }
        assert_eq!(at, header_at, "the header right after the last column");
        (texts, heads)
    }

    fn json_text(graph: &FlameGraph) -> String {
        let mut out = Vec::new();
        graph.write_json(&mut out).expect("write");
        String::from_utf8(out).expect("utf-8")
    }

    fn columns_of(graphs: &[&FlameGraph<'_>], min_share: f64) -> Vec<u8> {
        let mut w = ColumnsWriter::new();
        for g in graphs {
            w.add(g, min_share);
        }
        w.finish()
    }

    /// A profile with unsymbolized frames (binary and address), files and lines.
    fn mixed_profile() -> Profile {
        use crate::tables::{Function, LabelSetId, Line, Mapping, StringId};
        let mut p = profile(&[("main;work", 1)]);
        let tables = Arc::get_mut(&mut p.tables).expect("fresh tables");
        let file = tables.intern_string("/usr/lib/libc.so.6");
        let mapping = tables.intern_mapping(Mapping {
            memory_start: 0x1000,
            memory_limit: 0x9000,
            file_offset: 0,
            file,
            build_id: StringId::EMPTY,
            has_functions: false,
            has_filenames: false,
            has_line_numbers: false,
            has_inline_frames: false,
        });
        let a = tables.intern_location(Some(mapping), 0x1234, Box::new([]));
        let b = tables.intern_location(None, 0xbeef, Box::new([]));
        let name = tables.intern_string("main");
        let filename = tables.intern_string("src/main.go");
        let main = tables.intern_function(Function {
            name,
            system_name: name,
            filename,
            start_line: 3,
        });
        let at = |tables: &mut Tables, line| {
            tables.intern_location(
                None,
                0,
                vec![Line {
                    function: main,
                    line,
                }]
                .into(),
            )
        };
        let (m7, m9) = (at(tables, 7), at(tables, 9));
        for (frames, value) in [
            (vec![a, m7], 5),
            (vec![b, a, m7], 2),
            (vec![b, m9, m7], 3),
            (vec![m9, m7], 4),
        ] {
            p.samples.stacks.push(tables.intern_stack(&frames));
            p.samples.labels.push(LabelSetId::EMPTY);
            p.samples.values.push(value);
        }
        p
    }

    fn corpus(file: &str) -> Profile {
        let path = format!(
            "{}/../../tests/testdata/pprof/{file}",
            env!("CARGO_MANIFEST_DIR")
        );
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        crate::decode(&bytes, &Default::default())
            .expect("corpus file decodes")
            .remove(0)
    }

    #[test]
    fn columns_read_back_as_the_json_tree() {
        let go = corpus("go/go-cpu.pb.gz");
        let go_b = corpus("go/go-cpu-b.pb.gz");
        let diff = crate::diff(&go, &go_b).expect("diff");
        let mixed = mixed_profile();
        for p in [&go, &diff, &mixed] {
            let graph = FlameGraph::build(p);
            let (texts, _) = columns_to_json(&columns_of(&[&graph], 0.0));
            assert_eq!(texts, vec![json_text(&graph)]);
        }
        // The mixed profile has what the corpus file may lack.
        let text = json_text(&FlameGraph::build(&mixed));
        for part in [
            r#""binary":"libc.so.6""#,
            r#""name":"0xbeef""#,
            r#""line":7"#,
            r#""file":"src/main.go""#,
        ] {
            assert!(text.contains(part), "{part} in {text}");
        }
    }

    #[test]
    fn columns_of_several_graphs_share_one_string_table() {
        let a = profile(&[("main;work", 3), ("main;idle", 1)]);
        let b = profile(&[("main;work", 5)]);
        let (ga, gb) = (FlameGraph::build(&a), FlameGraph::build(&b));
        let bytes = columns_of(&[&ga, &gb], 0.0);
        assert_eq!(
            columns_to_json(&bytes).0,
            vec![json_text(&ga), json_text(&gb)]
        );
        let text = String::from_utf8_lossy(&bytes);
        assert_eq!(text.matches("\"work\"").count(), 1, "one string table");
    }

    #[test]
    fn min_share_omits_small_subtrees_and_keeps_totals() {
        let p = profile(&[("main;work;deep", 90), ("main;tiny;deeper", 2), ("gc", 8)]);
        let graph = FlameGraph::build(&p);
        let (texts, heads) = columns_to_json(&columns_of(&[&graph], 0.05));
        let back: serde_json::Value = serde_json::from_str(&texts[0]).expect("valid json");
        let root = &back["root"];
        assert_eq!(
            heads[0]["omitted_nodes"], 2,
            "tiny and its subtree left out"
        );
        assert_eq!(root["value"], 100);
        let main = &root["children"][1];
        assert_eq!(
            (main["name"].as_str(), main["value"].as_i64()),
            (Some("main"), Some(92))
        );
        assert_eq!(main["children"].as_array().unwrap().len(), 1);
        assert_eq!(root["children"][0]["name"], "gc");
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
        let columns = columns_of(&[&graph], 0.0);
        assert!(columns.len() > 200_001 * 32, "every node written");
    }
}
