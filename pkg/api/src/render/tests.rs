//! The wire formats against each other: a `columns` answer read back as a script would gives
//! the JSON tree byte for byte.
#![allow(
    clippy::too_many_lines,
    reason = "tests are scenarios read top to bottom; the line budget is for product code"
)]

use std::sync::Arc;

use parca_profile::test_support::profile;
use parca_profile::{FlameGraph, Profile, Tables};
use rustc_hash::FxHashMap;

use super::*;

#[test]
fn json_has_totals_and_self_values() {
    let p = profile(&[("main;work", 3), ("main", 1)]);
    let mut out = Vec::new();
    write_flame_graph_json(&FlameGraph::build(&p), &mut out).expect("write");
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
    write_flame_graph_json(graph, &mut out).expect("write");
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
    use parca_profile::tables::{Function, LabelSetId, Line, Mapping, StringId};
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
    parca_profile::decode(&bytes, &Default::default())
        .expect("corpus file decodes")
        .remove(0)
}

#[test]
fn columns_read_back_as_the_json_tree() {
    let go = corpus("go/go-cpu.pb.gz");
    let go_b = corpus("go/go-cpu-b.pb.gz");
    let diff = parca_profile::diff(&go, &go_b).expect("diff");
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
    write_flame_graph_json(&graph, &mut out).expect("write");
    assert!(out.ends_with(b"]}]}}"));
    let columns = columns_of(&[&graph], 0.0);
    assert!(columns.len() > 200_001 * 32, "every node written");
}
