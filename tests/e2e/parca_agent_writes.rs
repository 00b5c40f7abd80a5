//! Parca Agent's Arrow writes, built by pyarrow to the agent's own schemas
//! (`tests/targets/python-arrow/write_arrow.py`) and sent by grpcio: `WriteArrow` (schema v2:
//! run-end encoded dictionary labels, a ListView of dictionary-encoded locations with nested
//! function dictionaries, LZ4-compressed IPC) and the two-phase `Write` stream (schema v1: the
//! server asks for the stacks the samples name). What arrives must be queryable as the agent's
//! own pprof would be; a record with a column missing or of the wrong type is refused naming
//! it, and nothing of it is stored. Without the venv (`tests/tools/targets.sh python-arrow`)
//! the test says so and passes, except under `PARCA_REQUIRE_TARGETS=1`.

use std::collections::BTreeMap;
use std::path::Path;

use crate::server_harness::{
    Server, encode, outside_target, parca_binary, run_json_script, skip, top_rows,
};

/// Runs `write_arrow.py` against `server` with `args`; its one line of JSON.
fn write(python: &Path, server: &Server, time_ns: i64, args: &[&str]) -> serde_json::Value {
    let mut all = vec![server.addr.to_string(), time_ns.to_string()];
    all.extend(args.iter().map(|a| (*a).to_owned()));
    run_json_script(python, "python-arrow/write_arrow.py", &all)
}

const CPU: &str = "parca_agent:samples:count:cpu:nanoseconds:delta";

/// `/api/v1/query` for the merge of a minute of `selector` sent at `time_ms`, in `format`.
fn merged_minute(format: &str, selector: &str, time_ms: i64) -> String {
    let query = format!("merge({CPU}{{{selector}}}[1m])");
    format!(
        "/api/v1/query?format={format}&query={}&time={}",
        encode(&query),
        (time_ms + 30_000) as f64 / 1000.0
    )
}

/// Function → (flat, cum) of the merged samples of `selector` around `time_ms`.
fn top(server: &Server, selector: &str, time_ms: i64) -> BTreeMap<String, (i64, i64)> {
    let data = server
        .api(&merged_minute("top", selector, time_ms))
        .expect("query");
    top_rows(&data)
}

fn series(server: &Server, selector: &str) -> Vec<serde_json::Value> {
    server
        .api(&format!("/api/v1/series?match[]={}", encode(selector)))
        .expect("series")
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// What the report of `write_arrow.py` must read as, sent at `time_ms` under `node`.
fn check_report(server: &Server, node: &str, time_ms: i64) {
    let gzip = top(server, &format!("node=\"{node}\", comm=\"gzip\""), time_ms);
    // Kernel frames carry their names; the native ones (not symbolized by the agent) their
    // addresses in gzip. Leaf first: deflate ← zip ← main and ksys_read ← entry ← main.
    assert_eq!(gzip.get("ksys_read"), Some(&(2, 2)), "{gzip:?}");
    assert_eq!(
        gzip.get("entry_SYSCALL_64_after_hwframe"),
        Some(&(0, 2)),
        "{gzip:?}"
    );
    // The native frames, unsymbolized, are one row per binary in the top table.
    assert_eq!(gzip.get("[gzip]"), Some(&(5, 7)), "{gzip:?}");
    assert_eq!(gzip.len(), 3, "{gzip:?}");
    // In the pprof they keep their addresses in gzip's mapping, with its build id.
    let gzip_selector = format!("node=\"{node}\", comm=\"gzip\"");
    let response = server
        .get(&merged_minute("pprof", &gzip_selector, time_ms))
        .expect("pprof");
    assert_eq!(response.status, 200, "{}", response.text());
    let pprof = parca_pprof::decode(&response.body, &Default::default()).expect("pprof decodes");
    let mut native: Vec<(u64, String, String)> = pprof
        .locations()
        .iter()
        .filter_map(|l| {
            let m = &pprof.mappings()[l.mapping? as usize];
            let file = pprof.string(m.filename);
            (file == "/usr/bin/gzip").then(|| {
                (
                    l.address,
                    file.to_owned(),
                    pprof.string(m.build_id).to_owned(),
                )
            })
        })
        .collect();
    native.sort();
    let id = "3f1c2b0a9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f40";
    let expected: Vec<(u64, String, String)> = [0x2c30, 0x3b20, 0x4a10]
        .into_iter()
        .map(|a| (a, "/usr/bin/gzip".to_owned(), id.to_owned()))
        .collect();
    assert_eq!(native, expected);
    let python = top(
        server,
        &format!("node=\"{node}\", comm=\"python3\""),
        time_ms,
    );
    assert_eq!(python.get("compress"), Some(&(7, 7)), "{python:?}");
    assert_eq!(python.get("<module>"), Some(&(0, 7)), "{python:?}");
    // The labels split series as the agent's pprof labels do.
    let threads: Vec<String> = series(server, &format!("{{node=\"{node}\", comm=\"python3\"}}"))
        .iter()
        .map(|s| {
            assert_eq!(s["__name__"], CPU, "{s}");
            s["thread_name"].as_str().unwrap_or_default().to_owned()
        })
        .collect();
    assert_eq!(threads, ["MainThread", "worker"]);
}

#[test]
fn parca_agent_arrow_writes_are_stored_as_its_pprof_would_be() {
    let python = match outside_target("python-arrow") {
        Ok(python) => python,
        Err(why) => return skip("pyarrow (tests/tools/targets.sh python-arrow)", &why),
    };
    let server = Server::start(&parca_binary(false), &[], |_| "scrape_configs: []\n".into());
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    let time_ms = now_ms - 60_000;

    let sent = write(&python, &server, time_ms * 1_000_000, &["--node", "v2"]);
    assert_eq!(sent["ok"], true, "{sent}");
    check_report(&server, "v2", time_ms);

    let sent = write(
        &python,
        &server,
        (time_ms + 5_000) * 1_000_000,
        &["--node", "v1", "--v1"],
    );
    assert_eq!(sent["ok"], true, "{sent}");
    assert_eq!(
        sent["asked_for"], 3,
        "the server asks for each stack once: {sent}"
    );
    check_report(&server, "v1", time_ms + 5_000);

    // A column missing, or of a type that cannot hold it: refused naming it, nothing stored.
    for (broken, named) in [("value", "`value`"), ("producer", "`producer`")] {
        let node = format!("broken-{broken}");
        let answer = write(
            &python,
            &server,
            time_ms * 1_000_000,
            &["--node", &node, "--break", broken],
        );
        assert_eq!(answer["code"], "INVALID_ARGUMENT", "{answer}");
        let message = answer["message"].as_str().unwrap_or_default();
        assert!(message.contains(named), "{answer}");
        assert!(
            series(&server, &format!("{{node=\"{node}\"}}")).is_empty(),
            "{broken}"
        );
    }
}
