//! The call graph: one node per function (per line or address at finer granularity, see
//! [`crate::with_granularity`]) and one edge per caller and callee, as google/pprof builds the
//! graph behind `-dot`, `-web` and `-peek`.
//!
//! A node's flat value is what the samples ending in it hold, its cumulative value what the
//! samples through it hold, counted once per sample however often it recurs. An edge's value is
//! what the samples in which the caller calls the callee hold, also counted once per sample: a
//! recursive stack `main;f;g;f;g` adds its value to `f → g` once, not twice (summing along the
//! flame-graph tree's paths would count it twice). A function calling itself directly makes no
//! edge, as in pprof. Pruning ([`Pruning`]) follows pprof's `-nodefraction`, `-edgefraction` and
//! `-nodecount`: the graph is rebuilt from the samples over the nodes kept, and a call that
//! went through dropped nodes becomes a *residual* edge (pprof's dotted arrow).

use indexmap::IndexMap;
use rustc_hash::{FxBuildHasher, FxHashMap};

use crate::frames::Namer;
use crate::profile::Profile;
use crate::tables::StackId;

/// One node of the graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallNode {
    /// Its name, as the top table names it.
    pub name: String,
    /// The source file of its function (empty when unknown).
    pub file: String,
    /// Value of samples ending here.
    pub flat: i64,
    /// Value of samples through here, counted once per sample.
    pub cum: i64,
    /// For a diff: the base side's `flat`.
    pub base_flat: Option<i64>,
    /// For a diff: the base side's `cum`.
    pub base_cum: Option<i64>,
}

/// One call: `from` (the caller, an index into [`CallGraph::nodes`]) called `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallEdge {
    /// The caller's node index.
    pub from: u32,
    /// The callee's node index.
    pub to: u32,
    /// Value of the samples with this call on their stack, counted once per sample.
    pub value: i64,
    /// For a diff: the base side's `value`.
    pub base_value: Option<i64>,
    /// Whether every such call was inlined (the callee is an inlined frame of the caller's
    /// location).
    pub inline: bool,
    /// Whether the call went through nodes that pruning dropped (never in an unpruned graph).
    pub residual: bool,
}

/// pprof's pruning of the graph for viewing; the default keeps everything.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Pruning {
    /// Drop nodes whose cumulative value is under this share of the total (`-nodefraction`).
    pub node_fraction: f64,
    /// Drop edges whose value is under this share of the total (`-edgefraction`).
    pub edge_fraction: f64,
    /// Keep at most this many nodes, those of largest cumulative value (`-nodecount`).
    pub max_nodes: Option<usize>,
}

/// A profile's call graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallGraph {
    /// What the values measure, e.g. `cpu`.
    pub sample_type: String,
    /// Their unit, e.g. `nanoseconds`.
    pub unit: String,
    /// The profile's total.
    pub total: i64,
    /// For a diff: the base side's total.
    pub base_total: Option<i64>,
    /// Nodes, largest cumulative value first (then by name).
    pub nodes: Vec<CallNode>,
    /// Edges, ordered by caller and callee index.
    pub edges: Vec<CallEdge>,
}

/// Every distinct stack's frames as node ids, root first, each with whether it is inlined
/// into the frame before it; and its summed values.
struct Paths<'a> {
    namer: Namer<'a>,
    frames: Vec<(u32, bool)>,
    starts: Vec<usize>,
    values: Vec<[i64; 2]>,
}

impl<'a> Paths<'a> {
    fn new(profile: &'a Profile) -> Self {
        let tables = &*profile.tables;
        let samples = &profile.samples;
        let mut per_stack: FxHashMap<StackId, [i64; 2]> = FxHashMap::default();
        for i in 0..samples.len() {
            let base = samples.diff_base.as_ref().map_or(0, |b| b[i]);
            let e = per_stack.entry(samples.stacks[i]).or_default();
            e[0] = e[0].wrapping_add(samples.values[i]);
            e[1] = e[1].wrapping_add(base);
        }
        let mut order: Vec<(StackId, [i64; 2])> = per_stack.into_iter().collect();
        order.sort_unstable_by_key(|&(s, _)| s);
        let mut paths = Paths {
            namer: Namer::new(tables),
            frames: Vec::new(),
            starts: vec![0],
            values: Vec::new(),
        };
        let mut lines = Vec::new();
        for (stack, value) in order {
            // pprof skips samples of value 0.
            if value == [0, 0] {
                continue;
            }
            for &location in tables.stack(stack).iter().rev() {
                lines.clear();
                paths.namer.location(location, &mut lines);
                // Innermost first: the last is the location's own function, the rest inlined.
                let n = lines.len();
                for (i, &node) in lines.iter().enumerate().rev() {
                    paths.frames.push((node, i != n - 1));
                }
            }
            paths.starts.push(paths.frames.len());
            paths.values.push(value);
        }
        paths
    }

