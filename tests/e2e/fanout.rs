//! Sharded scraping and a querier, end to end: two servers scrape one list of real targets
//! (this package's Rust target, several instances) split by Prometheus' `hashmod`, and ship
//! one-minute blocks to one bucket; a `--mode=query` server reads the bucket and asks each
//! shard for what it has not shipped yet. Its answers must equal, number for number, those of
//! one server holding every profile (built from the shards' own profiles, pushed with their
//! times). A shard killed afterwards leaves a partial answer that says so.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use md5::{Digest, Md5};
use parca_tsdb::{PeerAnswer, PeerRead, PeerRequest};

use crate::server::start_target;
use crate::server_harness::{
    Process, Server, encode, http_request, outside_target, parca_binary, poll, run_json_script,
    skip, top_total,
};

/// The CPU profile's type.
const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta";

/// The shard (0 or 1) that `hashmod` with modulus 2 gives a target address, as Prometheus
/// computes it.
fn shard_of(address: &str) -> usize {
    let digest = Md5::digest(address.as_bytes());
    let last8: [u8; 8] = digest[8..16].try_into().expect("8 bytes");
    (u64::from_be_bytes(last8) % 2) as usize
}

/// Rust targets until each shard has two, and their addresses.
fn start_targets(dir: &Path) -> (Vec<Process>, Vec<String>) {
    let (mut processes, mut addresses) = (Vec::new(), Vec::new());
    let mut per_shard = [0usize; 2];
    while per_shard.iter().any(|&n| n < 2) {
        assert!(
            processes.len() < 16,
            "hashmod put every target on one shard"
        );
        let mut command = Command::new(env!("CARGO_BIN_EXE_e2e-rust-target"));
        command.args(["--addr", "127.0.0.1:{port}", "--duty", "0.05"]);
        let name = format!("rust-target-{}", processes.len());
        let (process, address) = start_target(&name, command, "/healthz", dir);
        let shard = shard_of(&address);
        if per_shard[shard] >= 2 {
            continue; // dropped: this shard has its two
        }
        per_shard[shard] += 1;
        processes.push(process);
        addresses.push(address);
    }
    (processes, addresses)
}

fn bucket_yaml(bucket: &Path) -> String {
    format!(
        "object_storage:\n  bucket:\n    type: FILESYSTEM\n    prefix: fleet\n    config: {{directory: {}}}\n",
        bucket.display()
    )
}

