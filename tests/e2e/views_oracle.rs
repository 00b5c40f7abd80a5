//! The views beyond the icicle against google/pprof: the top table at line granularity
//! (`pprof -top -lines`), the call graph (`pprof -dot`, every node and edge kept) and the
//! sandwich (`pprof -peek`); through the library on real profiles of the corpus, and through
//! `GET /api/v1/query` on a real server.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use parca_pprof::DecodeOptions;
use parca_profile::{CallGraph, FlameGraph, Granularity, Profile, TopTable};

use crate::pprof_oracle::{Rows, oracle_top_with, pprof_value, run_pprof};
use crate::server_harness::{Server, corpus_profile_at, encode, http_request, parca_binary};
use crate::support::{corpus_dir, corpus_files, pprof_oracle, read};

/// Per node name: (flat, cum); per (caller, callee): (value, inline).
#[derive(Debug, Default, PartialEq)]
struct Graph {
    nodes: BTreeMap<String, (i64, i64)>,
    edges: BTreeMap<(String, String), (i64, bool)>,
}

fn decode(path: &Path) -> Vec<Profile> {
    parca_profile::decode(&read(path), &DecodeOptions::default())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The text between `start` and the next `end` after it in `line`.
fn between<'a>(line: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = line.find(start)? + start.len();
    let len = line[from..].find(end)?;
    Some(&line[from..from + len])
}

fn unescape_dot(s: &str) -> String {
    s.replace("\\\"", "\"").replace("\\\\", "\\")
}

/// The nodes and edges of `pprof -dot` output: names and cumulative values from the nodes'
/// tooltips (the labels shorten names), flat values from the labels, edges' values and
/// inline marks from theirs. Tag nodelets (`N1_0`) are left out.
fn parse_dot(dot: &str, unit: &str) -> Graph {
    let mut graph = Graph::default();
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    for line in dot.lines() {
        let Some((id, rest)) = line.split_once(' ') else {
            continue;
        };
        if !id.starts_with('N')
            || id[1..].is_empty()
            || !id[1..].bytes().all(|b| b.is_ascii_digit())
        {
            continue;
        }
        if let Some(rest) = rest.strip_prefix("[label=\"") {
            let label = &rest[..rest.find("\" id=\"node").expect("node label")];
            let tooltip = between(rest, " tooltip=\"", "\" color=").expect("node tooltip");
            let (name, cum) = tooltip.rsplit_once(" (").expect("tooltip `name (cum)`");
            let cum = pprof_value(cum.trim_end_matches(')'), unit);
            let segments: Vec<&str> = label.split("\\n").collect();
            let last = segments[segments.len() - 1];
            let flat_segment = if last.starts_with("of ") {
                segments[segments.len() - 2]
            } else {
                last
            };
            let flat_token = flat_segment.split(' ').next().expect("a flat value");
            let flat = pprof_value(flat_token, unit);
            let name = unescape_dot(name);
            graph.nodes.insert(name.clone(), (flat, cum));
            names.insert(id.to_owned(), name);
        } else if let Some(rest) = rest.strip_prefix("-> ") {
            let (to, attrs) = rest.split_once(' ').expect("edge attributes");
            if to.contains('_') {
                continue; // a tag's nodelet
            }
            let label = between(attrs, "label=\" ", "\"").expect("edge label");
            let (value, inline) = match label.strip_suffix("\\n (inline)") {
                Some(v) => (v, true),
                None => (label, false),
            };
            graph.edges.insert(
                (names[id].clone(), names[to].clone()),
                (pprof_value(value, unit), inline),
            );
        }
    }
    graph
}

fn our_graph(graph: &CallGraph) -> Graph {
    Graph {
        nodes: graph
            .nodes
            .iter()
            .map(|n| (n.name.clone(), (n.flat, n.cum)))
            .collect(),
        edges: graph
            .edges
            .iter()
            .map(|e| {
                (
                    (
                        graph.nodes[e.from as usize].name.clone(),
                        graph.nodes[e.to as usize].name.clone(),
                    ),
                    (e.value, e.inline),
                )
            })
            .collect(),
    }
}

/// A function's entry of `pprof -peek`: its flat and cumulative values, and per caller and
/// per callee the value of the call.
#[derive(Debug, Default, PartialEq)]
struct Peek {
    flat: i64,
    cum: i64,
    callers: BTreeMap<String, i64>,
    callees: BTreeMap<String, i64>,
}

