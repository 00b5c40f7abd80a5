//! The store on a disk that fills up, for real: a `parca` server keeps its store on a small
//! tmpfs (mounted by the test; needs root) that a filler file leaves almost full. It is pushed
//! to and scrapes itself until the disk refuses writes; then the filler is deleted, more is
//! pushed, and the server is killed with SIGKILL and started again. Every push answered 200 must
//! be there after the restart, and no push answered with an error may be (a client retries
//! those). While the disk is full, pushes get 503 with `Retry-After` and the cause, the log says
//! so once per episode, `/metrics` and `/api/v1/status/tsdb` say the store is read-only, and the
//! scraped target stays up with the reason its data was not stored.
//!
//! Without root (or without tmpfs) the test says so and passes without checking, except under
//! `PARCA_REQUIRE_TARGETS=1` (CI runs as root).

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::server_harness::{Server, http_request, parca_binary, poll, skip};
use crate::support::corpus_dir;

/// A tmpfs mounted for the test's life.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Result<Tmpfs, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "parca-test"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "mount -t tmpfs failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// Fills the file system of `path` with a file, leaving about `leave` bytes free.
fn fill(path: &Path, leave: u64) -> PathBuf {
    let filler = path.join("filler");
    let mut file = std::fs::File::create(&filler).expect("create filler");
    let chunk = vec![0xa5u8; 64 << 10];
    let mut written = 0u64;
    while file.write_all(&chunk).is_ok() {
        written += chunk.len() as u64;
    }
    drop(file);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&filler)
        .expect("open filler");
    file.set_len(written.saturating_sub(leave))
        .expect("shrink filler");
    file.sync_all().expect("sync filler");
    filler
}

/// How the server answered one push.
enum Push {
    Stored,
    Refused {
        retry_after: Option<String>,
        error: String,
    },
}

fn push(server: &Server, profile: &[u8], instance: usize) -> Push {
    let path = format!("/api/v1/write?__name__=memory&job=push&instance=i{instance}");
    let r = http_request(server.addr, "POST", &path, profile, Duration::from_secs(30))
        .expect("push answered");
    match r.status {
        200 => Push::Stored,
        503 => Push::Refused {
            retry_after: r.header("retry-after").map(str::to_owned),
            error: r.text(),
        },
        other => panic!("push {instance}: HTTP {other}: {}", r.text()),
    }
}

/// The `instance` values of the pushed series the server holds.
fn stored_instances(server: &Server) -> BTreeSet<String> {
    let data = server
        .api("/api/v1/label/instance/values?match[]=%7Bjob%3D%22push%22%7D")
        .expect("label values");
    data.as_array()
        .expect("a list")
        .iter()
        .map(|v| v.as_str().expect("a string").to_owned())
        .collect()
}

fn config(addr: std::net::SocketAddr) -> String {
    format!(
        "scrape_configs:\n  - job_name: self\n    scrape_interval: 1s\n    static_configs: [{{targets: [\"{addr}\"]}}]\n    profiling_config:\n      pprof_config:\n        memory: {{ path: /debug/pprof/heap }}\n        process_cpu: {{ enabled: false }}\n        block: {{ enabled: false }}\n        mutex: {{ enabled: false }}\n        goroutine: {{ enabled: false }}\n"
    )
}

