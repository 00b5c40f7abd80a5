//! Flame graphs as the JSON tree of `/api/v1/query?format=json` (and `parca profile --format
//! json`).

use std::io::{self, Write};

use parca_profile::FlameGraph;

/// Writes the tree as the JSON of the HTTP API (`/api/v1/query?format=json`):
/// `{"sample_type", "unit", "period_type", "period", "total", ["base_total",] "root": node}` where
/// a node is `{"name", ["file", "line", "binary",] "value", "self", ["base", "base_self",]
/// "children": [...]}`, children ordered by name. Written without recursion, so stack depth is
/// no limit.
pub fn write_flame_graph_json(
    graph: &FlameGraph<'_>,
    out: &mut (impl Write + ?Sized),
) -> io::Result<()> {
    let meta = graph.meta();
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
        meta.period,
        graph.total()
    )?;
    if graph.is_diff() {
        write!(out, ",\"base_total\":{}", graph.node(0).base_total)?;
    }
    write!(out, ",\"root\":")?;
    // Explicit stack of (node, index of next child to write).
    let mut stack: Vec<(u32, usize)> = vec![(0, 0)];
    write_node_head(graph, out, 0)?;
    while let Some(&mut (node, ref mut next)) = stack.last_mut() {
        let children = graph.children(node);
        if *next < children.len() {
            let child = children[*next];
            if *next > 0 {
                out.write_all(b",")?;
            }
            *next += 1;
            write_node_head(graph, out, child)?;
            stack.push((child, 0));
        } else {
            out.write_all(b"]}")?;
            stack.pop();
        }
    }
    out.write_all(b"}")
}

fn write_node_head(
    graph: &FlameGraph<'_>,
    out: &mut (impl Write + ?Sized),
    idx: u32,
) -> io::Result<()> {
    let n = graph.node(idx);
    write!(out, "{{\"name\":")?;
    write_str(out, &graph.name(idx))?;
    let file = graph.file(idx);
    if !file.is_empty() {
        write!(out, ",\"file\":")?;
        write_str(out, file)?;
    }
    if n.line != 0 {
        write!(out, ",\"line\":{}", n.line)?;
    }
    let binary = graph.binary(idx);
    if !binary.is_empty() {
        write!(out, ",\"binary\":")?;
        write_str(out, binary)?;
    }
    write!(out, ",\"value\":{},\"self\":{}", n.total, n.self_value)?;
    if graph.is_diff() {
        write!(
            out,
            ",\"base\":{},\"base_self\":{}",
            n.base_total, n.base_self
        )?;
    }
    out.write_all(b",\"children\":[")
}

fn write_str(out: &mut (impl Write + ?Sized), s: &str) -> io::Result<()> {
    serde_json::to_writer(&mut *out, s).map_err(io::Error::other)
}