fn parse_peek(text: &str, unit: &str) -> Peek {
    let mut peek = Peek::default();
    let mut seen_node = false;
    for line in text.lines() {
        let Some((left, right)) = line.split_once('|') else {
            continue;
        };
        if left.contains("flat%") || left.starts_with("---") {
            continue;
        }
        let name = right
            .trim()
            .trim_end_matches(" (inline)")
            .trim_end_matches(" (partial-inline)")
            .to_owned();
        let tokens: Vec<&str> = left.split_whitespace().collect();
        match tokens.len() {
            5 => {
                assert!(!seen_node, "one function matched: {text}");
                seen_node = true;
                peek.flat = pprof_value(tokens[0], unit);
                peek.cum = pprof_value(tokens[3], unit);
            }
            2 => {
                let value = pprof_value(tokens[0], unit);
                let side = if seen_node {
                    &mut peek.callees
                } else {
                    &mut peek.callers
                };
                *side.entry(name).or_default() += value;
            }
            _ => {}
        }
    }
    assert!(seen_node, "pprof -peek found the function: {text}");
    peek
}

fn oracle_peek(pprof: &Path, file: &Path, index: usize, unit: &str, function: &str) -> Peek {
    let pattern = format!("^{}$", regex_escape(function));
    let out = run_pprof(pprof, file, index, unit, &["-peek", &pattern]);
    parse_peek(&out, unit)
}

fn regex_escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The callers or callees of a sandwich half: value per name of the children of the
/// function's nodes (the root's children).
fn first_level(graph: &FlameGraph<'_>) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for &f in graph.children(0) {
        for &c in graph.children(f) {
            *out.entry(graph.name(c).into_owned()).or_default() += graph.node(c).total;
        }
    }
    out
}

/// Our sandwich of `function` in pprof's shape.
fn our_peek(profile: &Profile, function: &str) -> Peek {
    let s = parca_profile::sandwich(profile, function).expect("the function is in the profile");
    let (callers, callees) = (FlameGraph::build(&s.callers), FlameGraph::build(&s.callees));
    assert_eq!(callers.total(), callees.total());
    Peek {
        flat: callees
            .children(0)
            .iter()
            .map(|&f| callees.node(f).self_value)
            .sum(),
        cum: callees.total(),
        callers: first_level(&callers),
        callees: first_level(&callees),
    }
}

/// Whether `function` recurs through other functions on some stack (pprof then counts each
/// of its calls, the sandwich's trees each sample once: they differ by design).
fn recurs_through_others(profile: &Profile, function: &str) -> bool {
    let mut folded = Vec::new();
    FlameGraph::build(profile)
        .write_folded(&mut folded)
        .expect("fold");
    String::from_utf8_lossy(&folded).lines().any(|line| {
        let frames: Vec<&str> = line
            .rsplit_once(' ')
            .map_or(line, |(s, _)| s)
            .split(';')
            .collect();
        let at: Vec<usize> = (0..frames.len())
            .filter(|&i| frames[i] == function)
            .collect();
        at.windows(2).any(|w| w[1] != w[0] + 1)
    })
}

/// Profiles for the graph and sandwich comparisons: CPU, heap, contention, a C++ profile and
/// Go's with a worker that recurses through other functions.
const GRAPH_FILES: [&str; 6] = [
    "go/go-cpu.pb.gz",
    "prometheus/prometheus-cpu.pb.gz",
    "go/go-heap.pb.gz",
    "go/go-mutex.pb.gz",
    "published/google-pprof/sample.cpu",
    "published/parca/normalizer-profile.pb.gz",
];

#[test]
fn top_at_line_granularity_equals_pprof_top_lines_for_every_corpus_file() {
    let Some(pprof) = pprof_oracle() else { return };
    let (mut compared, mut with_lines) = (0, 0);
    for (name, path) in corpus_files() {
        for (i, profile) in decode(&path).iter().enumerate() {
            let lines = parca_profile::with_granularity(profile, Granularity::Line);
            let ours: Rows = TopTable::build(&lines)
                .rows
                .into_iter()
                .filter(|r| r.flat != 0 || r.cum != 0)
                .map(|r| (r.name, (r.flat, r.cum)))
                .collect();
            let unit = &profile.meta.sample_type.unit;
            let theirs = oracle_top_with(&pprof, &path, i, unit, &["-lines"]);
            assert_eq!(
                ours, theirs,
                "{name}, sample type {}",
                profile.meta.sample_type
            );
            compared += 1;
            with_lines += usize::from(ours.keys().any(|k| k.contains(".go:")));
        }
    }
    assert!(compared >= 100, "only {compared} sample types compared");
    assert!(
        with_lines >= 20,
        "only {with_lines} profiles had Go source lines"
    );
}