#[test]
fn a_full_disk_refuses_pushes_heals_and_loses_no_acknowledged_profile() {
    let tmpfs = match Tmpfs::mount("48m") {
        Ok(tmpfs) => tmpfs,
        Err(why) => return skip("the full-disk test (a tmpfs mounted by the test)", &why),
    };
    let storage = tmpfs.path().join("data");
    let binary = parca_binary(false);
    // The corpus file's own time is days old: a store whose self-scrapes are at the present
    // would cut that time into a block and refuse more of it. Pushed profiles are of now.
    let profile = {
        let bytes = std::fs::read(corpus_dir().join("go/go-heap.pb.gz")).expect("profile");
        let mut profiles =
            parca_profile::decode(&bytes, &Default::default()).expect("a valid profile");
        let mut profile = profiles.swap_remove(0);
        profile.meta.time_nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_nanos() as i64;
        parca_pprof::encode(&parca_profile::to_pprof(&profile), true)
    };
    let server = Server::start_with_storage(&binary, Some(&storage), &[], config);
    let filler = fill(tmpfs.path(), 256 << 10);

    let mut acked = BTreeSet::new();
    let mut refused = BTreeSet::new();
    let mut next = 0usize;
    let deadline = Instant::now() + Duration::from_secs(120);
    // Push until the disk has refused a good number of them.
    while refused.len() < 20 {
        assert!(Instant::now() < deadline, "the disk never filled up");
        match push(&server, &profile, next) {
            Push::Stored => {
                acked.insert(format!("i{next}"));
            }
            Push::Refused { retry_after, error } => {
                assert!(retry_after.is_some(), "a 503 says when to retry: {error}");
                assert!(
                    error.contains("No space left on device") && error.contains("wal"),
                    "the cause and the file are named: {error}"
                );
                refused.insert(format!("i{next}"));
            }
        }
        next += 1;
    }
    let status = server.api("/api/v1/status/tsdb").expect("status");
    assert_eq!(status["readOnly"], true, "{status}");
    assert!(
        status["writeFailure"]
            .as_str()
            .is_some_and(|f| f.contains("No space left on device")),
        "{status}"
    );
    let metrics = server.get("/metrics").expect("metrics").text();
    assert!(metrics.contains("parca_tsdb_read_only 1"), "{metrics}");
    // The scraped target answered: it is up, and says why its data was not stored.
    poll(
        "a scrape that could not be stored",
        Duration::from_secs(20),
        Duration::from_millis(200),
        || {
            let targets = server.api("/api/v1/targets")?;
            let target = &targets["activeTargets"][0];
            let error = target["lastError"].as_str().unwrap_or("");
            if target["health"] == "up" && error.contains("No space left on device") {
                Ok(())
            } else {
                Err(format!("target: {target}"))
            }
        },
    );

    // Space comes back: the store takes writes again by itself.
    std::fs::remove_file(&filler).expect("free the space");
    poll(
        "the store to take writes again",
        Duration::from_secs(20),
        Duration::from_millis(100),
        || match server.api("/api/v1/status/tsdb")?["readOnly"].as_bool() {
            Some(false) => Ok(()),
            other => Err(format!("readOnly: {other:?}")),
        },
    );
    for _ in 0..50 {
        match push(&server, &profile, next) {
            Push::Stored => {
                acked.insert(format!("i{next}"));
            }
            Push::Refused { error, .. } => panic!("refused after space came back: {error}"),
        }
        next += 1;
    }
    let log = std::fs::read_to_string(server.dir.path().join("parca.log")).expect("log");
    let episodes = log.matches("the store stopped taking writes").count();
    assert!(
        episodes >= 1 && episodes < refused.len() / 2,
        "the log says it once per episode, not once per request: {episodes} lines for {} refusals",
        refused.len()
    );
    assert_eq!(stored_instances(&server), acked, "before the kill");

    // kill -9, then start again on the same store.
    drop(server);
    let server = Server::start_with_storage(&binary, Some(&storage), &[], config);
    let stored = stored_instances(&server);
    let missing: Vec<&String> = acked.difference(&stored).collect();
    let doubled: Vec<&String> = refused.intersection(&stored).collect();
    assert!(missing.is_empty(), "acknowledged but lost: {missing:?}");
    assert!(doubled.is_empty(), "refused but stored: {doubled:?}");
    assert_eq!(stored, acked);
    #[allow(clippy::print_stderr)]
    {
        eprintln!(
            "full disk: {} pushes acknowledged, {} refused with 503, {episodes} episode(s) logged; after kill -9 all {} acknowledged are stored and none refused",
            acked.len(),
            refused.len(),
            acked.len()
        );
    }
}