    fn len(&self) -> usize {
        self.values.len()
    }

    fn path(&self, i: usize) -> &[(u32, bool)] {
        &self.frames[self.starts[i]..self.starts[i + 1]]
    }
}

/// Values of one edge while the graph is summed.
#[derive(Debug, Clone, Copy)]
struct EdgeSum {
    value: [i64; 2],
    inline: bool,
    residual: bool,
}

/// The graph's sums over the nodes kept (all when `kept` is `None`), as pprof's `newGraph`.
struct Sums {
    flat: Vec<[i64; 2]>,
    cum: Vec<[i64; 2]>,
    edges: IndexMap<(u32, u32), EdgeSum, FxBuildHasher>,
}

fn sum(paths: &Paths<'_>, kept: Option<&[bool]>) -> Sums {
    let n = paths.namer.len();
    let mut sums = Sums {
        flat: vec![[0; 2]; n],
        cum: vec![[0; 2]; n],
        edges: IndexMap::default(),
    };
    let mut node_seen = vec![usize::MAX; n];
    let mut edge_seen: Vec<usize> = Vec::new();
    for i in 0..paths.len() {
        let [value, base] = paths.values[i];
        let add = |s: &mut [i64; 2]| {
            s[0] = s[0].wrapping_add(value);
            s[1] = s[1].wrapping_add(base);
        };
        let mut parent: Option<u32> = None;
        let mut residual = false;
        for &(node, inline) in paths.path(i) {
            if kept.is_some_and(|k| !k[node as usize]) {
                residual = true;
                continue;
            }
            if node_seen[node as usize] != i {
                node_seen[node as usize] = i;
                add(&mut sums.cum[node as usize]);
            }
            if let Some(p) = parent.filter(|&p| p != node) {
                let entry = sums.edges.entry((p, node));
                let idx = entry.index();
                let edge = entry.or_insert(EdgeSum {
                    value: [0; 2],
                    inline: true,
                    residual: false,
                });
                if edge_seen.len() <= idx {
                    edge_seen.resize(idx + 1, usize::MAX);
                }
                if edge_seen[idx] != i {
                    edge_seen[idx] = i;
                    add(&mut edge.value);
                    edge.residual |= residual;
                    edge.inline &= inline;
                }
            }
            parent = Some(node);
            residual = false;
        }
        if let Some(leaf) = parent.filter(|_| !residual) {
            add(&mut sums.flat[leaf as usize]);
        }
    }
    sums
}

impl CallGraph {
    /// The whole graph of `profile`, as `pprof -dot -nodecount=1000000 -nodefraction=0
    /// -edgefraction=0` draws it.
    pub fn build(profile: &Profile) -> CallGraph {
        Self::build_pruned(profile, &Pruning::default())
    }

    /// The graph of `profile` pruned as pprof prunes it for viewing: nodes under
    /// `node_fraction` of the total dropped, then the `max_nodes` of largest cumulative value
    /// kept, the graph rebuilt over them (calls through dropped nodes become residual edges),
    /// edges under `edge_fraction` dropped, and residual edges that another path already
    /// explains removed.
    pub fn build_pruned(profile: &Profile, pruning: &Pruning) -> CallGraph {
        let paths = Paths::new(profile);
        let mut sums = sum(&paths, None);
        // pprof's cutoffs are shares of the sum of flat values (samples with frames).
        let flat_total = sums.flat.iter().fold(0i64, |a, s| a.wrapping_add(s[0]));
        let cutoff = |fraction: f64| (flat_total as f64 * fraction).abs() as i64;
        let (node_cutoff, edge_cutoff) =
            (cutoff(pruning.node_fraction), cutoff(pruning.edge_fraction));
        let mut kept: Option<Vec<bool>> = None;
        if node_cutoff > 0 {
            kept = Some(sums.cum.iter().map(|c| c[0].abs() >= node_cutoff).collect());
        }
        if let Some(max) = pruning.max_nodes {
            let mut order: Vec<u32> = (0..sums.cum.len() as u32)
                .filter(|&i| {
                    let present = sums.cum[i as usize] != [0, 0];
                    present && kept.as_ref().is_none_or(|k| k[i as usize])
                })
                .collect();
            if order.len() > max {
                order.sort_by(|&a, &b| {
                    let (a, b) = (a as usize, b as usize);
                    sums.cum[b][0]
                        .abs()
                        .cmp(&sums.cum[a][0].abs())
                        .then(sums.flat[b][0].abs().cmp(&sums.flat[a][0].abs()))
                        .then(a.cmp(&b))
                });
                let mut k = vec![false; sums.cum.len()];
                for &i in &order[..max] {
                    k[i as usize] = true;
                }
                kept = Some(k);
            }
        }
        if let Some(k) = &kept {
            sums = sum(&paths, Some(k));
        }
        if edge_cutoff > 0 {
            sums.edges.retain(|_, e| e.value[0].abs() >= edge_cutoff);
        }
        if sums.edges.values().any(|e| e.residual) {
            remove_redundant_edges(&mut sums, &paths);
        }
        Self::from_sums(profile, &paths, sums)
    }

