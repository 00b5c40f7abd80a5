//! The server against the real Pyroscope Python SDK, end to end: one `parca` (no scrape jobs)
//! receives the pushes of two copies of a small Python program (`tests/targets/python-push`)
//! that keeps `push_hot_fib` and `push_hot_hash` busy while pyroscope-io samples it with py-spy:
//!
//! - pyroscope-io 1.4.0 pushes to `POST /push.v1.PusherService/Push` (Connect, protobuf, gzip)
//!   every 2 s;
//! - pyroscope-io 0.8.16 pushes to the legacy `POST /ingest?name=…&from=…&until=…&format=pprof`
//!   on 10-second aligned windows.
//!
//! Both run at once, each under its own application name. Once each has pushed a few times, the
//! API's `series` lists `process_cpu` series with that `service_name` (and the SDK's tags as
//! labels), `query_range` has a point per push, `query … format=top` shows the program's hot
//! functions, and `/metrics` counts every push request as answered 200.
//!
//! The venvs come from `tests/tools/targets.sh python-push` / `python-push-legacy`; without
//! Python, venv or pip an SDK is skipped with a message, and is a failure under
//! `PARCA_REQUIRE_TARGETS=1`.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::server_harness::{
    Process, Server, encode, outside_target, parca_binary, poll, skip, tests_dir,
};

/// pyroscope-io 1.x's upload interval, seconds.
const UPLOAD_INTERVAL: u64 = 2;

/// The hot functions of the Python program, which each SDK's CPU profile must show.
const HOT: &[&str] = &["push_hot_fib", "push_hot_hash"];

/// How long the test waits for both SDKs' pushes: the legacy one pushes at the end of each
/// 10-second window, so its second push comes 10–20 s after it starts; the rest is slack for a
/// busy machine.
const PUSH_DEADLINE: Duration = Duration::from_secs(45);

/// One SDK of the test: which venv it runs in and what the server must show of it.
struct Sdk {
    /// `tests/tools/targets.sh` mode that makes its venv.
    mode: &'static str,
    /// pyroscope-io's version, pinned in its requirements file; also the `sdk` tag it sends.
    version: &'static str,
    /// The application name, which the server stores as `service_name`.
    service: &'static str,
    /// The endpoint it pushes to (`handler` of `parca_http_requests_total`).
    endpoint: &'static str,
    /// How many pushes (distinct profile times) the test waits for.
    pushes: usize,
    /// Labels, besides `service_name` and the tags, that its series must have.
    labels: &'static [(&'static str, &'static str)],
}

/// The two SDKs, run at once against one server.
const SDKS: [Sdk; 2] = [
    Sdk {
        mode: "python-push",
        version: "1.4.0",
        service: "e2e-push-connect",
        endpoint: "/push.v1.PusherService/Push",
        pushes: 3,
        labels: &[("otel_scope_name", "com.grafana.pyroscope/python")],
    },
    Sdk {
        mode: "python-push-legacy",
        version: "0.8.16",
        service: "e2e-push-legacy",
        endpoint: "/ingest",
        pushes: 2,
        labels: &[("spy_name", "pyspy")],
    },
];

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64()
}

/// A line of the test's own report on stderr (shown with `--nocapture`).
fn report(line: &str) {
    #[allow(clippy::print_stderr)]
    {
        eprintln!("server push e2e: {line}");
    }
}

/// Starts the push program with `python`, pointed at `server` under the SDK's name.
fn start_sdk(sdk: &Sdk, python: &Path, server: &Server, dir: &Path) -> Process {
    let mut command = Command::new(python);
    command
        .arg(tests_dir().join("targets/python-push/app.py"))
        .arg("--server")
        .arg(format!("http://{}", server.addr))
        .args(["--app", sdk.service])
        .args(["--upload-interval", &UPLOAD_INTERVAL.to_string()])
        .args(["--duty", "0.05"]);
    Process::start(sdk.mode, command, &dir.join(format!("{}.log", sdk.mode)))
}

