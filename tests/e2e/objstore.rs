//! Blocks shipped to object storage (a `FILESYSTEM` bucket, the `object_store` crate's local
//! provider): every block the store cuts is uploaded whole, `meta.json` last and carrying the
//! server's external labels; a restart ships nothing twice; a bucket that refuses writes keeps
//! the data local, counted as failures, and the block is shipped once the bucket is back.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::server_harness::{Server, http_request, parca_binary, poll, tests_dir};

fn config(bucket: &Path) -> String {
    format!(
        "global:\n  external_labels: {{replica: a, shard: \"1\"}}\nobject_storage:\n  bucket:\n    type: FILESYSTEM\n    prefix: fleet/eu\n    config: {{directory: {}}}\nscrape_configs: []\n",
        bucket.display()
    )
}

/// A real Go CPU profile stamped at `ms`.
fn profile_at(ms: i64) -> Vec<u8> {
    let bytes = std::fs::read(tests_dir().join("testdata/pprof/go/go-cpu.pb.gz")).expect("read");
    let mut profile = parca_pprof::decode(&bytes, &Default::default())
        .expect("decodes")
        .to_proto();
    profile.time_nanos = ms * 1_000_000;
    parca_pprof::encode(&profile, true)
}

fn metric(server: &Server, name: &str) -> f64 {
    let text = server.get("/metrics").expect("metrics").text();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// The blocks (directories with a `meta.json`) under the bucket's prefix.
fn shipped_blocks(bucket: &Path) -> Vec<String> {
    let dir = bucket.join("fleet/eu");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join("meta.json").exists())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn blocks_are_shipped_to_the_bucket_once_with_external_labels() {
    let work = tempfile::tempdir().expect("tempdir");
    let bucket = work.path().join("bucket");
    let storage = work.path().join("data");
    let binary = parca_binary(false);
    let args = ["--storage-block-duration=1m"];
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    let server = Server::start_with_storage(&binary, Some(&storage), &args, |_| config(&bucket));
    // Profiles over three minutes: the head cuts the oldest minutes into blocks.
    for ago in [180_000, 120_000, 60_000, 0] {
        let r = http_request(
            server.addr,
            "POST",
            "/api/v1/write?__name__=process_cpu&job=ship",
            &profile_at(now - ago),
            Duration::from_secs(30),
        )
        .expect("push");
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let shipped = poll(
        "a block in the bucket",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || {
            let names = shipped_blocks(&bucket);
            if names.is_empty() {
                Err(server.process.log_tail())
            } else {
                Ok(names)
            }
        },
    );
    for name in &shipped {
        let dir = bucket.join("fleet/eu").join(name);
        for file in ["index", "symbols", "profiles", "meta.json"] {
            assert!(
                dir.join(file).exists(),
                "{name}/{file} missing in the bucket"
            );
        }
        let meta = String::from_utf8_lossy(&std::fs::read(dir.join("meta.json")).expect("meta"))
            .into_owned();
        assert!(
            meta.contains("\"replica\": \"a\"") && meta.contains("\"shard\": \"1\""),
            "{meta}"
        );
        // The bucket's copy is the block's own: same bytes for its data files.
        let local = storage.join(name);
        for file in ["index", "symbols", "profiles"] {
            assert_eq!(
                std::fs::read(dir.join(file)).expect("bucket file"),
                std::fs::read(local.join(file)).expect("local file"),
                "{name}/{file}"
            );
        }
    }
    assert!(metric(&server, "parca_shipper_uploaded_blocks_total") >= shipped.len() as f64);
    let state = std::fs::read_to_string(storage.join("shipper.json")).expect("shipper.json");
    assert!(
        shipped.iter().all(|n| state.contains(n.as_str())),
        "{state}"
    );
    // Shipping stops local compaction: no block replaces the shipped ones.
    let listed: Vec<String> = std::fs::read_dir(&storage)
        .expect("storage")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(shipped.iter().all(|n| listed.contains(n)), "{listed:?}");
    drop(server);

    // A restart ships nothing twice.
    let modified = |name: &str| {
        std::fs::metadata(bucket.join("fleet/eu").join(name).join("meta.json"))
            .and_then(|m| m.modified())
            .expect("mtime")
    };
    let before: Vec<_> = shipped.iter().map(|n| modified(n)).collect();
    let server = Server::start_with_storage(&binary, Some(&storage), &args, |_| config(&bucket));
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(metric(&server, "parca_shipper_uploaded_blocks_total"), 0.0);
    let after: Vec<_> = shipped.iter().map(|n| modified(n)).collect();
    assert_eq!(before, after, "a shipped block was uploaded again");

    // A bucket that refuses writes: its folder replaced by a file. New blocks stay local,
    // counted as failures, and are shipped once the folder is back.
    std::fs::rename(&bucket, work.path().join("bucket.away")).expect("move bucket");
    std::fs::write(&bucket, b"not a folder").expect("block the bucket");
    for ago in [-60_000, -120_000, -180_000] {
        let r = http_request(
            server.addr,
            "POST",
            "/api/v1/write?__name__=process_cpu&job=ship",
            &profile_at(now - ago),
            Duration::from_secs(30),
        )
        .expect("push");
        assert_eq!(r.status, 200, "{}", r.text());
    }
    poll(
        "a failed upload to be counted",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || match metric(&server, "parca_shipper_failed_uploads_total") {
            n if n >= 1.0 => Ok(()),
            n => Err(format!("{n}: {}", server.process.log_tail())),
        },
    );
    assert!(metric(&server, "parca_shipper_pending_blocks") >= 1.0);
    std::fs::remove_file(&bucket).expect("unblock");
    std::fs::rename(work.path().join("bucket.away"), &bucket).expect("bucket back");
    let more = poll(
        "the waiting block to be shipped",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || {
            let names = shipped_blocks(&bucket);
            if names.len() > shipped.len() && metric(&server, "parca_shipper_pending_blocks") == 0.0
            {
                Ok(names)
            } else {
                Err(format!("{names:?}"))
            }
        },
    );
    assert!(shipped.iter().all(|n| more.contains(n)));
}