    fn from_sums(profile: &Profile, paths: &Paths<'_>, sums: Sums) -> CallGraph {
        let is_diff = profile.is_diff();
        let names: Vec<&str> = (0..paths.namer.len())
            .map(|i| paths.namer.name(i as u32))
            .collect();
        let mut order: Vec<u32> = (0..names.len() as u32)
            .filter(|&i| sums.cum[i as usize] != [0, 0] || sums.flat[i as usize] != [0, 0])
            .collect();
        order.sort_by(|&a, &b| {
            let (a, b) = (a as usize, b as usize);
            sums.cum[b][0]
                .abs()
                .cmp(&sums.cum[a][0].abs())
                .then(names[a].cmp(names[b]))
        });
        let mut index = vec![u32::MAX; names.len()];
        for (new, &old) in order.iter().enumerate() {
            index[old as usize] = new as u32;
        }
        let nodes = order
            .iter()
            .map(|&i| {
                let (flat, cum) = (sums.flat[i as usize], sums.cum[i as usize]);
                CallNode {
                    name: names[i as usize].to_owned(),
                    file: crate::clean_path(paths.namer.file(i)),
                    flat: flat[0],
                    cum: cum[0],
                    base_flat: is_diff.then_some(flat[1]),
                    base_cum: is_diff.then_some(cum[1]),
                }
            })
            .collect();
        let mut edges: Vec<CallEdge> = sums
            .edges
            .iter()
            .filter(|&(&(from, to), _)| {
                index[from as usize] != u32::MAX && index[to as usize] != u32::MAX
            })
            .map(|(&(from, to), e)| CallEdge {
                from: index[from as usize],
                to: index[to as usize],
                value: e.value[0],
                base_value: is_diff.then_some(e.value[1]),
                inline: e.inline,
                residual: e.residual,
            })
            .collect();
        edges.sort_by_key(|e| (e.from, e.to));
        CallGraph {
            sample_type: profile.meta.sample_type.kind.clone(),
            unit: profile.meta.sample_type.unit.clone(),
            total: profile.total(),
            base_total: profile.base_total(),
            nodes,
            edges,
        }
    }

    /// The graph in Graphviz's `dot` language, nodes labelled with name, flat and cumulative
    /// values (`unit` is the values' unit, as given), edges with their values; residual edges
    /// dotted and inlined calls marked, as pprof draws them.
    pub fn to_dot(&self) -> String {
        use std::fmt::Write;
        let escape = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
        let mut out = String::from(
            "digraph \"callgraph\" {\nnode [style=filled fillcolor=\"#f8f8f8\" shape=box]\n",
        );
        let _ = writeln!(
            out,
            "label=\"{}: total {} {}\"",
            escape(&self.sample_type),
            self.total,
            escape(&self.unit)
        );
        for (i, n) in self.nodes.iter().enumerate() {
            let _ = writeln!(
                out,
                "N{i} [label=\"{}\\n{} of {} {}\" tooltip=\"{} ({})\"]",
                escape(&n.name),
                n.flat,
                n.cum,
                escape(&self.unit),
                escape(&n.name),
                n.cum
            );
        }
        for e in &self.edges {
            let mut attrs = format!(
                "label=\" {}{}\"",
                e.value,
                if e.inline { "\\n (inline)" } else { "" }
            );
            if e.residual {
                attrs.push_str(" style=\"dotted\"");
            }
            let _ = writeln!(out, "N{} -> N{} [{attrs}]", e.from, e.to);
        }
        out.push_str("}\n");
        out
    }
}