#[test]
fn call_graph_equals_pprof_dot_recursion_included() {
    let Some(pprof) = pprof_oracle() else { return };
    let dir = corpus_dir();
    let mut recursive = 0;
    for file in GRAPH_FILES {
        let path = dir.join(file);
        for (i, profile) in decode(&path).iter().enumerate() {
            let unit = &profile.meta.sample_type.unit;
            let graph = CallGraph::build(profile);
            let theirs = parse_dot(&run_pprof(&pprof, &path, i, unit, &["-dot"]), unit);
            let ours = our_graph(&graph);
            assert!(
                theirs.nodes.len() > 5 && !theirs.edges.is_empty(),
                "{file} #{i}: pprof's graph was read ({} nodes, {} edges)",
                theirs.nodes.len(),
                theirs.edges.len()
            );
            assert_eq!(ours.nodes, theirs.nodes, "{file} #{i}: nodes");
            assert_eq!(ours.edges, theirs.edges, "{file} #{i}: edges");
            // Where summing the tree's paths would count a recursive call twice.
            let tree_sum = tree_edge_sums(profile);
            recursive += ours
                .edges
                .iter()
                .filter(|(k, v)| tree_sum.get(*k).is_some_and(|&t| t != v.0))
                .count();
        }
    }
    assert!(
        recursive > 0,
        "no edge of these profiles is recursive: the comparison proves less than it says"
    );
}

/// Per (caller, callee) name: the sum over the flame graph's parent-child pairs (what the
/// `CALLGRAPH` report summed before; wrong for recursion).
fn tree_edge_sums(profile: &Profile) -> BTreeMap<(String, String), i64> {
    let graph = FlameGraph::build(profile);
    let mut out = BTreeMap::new();
    let mut stack = vec![0u32];
    while let Some(node) = stack.pop() {
        for &child in graph.children(node) {
            if node != 0 && graph.name(node) != graph.name(child) {
                *out.entry((
                    graph.name(node).into_owned(),
                    graph.name(child).into_owned(),
                ))
                .or_default() += graph.node(child).total;
            }
            stack.push(child);
        }
    }
    out
}

#[test]
fn sandwich_equals_pprof_peek() {
    let Some(pprof) = pprof_oracle() else { return };
    let dir = corpus_dir();
    let (mut compared, mut with_callers) = (0, 0);
    for file in GRAPH_FILES {
        let path = dir.join(file);
        let profiles = decode(&path);
        let i = profiles.len() - 1;
        let profile = &profiles[i];
        let unit = &profile.meta.sample_type.unit;
        let graph = CallGraph::build(profile);
        // The twelve functions of largest cumulative value, and a few of the smallest.
        let names: BTreeSet<&str> = graph
            .nodes
            .iter()
            .take(12)
            .chain(graph.nodes.iter().rev().take(3))
            .map(|n| n.name.as_str())
            .filter(|n| !n.starts_with('[') && *n != "<unknown>")
            .collect();
        for name in names {
            if recurs_through_others(profile, name) {
                continue;
            }
            let theirs = oracle_peek(&pprof, &path, i, unit, name);
            with_callers += usize::from(!theirs.callers.is_empty());
            assert_eq!(our_peek(profile, name), theirs, "{file}: {name}");
            compared += 1;
        }
    }
    assert!(compared >= 40, "only {compared} functions compared");
    assert!(
        with_callers >= 30,
        "only {with_callers} functions had callers"
    );
}

