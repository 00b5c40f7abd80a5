//! The `columns` layout of flame graphs (`/api/v1/query?format=columns`): what the web UI reads,
//! typed arrays laid over the bytes instead of a parsed tree. `documentation/http-api.md` has the
//! layout.

use parca_profile::tables::{LocationId, StringId};
use parca_profile::{FlameFrame, FlameGraph, FlameNode};
use rustc_hash::FxHashMap;

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
    #[expect(
        clippy::too_many_lines,
        reason = "the pre-order walk writing every column of a node at once: split, each column would walk again"
    )]
    pub fn add(
        &mut self,
        graph: &FlameGraph<'a>,
        min_share: f64,
    ) -> &mut serde_json::Map<String, serde_json::Value> {
        let is_diff = *self.is_diff.get_or_insert(graph.is_diff());
        debug_assert_eq!(
            is_diff,
            graph.is_diff(),
            "graphs of one answer differ in kind"
        );
        let width =
            |n: &FlameNode| n.total.unsigned_abs() as f64 + n.base_total.unsigned_abs() as f64;
        let threshold = width(&graph.node(0)) * min_share.max(0.0);
        // Pre-order with an explicit stack: `order[k]` is the node written at position `k`.
        let mut order: Vec<u32> = Vec::with_capacity(graph.len());
        let mut parent: Vec<i32> = Vec::with_capacity(graph.len());
        let mut stack: Vec<(u32, i32)> = vec![(0, -1)];
        while let Some((node, up)) = stack.pop() {
            let at = order.len() as i32;
            order.push(node);
            parent.push(up);
            for &child in graph.children(node).iter().rev() {
                if threshold == 0.0 || width(&graph.node(child)) >= threshold {
                    stack.push((child, at));
                }
            }
        }
        // One pass in pre-order fills every column (a node is read once: nodes are in creation
        // order, so pre-order visits them out of order). Strings are memoized per string id and
        // per location, so a node costs no hashing.
        let tables = graph.tables();
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
            let node = graph.node(idx);
            put_f64(f64_cols[0], k, node.total);
            put_f64(f64_cols[1], k, node.self_value);
            if is_diff {
                put_f64(f64_cols[2], k, node.base_total);
                put_f64(f64_cols[3], k, node.base_self);
            }
            let (name, file, binary) = match graph.frame(idx) {
                FlameFrame::Root => (root_name, 0, 0),
                FlameFrame::Function(f) => {
                    let function = tables.function(f);
                    let mut get = |id: StringId| {
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
                FlameFrame::Address(l) => {
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

        let meta = graph.meta();
        let mut head = serde_json::Map::new();
        head.insert("nodes".into(), n.into());
        head.insert("sample_type".into(), meta.sample_type.kind.clone().into());
        head.insert("unit".into(), meta.sample_type.unit.clone().into());
        head.insert("period_type".into(), meta.period_type.kind.clone().into());
        head.insert("period_unit".into(), meta.period_type.unit.clone().into());
        head.insert("period".into(), meta.period.into());
        head.insert("total".into(), graph.total().into());
        if is_diff {
            head.insert("base_total".into(), graph.node(0).base_total.into());
        }
        let omitted = graph.len() - n;
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