/// pprof's `RemoveRedundantEdges`: a residual edge is dropped when its callee can be reached
/// from its caller another way; lighter edges first, and never an edge heavier than a
/// non-residual one into the same node.
fn remove_redundant_edges(sums: &mut Sums, paths: &Paths<'_>) {
    let n = sums.cum.len();
    let mut incoming: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, (&(_, to), _)) in sums.edges.iter().enumerate() {
        incoming[to as usize].push(i);
    }
    let mut removed = vec![false; sums.edges.len()];
    // pprof walks nodes from the lightest; its order is by flat, then cumulative value.
    let mut nodes: Vec<usize> = (0..n).collect();
    nodes.sort_by(|&a, &b| {
        sums.flat[b][0]
            .abs()
            .cmp(&sums.flat[a][0].abs())
            .then(sums.cum[b][0].abs().cmp(&sums.cum[a][0].abs()))
            .then(paths.namer.name(a as u32).cmp(paths.namer.name(b as u32)))
    });
    for &node in nodes.iter().rev() {
        let mut ins = incoming[node].clone();
        ins.sort_by(|&a, &b| {
            let (ea, eb) = (&sums.edges[a], &sums.edges[b]);
            eb.value[0].abs().cmp(&ea.value[0].abs())
        });
        for &e in ins.iter().rev() {
            if !sums.edges[e].residual {
                break;
            }
            let (&(src, dst), _) = sums.edges.get_index(e).expect("edge index in range");
            // Breadth-first up the callers of `dst`, without this edge.
            let mut seen = vec![false; n];
            seen[dst as usize] = true;
            let mut queue = std::collections::VecDeque::from([dst as usize]);
            let mut redundant = false;
            'search: while let Some(at) = queue.pop_front() {
                for &ie in &incoming[at] {
                    if ie == e || removed[ie] {
                        continue;
                    }
                    let caller = sums.edges.get_index(ie).expect("edge index").0.0 as usize;
                    if seen[caller] {
                        continue;
                    }
                    if caller == src as usize {
                        redundant = true;
                        break 'search;
                    }
                    seen[caller] = true;
                    queue.push_back(caller);
                }
            }
            if redundant {
                removed[e] = true;
            }
        }
    }
    let mut i = 0;
    sums.edges.retain(|_, _| {
        i += 1;
        !removed[i - 1]
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::profile;

    fn edges(g: &CallGraph) -> Vec<(String, String, i64)> {
        let mut out: Vec<_> = g
            .edges
            .iter()
            .map(|e| {
                (
                    g.nodes[e.from as usize].name.clone(),
                    g.nodes[e.to as usize].name.clone(),
                    e.value,
                )
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn recursion_counts_each_call_once_per_sample() {
        let p = profile(&[("main;f;g;f;g", 3), ("main;f;f;h", 2), ("main", 1)]);
        let g = CallGraph::build(&p);
        let e = |a: &str, b: &str, v| (a.to_owned(), b.to_owned(), v);
        assert_eq!(
            edges(&g),
            [
                e("f", "g", 3),
                e("f", "h", 2),
                e("g", "f", 3),
                e("main", "f", 5)
            ]
        );
        let node = |name: &str| {
            let n = g.nodes.iter().find(|n| n.name == name).expect("node");
            (n.flat, n.cum)
        };
        assert_eq!(node("main"), (1, 6));
        assert_eq!(node("f"), (0, 5));
        assert_eq!(node("g"), (3, 3));
        assert_eq!(g.nodes[0].name, "main");
        assert_eq!(g.total, 6);
    }

    #[test]
    fn pruned_nodes_leave_residual_edges_that_are_dropped_when_redundant() {
        let p = profile(&[("main;a;b;leaf", 10), ("main;leaf", 5), ("main;c", 1)]);
        let pruned = CallGraph::build_pruned(
            &p,
            &Pruning {
                node_fraction: 0.0,
                edge_fraction: 0.0,
                max_nodes: Some(2),
            },
        );
        let names: Vec<_> = pruned.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["main", "leaf"]);
        // `main → leaf` is direct for 5 and through `a;b` for 10: one edge, residual.
        assert_eq!(pruned.edges.len(), 1);
        assert_eq!(pruned.edges[0].value, 15);
        assert!(pruned.edges[0].residual);
        let by_share = CallGraph::build_pruned(
            &p,
            &Pruning {
                node_fraction: 0.2,
                edge_fraction: 0.0,
                max_nodes: None,
            },
        );
        assert!(!by_share.nodes.iter().any(|n| n.name == "c"));
        assert!(by_share.to_dot().contains("N0 -> N1"));
    }
}
