//! Alerts reach Debian's real Alertmanager (`prometheus-alertmanager`) through its v2 API: an
//! alert of a rule over pushed profiles is received (listed by Alertmanager, with the server's
//! external labels, and notified to a webhook as firing), then resolved once profiles stop
//! (notified as resolved).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::rules_eval::push_heap;
use crate::server_harness::{Process, Server, free_port, http_get, parca_binary, poll, skip};

/// A webhook receiver: every POST body it gets, as JSON.
fn webhook() -> (SocketAddr, Arc<Mutex<Vec<serde_json::Value>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let received = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&received);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut length = 0;
            let mut line = String::new();
            loop {
                line.clear();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                let header = line.trim_end().to_ascii_lowercase();
                if header.is_empty() {
                    break;
                }
                if let Some(v) = header.strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_ok()
                && let Ok(json) = serde_json::from_slice(&body)
            {
                sink.lock().expect("webhook lock").push(json);
            }
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    (addr, received)
}

#[test]
fn alerts_reach_alertmanager_then_resolve() {
    let Ok(binary) = which("prometheus-alertmanager") else {
        return skip(
            "Debian's prometheus-alertmanager",
            "not installed (.ci/run installs it)",
        );
    };
    let work = tempfile::tempdir().expect("tempdir");
    let (hook, received) = webhook();
    let am: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let am_config = work.path().join("alertmanager.yml");
    std::fs::write(
        &am_config,
        format!(
            "route: {{receiver: hook, group_by: [alertname], group_wait: 0s, group_interval: 1s, repeat_interval: 1h}}\nreceivers:\n  - name: hook\n    webhook_configs: [{{url: 'http://{hook}/hook', send_resolved: true}}]\n"
        ),
    )
    .expect("write alertmanager.yml");
    let mut command = Command::new(binary);
    command
        .arg(format!("--config.file={}", am_config.display()))
        .arg(format!(
            "--storage.path={}",
            work.path().join("am-data").display()
        ))
        .arg(format!("--web.listen-address={am}"))
        .arg("--cluster.listen-address=")
        .arg("--log.level=warn");
    let mut alertmanager = Process::start("alertmanager", command, &work.path().join("am.log"));
    poll(
        "alertmanager to be ready",
        Duration::from_secs(60),
        Duration::from_millis(100),
        || {
            alertmanager.assert_running();
            match http_get(am, "/-/ready", Duration::from_secs(5)) {
                Ok(r) if r.status == 200 => Ok(()),
                Ok(r) => Err(format!("HTTP {}", r.status)),
                Err(e) => Err(e),
            }
        },
    );

    let rules = work.path().join("rules.yml");
    std::fs::write(
        &rules,
        "groups:\n  - name: heap\n    interval: 1s\n    rules:\n      - alert: HeapInUse\n        expr: sum by (job) (memory:inuse_space:bytes:space:bytes) > 0\n        labels: {severity: page}\n        annotations: {summary: '{{ $labels.job }} holds {{ $value | humanize1024 }}B'}\n",
    )
    .expect("write rules");
    let server = Server::start(
        &parca_binary(false),
        &["--query-lookback-delta=3s", "--rules-alert-resend-delay=1s"],
        |_| {
            format!(
                "global: {{external_labels: {{region: eu}}}}\nrule_files: ['{}']\nalerting:\n  alertmanagers:\n    - api_version: v2\n      timeout: 5s\n      static_configs: [{{targets: ['{am}']}}]\n",
                rules.display()
            )
        },
    );

    // Received: Alertmanager lists it, with the server's external labels, and notifies it.
    let listed = poll(
        "Alertmanager to list the alert",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || {
            push_heap(&server);
            let r = http_get(am, "/api/v2/alerts", Duration::from_secs(5))?;
            let alerts: serde_json::Value =
                serde_json::from_slice(&r.body).map_err(|e| e.to_string())?;
            alerts
                .as_array()
                .and_then(|a| a.iter().find(|a| a["labels"]["alertname"] == "HeapInUse"))
                .cloned()
                .ok_or_else(|| format!("HTTP {}: {alerts}", r.status))
        },
    );
    assert_eq!(listed["labels"]["region"], "eu", "{listed}");
    assert_eq!(listed["labels"]["job"], "api", "{listed}");
    assert_eq!(listed["labels"]["severity"], "page", "{listed}");
    assert_eq!(listed["status"]["state"], "active", "{listed}");
    assert!(
        listed["annotations"]["summary"]
            .as_str()
            .is_some_and(|s| s.starts_with("api holds ")),
        "{listed}"
    );
    assert!(
        listed["generatorURL"]
            .as_str()
            .is_some_and(|u| u.contains("/graph?g0.expr=sum")),
        "{listed}"
    );
    let notified =
        |status: &str| {
            received.lock().expect("webhook lock").iter().any(|n| {
                n["status"] == status && n["alerts"][0]["labels"]["alertname"] == "HeapInUse"
            })
        };
    poll(
        "the firing notification",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || {
            push_heap(&server);
            notified("firing")
                .then_some(())
                .ok_or_else(|| "not yet".to_owned())
        },
    );

    // Resolved: no more profiles, so past the lookback the condition is gone.
    poll(
        "the resolved notification",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || {
            alertmanager.assert_running();
            notified("resolved")
                .then_some(())
                .ok_or_else(|| "not yet".to_owned())
        },
    );
    let r = http_get(am, "/api/v2/alerts?active=true", Duration::from_secs(5)).expect("alerts");
    let active: serde_json::Value = serde_json::from_slice(&r.body).expect("JSON");
    assert_eq!(active, serde_json::json!([]), "{active}");
}

/// The path of `program` on `PATH`.
fn which(program: &str) -> Result<std::path::PathBuf, String> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(program))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("{program} is not on PATH"))
}