/// A shard's parca.yaml: every target listed, `hashmod` keeping its share.
fn shard_config(bucket: &Path, shard: usize, targets: &[String]) -> String {
    let list = targets
        .iter()
        .map(|t| format!("\"{t}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "global:\n  scrape_interval: 4s\n  external_labels: {{shard: \"{shard}\"}}\n{}\
         scrape_configs:\n  - job_name: rust\n    static_configs: [{{targets: [{list}]}}]\n    \
         relabel_configs:\n      - {{source_labels: [__address__], modulus: 2, target_label: __tmp_shard, action: hashmod}}\n      \
         - {{source_labels: [__tmp_shard], regex: \"{shard}\", action: keep}}\n    \
         profiling_config:\n      pprof_config:\n        memory: {{enabled: false}}\n        \
         block: {{enabled: false}}\n        mutex: {{enabled: false}}\n        goroutine: {{enabled: false}}\n",
        bucket_yaml(bucket)
    )
}

/// Every profile a shard holds itself (head and blocks on disk), through its store API.
fn profiles_of(shard: &Server) -> PeerAnswer {
    let request = PeerRequest {
        read: PeerRead::Select,
        matchers: Vec::new(),
        min_ms: i64::MIN,
        max_ms: i64::MAX,
    };
    let r = http_request(
        shard.addr,
        "POST",
        "/api/v1/store/read",
        &request.encode(),
        Duration::from_secs(60),
    )
    .expect("store read");
    assert_eq!(r.status, 200, "{}", r.text());
    PeerAnswer::decode(&r.body, 1 << 30).expect("decodes")
}

/// Pushes every profile of `answer` to `server` as pprof, with its series' labels and time.
fn push_all(server: &Server, answer: &PeerAnswer) -> usize {
    let mut n = 0;
    for s in &answer.series {
        let name = s.labels.get("__name__").expect("name");
        let name = name.split(':').next().expect("profile name");
        let mut query = format!("__name__={}", encode(name));
        for l in s.labels.iter().filter(|l| l.name != "__name__") {
            query.push_str(&format!("&{}={}", encode(&l.name), encode(&l.value)));
        }
        for (p, samples) in s.profiles.iter().zip(&s.samples) {
            let profile = parca_profile::Profile {
                tables: answer.tables.clone(),
                meta: parca_profile::Meta {
                    time_nanos: p.point.timestamp_ms * 1_000_000,
                    duration_nanos: p.point.duration_nanos,
                    period: p.point.period,
                    ..s.meta.clone()
                },
                samples: samples.clone(),
            };
            let bytes = parca_pprof::encode(&parca_profile::to_pprof(&profile), true);
            let r = http_request(
                server.addr,
                "POST",
                &format!("/api/v1/write?{query}"),
                &bytes,
                Duration::from_secs(30),
            )
            .expect("push");
            assert_eq!(r.status, 200, "{}", r.text());
            n += 1;
        }
    }
    n
}

/// `data` of a JSON answer, and its warnings.
fn answer(server: &Server, path: &str) -> (serde_json::Value, Vec<String>) {
    let r = server.get(path).expect("query");
    let json: serde_json::Value =
        serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("{path}: {e}: {}", r.text()));
    assert_eq!(json["status"], "success", "{path}: {json}");
    let warnings = json["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| w.as_str().map(str::to_owned))
        .collect();
    (json["data"].clone(), warnings)
}

/// The queries compared: profiles, series of totals, aggregations that are not sums of parts,
/// stack filters (read profile by profile), and metadata.
fn queries(start: f64, end: f64, instances: &[String]) -> Vec<String> {
    let window = format!("start={start}&end={end}");
    let range = format!("{window}&step=5");
    let q = |text: &str| encode(text);
    let mut out = vec![
        format!(
            "/api/v1/query?format=top&{window}&query={}",
            q(&format!("merge({CPU})"))
        ),
        format!(
            "/api/v1/query?format=top&{window}&query={}",
            q(&format!("merge({CPU}{{job=\"rust\"}} |= \"rust_hot_fnv\")"))
        ),
        format!("/api/v1/query_range?{range}&query={}", q(CPU)),
        format!(
            "/api/v1/query_range?{range}&query={}",
            q(&format!("sum by (instance) ({CPU})"))
        ),
        format!(
            "/api/v1/query_range?{range}&query={}",
            q(&format!("sum({CPU})"))
        ),
        format!(
            "/api/v1/query_range?{range}&query={}",
            q(&format!("topk(2, {CPU})"))
        ),
        format!(
            "/api/v1/query_range?{range}&query={}",
            q(&format!("avg({CPU})"))
        ),
        format!(
            "/api/v1/query_range?{range}&query={}",
            q(&format!("count({CPU})"))
        ),
        format!(
            "/api/v1/query_range?{range}&query={}",
            q(&format!("max({CPU})"))
        ),
        format!(
            "/api/v1/query_range?{range}&query={}",
            q(&format!("sum({CPU} |= \"rust_hot_xorshift\")"))
        ),
        format!(
            "/api/v1/query?time={end}&query={}",
            q(&format!("topk(3, {CPU}[10m])"))
        ),
        format!("/api/v1/series?{window}&match[]={}", q("{job=\"rust\"}")),
        format!("/api/v1/labels?{window}"),
        format!("/api/v1/label/instance/values?{window}"),
        format!("/api/v1/profile_types?{window}"),
    ];
    for i in instances {
        out.push(format!(
            "/api/v1/query?format=top&{window}&query={}",
            q(&format!("merge({CPU}{{instance=\"{i}\"}})"))
        ));
    }
    out
}

#[test]
fn a_querier_over_two_shards_and_their_bucket_answers_as_one_server_holding_everything() {
    let work = tempfile::tempdir().expect("tempdir");
    let bucket = work.path().join("bucket");
    let (targets, addresses) = start_targets(work.path());
    let shards: Vec<Server> = (0..2)
        .map(|i| {
            Server::start(
                &parca_binary(false),
                &["--storage-block-duration=1m"],
                |_| shard_config(&bucket, i, &addresses),
            )
        })
        .collect();
    let started = Instant::now();
    // One shard listed in a file of URLs, the other by parca.yaml's `query_stores`.
    let list = work.path().join("shards.txt");
    std::fs::write(&list, format!("# shard 0\nhttp://{}\n", shards[0].addr)).expect("write");
    let querier = Server::start(
        &parca_binary(false),
        &[
            "--mode=query",
            &format!("--query-store-file={}", list.display()),
        ],
        |_| {
            format!(
                "{}query_stores:\n  - job_name: shards\n    static_configs: [{{targets: [\"{}\"]}}]\n",
                bucket_yaml(&bucket),
                shards[1].addr
            )
        },
    );

    // Each shard ships a block; the heads hold the rest.
    poll(
        "each shard to ship a block",
        Duration::from_secs(240),
        Duration::from_secs(1),
        || {
            let until: Vec<serde_json::Value> = shards
                .iter()
                .map(|s| s.api("/api/v1/status/store").expect("status")["shippedUntil"].clone())
                .collect();
            if until.iter().all(|u| u.is_i64()) {
                Ok(())
            } else {
                Err(format!("shipped until {until:?}"))
            }
        },
    );
    // The targets stop. The data is fixed once each shard has seen every endpoint down: a
    // scrape under way at the stop has ended then, stored or failed, and every later one fails.
    drop(targets);
    poll(
        "each shard to see its stopped targets down",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || {
            for shard in &shards {
                let data = shard.api("/api/v1/targets")?;
                for target in data["activeTargets"].as_array().ok_or("no activeTargets")? {
                    for p in target["profiles"].as_array().ok_or("no profiles[]")? {
                        if p["health"] != "down" {
                            return Err(format!(
                                "{} {}: {}",
                                target["scrapeUrl"], p["name"], p["health"]
                            ));
                        }
                    }
                }
            }
            Ok(())
        },
    );
    crate::agent::say(&format!(
        "fan-out: {} targets, blocks shipped after {:.0} s",
        addresses.len(),
        started.elapsed().as_secs_f64()
    ));

    // One server holding everything: each shard's own profiles, pushed with their times.
    let reference = Server::start(&parca_binary(false), &[], |_| "scrape_configs: []\n".into());
    let mut pushed = 0;
    for shard in &shards {
        pushed += push_all(&reference, &profiles_of(shard));
    }
    assert!(pushed > 20, "{pushed} profiles");

    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    let (start, end) = (now - 900.0, now + 60.0);
    let instances: Vec<String> = addresses.clone();
    // Twice: as the querier first lists the bucket (a block a shard shipped may not be listed
    // yet: that shard answers for it), and once it lists every shipped block.
    compare(
        &querier,
        &reference,
        &queries(start, end, &instances),
        pushed,
    );
    poll(
        "the querier to list both shards' blocks",
        Duration::from_secs(60),
        Duration::from_secs(1),
        || match querier.api("/api/v1/status/tsdb").expect("status")["bucketBlocks"].as_u64() {
            Some(n) if n >= 2 => Ok(()),
            n => Err(format!("{n:?} blocks")),
        },
    );
    compare(
        &querier,
        &reference,
        &queries(start, end, &instances),
        pushed,
    );

    // The querier says what it knows of its shards.
    let status = querier.api("/api/v1/status/tsdb").expect("status");
    let listed = status["shards"].as_array().expect("shards");
    assert_eq!(listed.len(), 2, "{status}");
    assert!(
        listed
            .iter()
            .all(|s| s["up"] == true && s["externalLabels"]["shard"].is_string()),
        "{status}"
    );
    // A shard killed: the answer goes on without its head, and says so.
    let down = shards[1].addr;
    let mut shards = shards;
    drop(shards.pop()); // killed
    let path = &queries(start, end, &instances)[0];
    let (partial, warnings) = answer(&querier, path);
    assert!(
        warnings
            .iter()
            .any(|w| w.contains(&down.to_string()) && w.contains("missing")),
        "{warnings:?}"
    );
    let (whole, _) = answer(&reference, path);
    assert!(
        top_total(&partial) < top_total(&whole),
        "the partial answer misses the shard's head"
    );
    // Other formats carry the warning in a header.
    let r = querier
        .get(&path.replace("format=top", "format=pprof"))
        .expect("pprof");
    assert_eq!(r.status, 200);
    assert!(
        r.header("parca-warning")
            .is_some_and(|w| w.contains(&down.to_string())),
        "{:?}",
        r.headers
    );
    let metrics = querier.get("/metrics").expect("metrics").text();
    assert!(
        metrics.contains("parca_query_store_failed_reads_total"),
        "{metrics}"
    );
}

/// Asks both servers every query: the same data, no warnings, nothing empty.
fn compare(querier: &Server, reference: &Server, queries: &[String], pushed: usize) {
    let (mut took_querier, mut took_reference) = (Duration::ZERO, Duration::ZERO);
    for path in queries {
        let t = Instant::now();
        let (want, _) = answer(reference, path);
        took_reference += t.elapsed();
        let t = Instant::now();
        let (got, warnings) = answer(querier, path);
        took_querier += t.elapsed();
        assert!(warnings.is_empty(), "{path}: {warnings:?}");
        assert_eq!(got, want, "{path}");
        assert!(
            !(want.is_null() || want.as_array().is_some_and(Vec::is_empty)),
            "{path}: empty answer {want}"
        );
    }
    let merged = answer(querier, &queries[0]).0;
    let status = querier.api("/api/v1/status/tsdb").expect("status");
    let n = queries.len() as f64;
    crate::agent::say(&format!(
        "fan-out: {} queries equal one server's ({pushed} profiles, {} bucket blocks listed by the querier, {} top rows); querier {:.1} ms, one server {:.1} ms per query",
        queries.len(),
        status["bucketBlocks"],
        merged["rows"].as_array().map_or(0, Vec::len),
        took_querier.as_secs_f64() * 1000.0 / n,
        took_reference.as_secs_f64() * 1000.0 / n,
    ));
}

#[test]
fn shards_behind_tls_and_credentials_are_read_with_a_scrape_jobs_settings_listed_in_a_file() {
    use crate::security::{curl, server_certificate, write};
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (_ca, ca_file) = server_certificate(d);
    let hash = bcrypt::hash("s3cret", 6).expect("hash");
    let web = write(
        d,
        "web.yml",
        &format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\nbasic_auth_users:\n  alice: {hash}\n"
        ),
    );
    let shard = Server::spawn(
        &parca_binary(false),
        None,
        &[&format!("--web-config-file={}", web.display())],
        |_| "scrape_configs: []\n".into(),
    );
    let base = format!("https://127.0.0.1:{}", shard.addr.port());
    let ca_arg = ca_file.to_str().expect("path");
    let corpus = crate::server_harness::tests_dir().join("testdata/pprof/go/go-cpu.pb.gz");
    let push = poll(
        "the protected shard to take a push",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || {
            let got = curl(
                d,
                &[
                    "--cacert",
                    ca_arg,
                    "-u",
                    "alice:s3cret",
                    "--data-binary",
                    &format!("@{}", corpus.display()),
                    &format!("{base}/api/v1/write?__name__=process_cpu&job=protected"),
                ],
            );
            if got.status == 200 {
                Ok(got)
            } else {
                Err(format!("{got:?}"))
            }
        },
    );
    assert_eq!(push.status, 200);
    let window = "start=0&end=4102444800";
    let query = format!(
        "/api/v1/query?format=top&{window}&query={}",
        encode(&format!("merge({CPU})"))
    );
    let own = curl(
        d,
        &[
            "--cacert",
            ca_arg,
            "-u",
            "alice:s3cret",
            &format!("{base}{query}"),
        ],
    );
    assert_eq!(own.status, 200, "{own:?}");
    let own: serde_json::Value = serde_json::from_str(&own.body).expect("json");

    // The querier lists its shards in a file_sd file, empty at first; the group's settings say
    // how to reach them.
    let list = write(d, "shards.yml", "[]\n");
    let querier = Server::start(&parca_binary(false), &["--mode=query"], |_| {
        format!(
            "query_stores:\n  - job_name: shards\n    scheme: https\n    tls_config: {{ca_file: {ca}}}\n    \
             basic_auth: {{username: alice, password: s3cret}}\n    file_sd_configs: [{{files: [{list}]}}]\n",
            ca = ca_file.display(),
            list = list.display()
        )
    });
    write(
        d,
        "shards.yml",
        &format!("[{{targets: [\"127.0.0.1:{}\"]}}]\n", shard.addr.port()),
    );
    let (got, warnings) = poll(
        "the querier to read the shard listed in its file",
        Duration::from_secs(40),
        Duration::from_millis(500),
        || {
            let r = querier.get(&query)?;
            if r.status == 200 {
                let json: serde_json::Value = serde_json::from_slice(&r.body).expect("json");
                let warnings = json["warnings"].clone();
                Ok((json["data"].clone(), warnings))
            } else {
                Err(r.text())
            }
        },
    );
    assert!(warnings.is_null(), "{warnings}");
    assert_eq!(got, own["data"]);

    // Without the CA and the credentials: no silent gap, a warning that says why.
    let stranger = Server::start(
        &parca_binary(false),
        &["--mode=query", &format!("--query-store={base}")],
        |_| "scrape_configs: []\n".into(),
    );
    let r = stranger.get(&query).expect("query");
    let text = r.text();
    assert!(
        text.contains(&base) && text.contains("cannot be read") && text.contains("certificate"),
        "{text}"
    );
    // Parca's gRPC API says it too, in the response's metadata, to a real gRPC client.
    match outside_target("python-arrow") {
        Ok(python) => {
            let got = run_json_script(
                &python,
                "python-arrow/grpc_metadata.py",
                &[stranger.addr.to_string(), "ProfileTypes".into()],
            );
            assert_eq!(got["code"], "OK", "{got}");
            let warned = got["metadata"].as_array().into_iter().flatten().any(|kv| {
                kv[0] == "parca-warning" && kv[1].as_str().is_some_and(|v| v.contains(&base))
            });
            assert!(warned, "{got}");
        }
        Err(why) => skip("grpcio (tests/tools/targets.sh python-arrow)", &why),
    }
}