/// The series of one `service_name`.
fn series(server: &Server, service: &str, start: f64) -> Result<Vec<Value>, String> {
    let selector = format!("{{service_name=\"{service}\"}}");
    let data = server.api(&format!(
        "/api/v1/series?match[]={}&start={start:.3}&end={:.3}",
        encode(&selector),
        unix_now() + 1.0
    ))?;
    data.as_array()
        .cloned()
        .ok_or_else(|| format!("series is not a list: {data}"))
}

/// The `process_cpu` profile type among a service's series.
fn cpu_type(series: &[Value]) -> Result<String, String> {
    series
        .iter()
        .filter_map(|s| s["__name__"].as_str())
        .find(|t| t.starts_with("process_cpu:"))
        .map(str::to_owned)
        .ok_or_else(|| {
            let types: BTreeSet<&str> = series
                .iter()
                .filter_map(|s| s["__name__"].as_str())
                .collect();
            format!("no process_cpu series yet; types: {types:?}")
        })
}

/// Distinct times with a non-zero value of `TYPE{service_name="…"}` per second since `start`:
/// one per push.
fn push_times(
    server: &Server,
    profile_type: &str,
    service: &str,
    start: f64,
) -> Result<usize, String> {
    let query = format!("{profile_type}{{service_name=\"{service}\"}}");
    let data = server.api(&format!(
        "/api/v1/query_range?query={}&start={start:.3}&end={:.3}&step=1s",
        encode(&query),
        unix_now() + 1.0
    ))?;
    let mut times = BTreeSet::new();
    for s in data["result"].as_array().ok_or("no result list")? {
        for p in s["values"].as_array().ok_or("no values")? {
            let value: f64 = p[1].as_str().and_then(|v| v.parse().ok()).unwrap_or(0.0);
            if value > 0.0 {
                times.insert(p[0].to_string());
            }
        }
    }
    Ok(times.len())
}

/// Function names with a non-zero cumulative value in
/// `merge(TYPE{service_name="…"}[5m])`, `format=top`.
fn top_functions(
    server: &Server,
    profile_type: &str,
    service: &str,
) -> Result<BTreeSet<String>, String> {
    let query = format!("merge({profile_type}{{service_name=\"{service}\"}}[5m])");
    let r = server.get(&format!(
        "/api/v1/query?query={}&format=top",
        encode(&query)
    ))?;
    let v: Value = serde_json::from_slice(&r.body)
        .map_err(|e| format!("{query}: HTTP {}, not JSON ({e}): {}", r.status, r.text()))?;
    if r.status != 200 || v["status"] != "success" {
        return Err(format!("{query}: HTTP {}: {v}", r.status));
    }
    let rows = v["data"]["rows"]
        .as_array()
        .ok_or_else(|| format!("{query}: no data.rows in {v}"))?;
    Ok(rows
        .iter()
        .filter(|r| r["cum"].as_i64().unwrap_or(0) != 0)
        .filter_map(|r| r["name"].as_str().map(str::to_owned))
        .collect())
}

/// Whether everything the server should show of one SDK is there yet; `Ok` names its profile
/// type and how many pushes it saw.
fn check_sdk(server: &Server, sdk: &Sdk, start: f64) -> Result<(String, usize), String> {
    let series = series(server, sdk.service, start)?;
    let profile_type = cpu_type(&series)?;
    for s in series
        .iter()
        .filter(|s| s["__name__"].as_str() == Some(profile_type.as_str()))
    {
        for (name, value) in [("e2e", "python-push"), ("sdk", sdk.version)]
            .iter()
            .chain(sdk.labels)
        {
            if s[*name] != *value {
                return Err(format!("series {s} has no label {name}=\"{value}\""));
            }
        }
    }
    let pushes = push_times(server, &profile_type, sdk.service, start)?;
    if pushes < sdk.pushes {
        return Err(format!(
            "{pushes} of {} pushes of {profile_type} so far",
            sdk.pushes
        ));
    }
    let names = top_functions(server, &profile_type, sdk.service)?;
    let missing: Vec<&str> = HOT
        .iter()
        .filter(|h| !names.iter().any(|n| n.contains(*h)))
        .copied()
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "{profile_type}: no {missing:?} among the top functions {names:?}"
        ));
    }
    Ok((profile_type, pushes))
}

