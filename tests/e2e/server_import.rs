//! Backfill into a running server: `parca import` writes blocks into the store the server
//! serves, and the server serves them within seconds, without a restart; a folder imported
//! twice counts once; a push older than the out-of-order window is stored as a block of its own
//! and answered only once it is on disk.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::server_harness::{Server, encode, http_request, parca_binary, poll};
use crate::support::{corpus_dir, read};

const HOUR_MS: i64 = 3_600_000;

/// The 2022 folder's alloc_space type, as `--name memory` names it.
const ALLOC_SPACE: &str = "memory:alloc_space:bytes:space:bytes";

fn parca_import(binary: &Path, store: &Path, folder: &Path) -> String {
    let output = Command::new(binary)
        .arg("import")
        .arg(format!("--storage-path={}", store.display()))
        .args(["--name", "memory", "--label", "job=import"])
        .arg("--allow-past-retention")
        .arg(folder)
        .output()
        .expect("run parca import");
    assert!(
        output.status.success(),
        "parca import: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The server's merge of `query` over `[start_ms, end_ms]` as pprof, or why not.
fn merged_total(server: &Server, query: &str, start_ms: i64, end_ms: i64) -> Result<i64, String> {
    let r = server.get(&format!(
        "/api/v1/query?format=pprof&start={}&end={}&query={}",
        start_ms as f64 / 1000.0,
        end_ms as f64 / 1000.0,
        encode(query)
    ))?;
    if r.status != 200 {
        return Err(format!("HTTP {}: {}", r.status, r.text()));
    }
    let profiles =
        parca_profile::decode(&r.body, &Default::default()).map_err(|e| e.to_string())?;
    Ok(profiles.iter().map(parca_profile::Profile::total).sum())
}

fn push(server: &Server, query: &str, body: &[u8]) -> (u16, String) {
    let r = http_request(
        server.addr,
        "POST",
        &format!("/api/v1/write?{query}"),
        body,
        Duration::from_secs(30),
    )
    .expect("push");
    (r.status, r.text())
}

fn log_count(server: &Server, text: &str) -> usize {
    std::fs::read_to_string(server.dir.path().join("parca.log"))
        .unwrap_or_default()
        .matches(text)
        .count()
}

#[test]
fn a_running_server_serves_imported_blocks_and_pushes_past_the_window() {
    let binary = parca_binary(false);
    // Retention 0: the store holds this year's profiles and 2022's side by side.
    let server = Server::start(&binary, &["--storage-retention-time=0"], |_| {
        "scrape_configs: []\n".to_owned()
    });
    let store = server.dir.path().join("data");
    let cpu_file = read(&corpus_dir().join("go/go-cpu.pb.gz"));
    let (status, answer) = push(&server, "__name__=process_cpu&job=live", &cpu_file);
    assert_eq!(status, 200, "{answer}");

    // (a) Import into the running server's store; it serves the block within seconds.
    let many = corpus_dir().join("published/parca/many");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&many)
        .expect("folder")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    let want: i64 = files
        .iter()
        .map(|f| {
            let profiles = parca_profile::decode(&read(f), &Default::default()).expect("decodes");
            parca_profile::select_sample_type(profiles, Some("alloc_space"), None)
                .expect("alloc_space")
                .total()
        })
        .sum();
    let (start_ms, end_ms) = (1_644_508_800_000, 1_644_516_000_000);
    let query = format!("{ALLOC_SPACE}{{job=\"import\"}}");
    let summary = parca_import(&binary, &store, &many);
    assert!(summary.contains("40 profiles of 4 series"), "{summary}");
    let total = poll(
        "the server to serve the imported block",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || merged_total(&server, &query, start_ms, end_ms),
    );
    assert_eq!(total, want);

    // (b) Imported again: two blocks hold each profile until compaction merges them; either
    // way each counts once.
    parca_import(&binary, &store, &many);
    poll(
        "the server to pick up the second import",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || match log_count(&server, "serving a block written into the data directory") {
            2 => Ok(()),
            n => Err(format!("{n} blocks picked up")),
        },
    );
    assert_eq!(merged_total(&server, &query, start_ms, end_ms), Ok(want));
    poll(
        "the overlapping blocks to be compacted",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || match log_count(&server, "compacted blocks") {
            0 => Err("not yet".into()),
            _ => Ok(()),
        },
    );
    assert_eq!(merged_total(&server, &query, start_ms, end_ms), Ok(want));

    // (c) A push 5 h behind its series' newest: stored as a block, queryable at once.
    let mut old = parca_pprof::decode(&cpu_file, &Default::default())
        .expect("decodes")
        .to_proto();
    let newest_ms = old.time_nanos / 1_000_000;
    old.time_nanos -= 5 * HOUR_MS * 1_000_000;
    let (status, answer) = push(
        &server,
        "__name__=process_cpu&job=live",
        &parca_pprof::encode(&old, true),
    );
    assert_eq!(status, 200, "{answer}");
    let cpu_total = parca_profile::select_sample_type(
        parca_profile::decode(&cpu_file, &Default::default()).expect("decodes"),
        Some("cpu"),
        None,
    )
    .expect("cpu")
    .total();
    let cpu_query = "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta{job=\"live\"}";
    let at_old = newest_ms - 5 * HOUR_MS;
    assert_eq!(
        merged_total(&server, cpu_query, at_old - 1000, at_old + 1000),
        Ok(cpu_total)
    );
    assert_eq!(
        merged_total(&server, cpu_query, at_old - 1000, newest_ms + 1000),
        Ok(2 * cpu_total)
    );
}

/// A push of profiles older than the server keeps (`--storage-retention-time` back from now) is
/// refused with a 400 naming the flag and the profile's time, not acknowledged and then deleted
/// by retention; nothing of it is stored. The Pyroscope path refuses the same.
#[test]
fn pushes_older_than_the_retention_are_refused_not_stored_then_deleted() {
    let binary = parca_binary(false);
    let server = Server::start(&binary, &["--storage-retention-time=15d"], |_| {
        "scrape_configs: []\n".to_owned()
    });
    let mut old = parca_pprof::decode(
        &read(&corpus_dir().join("go/go-cpu.pb.gz")),
        &Default::default(),
    )
    .expect("decodes")
    .to_proto();
    // 2022-02-10T16:00:00Z, years past a 15-day retention, on an empty store too.
    old.time_nanos = 1_644_508_800_000 * 1_000_000;
    let old = parca_pprof::encode(&old, true);
    let (status, answer) = push(&server, "__name__=process_cpu&job=old", &old);
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer.contains("profile at 2022-02-10T16:00:00Z")
            && answer.contains("`--storage-retention-time` is 15d"),
        "{answer}"
    );
    let (status, answer) = {
        let r = http_request(
            server.addr,
            "POST",
            "/ingest?name=old.cpu&from=1644508800&until=1644508810&format=pprof",
            &old,
            Duration::from_secs(30),
        )
        .expect("push");
        (r.status, r.text())
    };
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("--storage-retention-time"), "{answer}");
    let series = server
        .api("/api/v1/series?match[]=%7B__name__%3D~%22.%2B%22%7D&start=0")
        .expect("series");
    assert_eq!(
        series,
        serde_json::json!([]),
        "nothing of the push is stored"
    );

    // A profile of today is taken as before.
    let mut fresh = parca_pprof::decode(&old, &Default::default())
        .expect("decodes")
        .to_proto();
    fresh.time_nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos() as i64;
    let (status, answer) = push(
        &server,
        "__name__=process_cpu&job=fresh",
        &parca_pprof::encode(&fresh, true),
    );
    assert_eq!(status, 200, "{answer}");
}
