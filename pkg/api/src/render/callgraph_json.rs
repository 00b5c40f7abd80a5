//! The call graph as JSON (`/api/v1/query?format=callgraph`).

use parca_profile::{CallEdge, CallGraph, CallNode};
use serde::Serialize;

/// [`CallGraph`] in the JSON shape the HTTP API documents: `nodes` (`name`, `file`, `flat`,
/// `cum`), `edges` (`from`, `to` index `nodes`, caller to callee; `value`, `inline`,
/// `residual`), `total`; a diff adds the base side's values (`base_…`).
#[derive(Debug, Serialize)]
pub struct CallGraphJson<'a> {
    sample_type: &'a str,
    unit: &'a str,
    total: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    base_total: Option<i64>,
    nodes: Vec<NodeJson<'a>>,
    edges: Vec<EdgeJson>,
}

#[derive(Debug, Serialize)]
struct NodeJson<'a> {
    name: &'a str,
    file: &'a str,
    flat: i64,
    cum: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    base_flat: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    base_cum: Option<i64>,
}

#[derive(Debug, Serialize)]
struct EdgeJson {
    from: u32,
    to: u32,
    value: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    base_value: Option<i64>,
    inline: bool,
    residual: bool,
}

impl<'a> From<&'a CallGraph> for CallGraphJson<'a> {
    fn from(graph: &'a CallGraph) -> Self {
        let node = |n: &'a CallNode| NodeJson {
            name: &n.name,
            file: &n.file,
            flat: n.flat,
            cum: n.cum,
            base_flat: n.base_flat,
            base_cum: n.base_cum,
        };
        let edge = |e: &CallEdge| EdgeJson {
            from: e.from,
            to: e.to,
            value: e.value,
            base_value: e.base_value,
            inline: e.inline,
            residual: e.residual,
        };
        CallGraphJson {
            sample_type: &graph.sample_type,
            unit: &graph.unit,
            total: graph.total,
            base_total: graph.base_total,
            nodes: graph.nodes.iter().map(node).collect(),
            edges: graph.edges.iter().map(edge).collect(),
        }
    }
}