/// The profile types that `/api/v1/profile_types` lists, as `name:sample:unit:period:unit[:delta]`.
fn profile_types(server: &Server) -> BTreeSet<String> {
    let data = server
        .api("/api/v1/profile_types")
        .unwrap_or_else(|e| panic!("{e}"));
    data.as_array()
        .unwrap_or_else(|| panic!("profile_types is not a list: {data}"))
        .iter()
        .map(|t| {
            let field = |k: &str| t[k].as_str().unwrap_or_default().to_owned();
            let mut id = [
                "name",
                "sample_type",
                "sample_unit",
                "period_type",
                "period_unit",
            ]
            .map(field)
            .join(":");
            if t["delta"] == true {
                id.push_str(":delta");
            }
            id
        })
        .collect()
}

/// `parca_http_requests_total` of one handler, by status code.
fn requests_by_code(metrics: &str, handler: &str) -> Vec<(String, u64)> {
    let handler = format!("handler=\"{handler}\"");
    metrics
        .lines()
        .filter_map(|line| line.strip_prefix("parca_http_requests_total{"))
        .filter_map(|rest| rest.split_once('}'))
        .filter(|(labels, _)| labels.split(',').any(|l| l == handler))
        .filter_map(|(labels, count)| {
            let code = labels
                .split("code=\"")
                .nth(1)?
                .split('"')
                .next()?
                .to_owned();
            Some((code, count.trim().parse().ok()?))
        })
        .collect()
}

#[test]
fn server_ingests_pushes_of_the_real_pyroscope_python_sdk() {
    let _exclusive = crate::support::exclusive();
    let t0 = Instant::now();
    let mut sdks = Vec::new();
    for sdk in &SDKS {
        match outside_target(sdk.mode) {
            Ok(python) => sdks.push((sdk, python)),
            Err(why) => skip(&format!("pyroscope-io {}", sdk.version), &why),
        }
    }
    if sdks.is_empty() {
        return;
    }
    let binary = parca_binary(false);
    let ready_at = t0.elapsed();
    let mut server = Server::start(&binary, &[], |_| "scrape_configs: []\n".to_owned());
    let start = unix_now() - 60.0;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut processes: Vec<Process> = sdks
        .iter()
        .map(|(sdk, python)| start_sdk(sdk, python, &server, dir.path()))
        .collect();

    let seen = poll(
        "every SDK's pushes to show in the API",
        PUSH_DEADLINE,
        Duration::from_millis(500),
        || {
            server.process.assert_running();
            for p in &mut processes {
                p.assert_running();
            }
            let mut seen = Vec::new();
            for (sdk, _) in &sdks {
                let found = check_sdk(&server, sdk, start)
                    .map_err(|e| format!("pyroscope-io {} ({}): {e}", sdk.version, sdk.endpoint))?;
                seen.push(found);
            }
            Ok(seen)
        },
    );
    let pushed_at = t0.elapsed();

    let known = profile_types(&server);
    let metrics = server.get("/metrics").expect("metrics").text();
    for ((sdk, _), (profile_type, pushes)) in sdks.iter().zip(&seen) {
        assert!(
            known.contains(profile_type),
            "{profile_type} of pyroscope-io {} is not among /api/v1/profile_types {known:?}",
            sdk.version
        );
        let codes = requests_by_code(&metrics, sdk.endpoint);
        let ok: u64 = codes
            .iter()
            .filter(|(code, _)| code == "200")
            .map(|(_, n)| n)
            .sum();
        assert!(
            ok >= *pushes as u64 && codes.iter().all(|(code, _)| code == "200"),
            "pyroscope-io {}'s requests to {} by status code: {codes:?} (the API shows {pushes} pushes)",
            sdk.version,
            sdk.endpoint
        );
        report(&format!(
            "pyroscope-io {} -> {}: {ok} requests, all 200; {pushes} pushes of {profile_type} with {HOT:?}",
            sdk.version, sdk.endpoint
        ));
    }
    server.process.assert_running();
    drop(processes);
    report(&format!(
        "venvs and parca ready after {:.1} s, all pushes seen after {:.1} s, test took {:.1} s",
        ready_at.as_secs_f64(),
        pushed_at.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    ));
}