/// The views through the HTTP API of a real server, on a real Go CPU profile pushed to it:
/// `format=top&granularity=lines`, `format=callgraph` and `format=sandwich` against pprof.
#[test]
fn query_api_serves_lines_call_graph_and_sandwich_as_pprof_computes_them() {
    let Some(pprof) = pprof_oracle() else { return };
    let _exclusive = crate::support::exclusive();
    let binary = parca_binary(false);
    let server = Server::start(&binary, &[], |_| "scrape_configs: []\n".to_owned());
    let file = "go/go-cpu.pb.gz";
    let path = corpus_dir().join(file);
    let at_ms = 1_700_000_000_000;
    let r = http_request(
        server.addr,
        "POST",
        "/api/v1/write?__name__=process_cpu&job=views",
        &corpus_profile_at(file, at_ms),
        Duration::from_secs(30),
    )
    .expect("push");
    assert_eq!(r.status, 200, "{}", r.text());
    let query = encode("merge(process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta{job=\"views\"})");
    let base = format!(
        "/api/v1/query?query={query}&start={}&end={}",
        at_ms / 1000 - 60,
        at_ms / 1000 + 60
    );
    let index = decode(&path)
        .iter()
        .position(|p| p.meta.sample_type.kind == "cpu")
        .expect("a cpu sample type");
    let unit = "nanoseconds";

    let top = server
        .api(&format!("{base}&format=top&granularity=lines"))
        .expect("top");
    let rows = crate::server_harness::top_rows(&top);
    let theirs = oracle_top_with(&pprof, &path, index, unit, &["-lines"]);
    let rows: Rows = rows
        .into_iter()
        .filter(|(_, (flat, cum))| *flat != 0 || *cum != 0)
        .collect();
    assert_eq!(rows, theirs, "top at line granularity");

    let data = server
        .api(&format!("{base}&format=callgraph"))
        .expect("callgraph");
    let nodes = data["nodes"].as_array().expect("nodes");
    let name = |i: &serde_json::Value| {
        nodes[i.as_u64().expect("index") as usize]["name"]
            .as_str()
            .expect("name")
            .to_owned()
    };
    let ours = Graph {
        nodes: nodes
            .iter()
            .map(|n| {
                (
                    n["name"].as_str().expect("name").to_owned(),
                    (
                        n["flat"].as_i64().expect("flat"),
                        n["cum"].as_i64().expect("cum"),
                    ),
                )
            })
            .collect(),
        edges: data["edges"]
            .as_array()
            .expect("edges")
            .iter()
            .map(|e| {
                (
                    (name(&e["from"]), name(&e["to"])),
                    (e["value"].as_i64().expect("value"), e["inline"] == true),
                )
            })
            .collect(),
    };
    let theirs = parse_dot(&run_pprof(&pprof, &path, index, unit, &["-dot"]), unit);
    assert_eq!(ours, theirs, "call graph");
    assert_eq!(data["total"], top["total"]);

    // Pruned for viewing: at most 20 nodes, none under 1% of the total.
    let pruned = server
        .api(&format!(
            "{base}&format=callgraph&max_nodes=20&node_fraction=0.01&edge_fraction=0.005"
        ))
        .expect("pruned callgraph");
    let n = pruned["nodes"].as_array().expect("nodes").len();
    assert!((1..=20).contains(&n), "{n} nodes");

    let function = "sort.insertionSort";
    let sandwich = server
        .api(&format!(
            "{base}&format=sandwich&function={}",
            encode(function)
        ))
        .expect("sandwich");
    // Each half: the root, the function, then its callers or callees.
    let function_nodes = |tree: &serde_json::Value| -> Vec<serde_json::Value> {
        tree["root"]["children"]
            .as_array()
            .expect("children")
            .clone()
    };
    let level = |tree: &serde_json::Value| -> BTreeMap<String, i64> {
        let mut out = BTreeMap::new();
        for f in function_nodes(tree) {
            for c in f["children"].as_array().expect("children") {
                *out.entry(c["name"].as_str().expect("name").to_owned())
                    .or_default() += c["value"].as_i64().expect("value");
            }
        }
        out
    };
    let ours = Peek {
        flat: function_nodes(&sandwich["callees"])
            .iter()
            .map(|f| f["self"].as_i64().expect("self"))
            .sum(),
        cum: sandwich["callees"]["total"].as_i64().expect("total"),
        callers: level(&sandwich["callers"]),
        callees: level(&sandwich["callees"]),
    };
    assert_eq!(
        ours,
        oracle_peek(&pprof, &path, index, unit, function),
        "sandwich"
    );

    // pprof at function granularity is aggregated as `pprof -proto -functions` aggregates it:
    // no line numbers, the same numbers as the lines kept.
    let r = server
        .get(&format!("{base}&format=pprof&granularity=function"))
        .expect("pprof");
    assert_eq!(r.status, 200, "{}", r.text());
    let exported = parca_profile::decode(&r.body, &DecodeOptions::default()).expect("decodes");
    let cpu = exported
        .iter()
        .find(|p| p.meta.sample_type.kind == "cpu")
        .expect("cpu");
    let tables = &cpu.tables;
    assert!(
        (0..tables.n_locations()).all(|l| {
            tables
                .lines(parca_profile::tables::LocationId(l as u32))
                .iter()
                .all(|line| line.line == 0)
        }),
        "line numbers left in a function-granularity export"
    );
    assert_eq!(
        crate::pprof_oracle::our_rows(cpu),
        crate::pprof_oracle::oracle_top(&pprof, &path, index, unit)
    );

    // A function not in the profile is a 422 that names it.
    let r = server
        .get(&format!("{base}&format=sandwich&function=no.such"))
        .expect("answer");
    assert_eq!(r.status, 422, "{}", r.text());
    assert!(r.text().contains("no.such"), "{}", r.text());
    let r = server
        .get(&format!("{base}&format=top&granularity=files"))
        .expect("answer");
    assert_eq!(r.status, 400, "{}", r.text());
}
