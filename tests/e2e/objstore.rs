//! Blocks shipped to object storage (a `FILESYSTEM` bucket, the `object_store` crate's local
//! provider): every block the store cuts is uploaded whole, `meta.json` last and carrying the
//! server's external labels; a restart ships nothing twice; a bucket that refuses writes keeps
//! the data local, counted as failures, and the block is shipped once the bucket is back; a
//! server killed while shipping leaves no block half visible and loses none.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::server_harness::{Server, http_request, parca_binary, poll};

fn config(bucket: &Path) -> String {
    format!(
        "global:\n  external_labels: {{replica: a, shard: \"1\"}}\nobject_storage:\n  bucket:\n    type: FILESYSTEM\n    prefix: fleet/eu\n    config: {{directory: {}}}\nscrape_configs: []\n",
        bucket.display()
    )
}

/// A real Go CPU profile stamped at `ms`.
fn profile_at(ms: i64) -> Vec<u8> {
    crate::server_harness::corpus_profile_at("go/go-cpu.pb.gz", ms)
}

/// Pushes [`profile_at`] `at` as series `process_cpu{job=…}`.
fn push_at(server: &Server, job: &str, at: i64) {
    let r = http_request(
        server.addr,
        "POST",
        &format!("/api/v1/write?__name__=process_cpu&job={job}"),
        &profile_at(at),
        Duration::from_secs(30),
    )
    .expect("push");
    assert_eq!(r.status, 200, "{}", r.text());
}

/// Waits until the server has counted a failed upload.
fn wait_for_a_failed_upload(server: &Server) {
    poll(
        "a failed upload to be counted",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || match metric(server, "parca_shipper_failed_uploads_total") {
            n if n >= 1.0 => Ok(()),
            n => Err(format!("{n}: {}", server.process.log_tail())),
        },
    );
}

fn metric(server: &Server, name: &str) -> f64 {
    let text = server.get("/metrics").expect("metrics").text();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Waits until `server` serves at least `n` blocks of the bucket.
fn wait_for_bucket_blocks(server: &Server, n: usize) {
    poll(
        "the server to serve the bucket's blocks",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || match metric(server, "parca_bucket_blocks") as usize {
            got if got >= n => Ok(()),
            got => Err(format!("{got} of {n}: {}", server.process.log_tail())),
        },
    );
}

/// The blocks (directories with a `meta.json`) in `dir`, by name.
fn blocks_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join("meta.json").exists())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The blocks under the bucket's prefix.
fn shipped_blocks(bucket: &Path) -> Vec<String> {
    blocks_in(&bucket.join("fleet/eu"))
}

/// A server shipping to a `FILESYSTEM` bucket, cutting one-minute blocks, with its store and
/// bucket in `work`; and the time it started at, in ms.
fn start_shipping(work: &Path) -> (Server, i64) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    (restart_shipping(work), now)
}

/// The same server, on the same store and bucket.
fn restart_shipping(work: &Path) -> Server {
    let bucket = work.join("bucket");
    Server::start_with_storage(
        &parca_binary(false),
        Some(&work.join("data")),
        &["--storage-block-duration=1m"],
        |_| config(&bucket),
    )
}

#[test]
fn blocks_are_shipped_to_the_bucket_once_with_external_labels() {
    let work = tempfile::tempdir().expect("tempdir");
    let (bucket, storage) = (work.path().join("bucket"), work.path().join("data"));
    let (server, now) = start_shipping(work.path());
    // Profiles over three minutes: the head cuts the oldest minutes into blocks.
    for ago in [180_000, 120_000, 60_000, 0] {
        push_at(&server, "ship", now - ago);
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
    let server = restart_shipping(work.path());
    poll(
        "the restarted shipper's first pass over the blocks",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || match metric(&server, "parca_shipper_dir_syncs_total") {
            n if n >= 1.0 => Ok(()),
            n => Err(format!("{n} passes")),
        },
    );
    assert_eq!(metric(&server, "parca_shipper_uploaded_blocks_total"), 0.0);
    let after: Vec<_> = shipped.iter().map(|n| modified(n)).collect();
    assert_eq!(before, after, "a shipped block was uploaded again");

    // A bucket that refuses writes: its folder replaced by a file. New blocks stay local,
    // counted as failures, and are shipped once the folder is back.
    std::fs::rename(&bucket, work.path().join("bucket.away")).expect("move bucket");
    std::fs::write(&bucket, b"not a folder").expect("block the bucket");
    for ahead in [60_000, 120_000, 180_000] {
        push_at(&server, "ship", now + ahead);
    }
    wait_for_a_failed_upload(&server);
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

/// moto's S3 server on `port` (its state lives in memory: a restart empties it).
fn start_s3(python: &Path, port: u16, log: &Path) -> crate::server_harness::Process {
    let mut command = std::process::Command::new(python);
    command.args([
        "-m",
        "moto.server",
        "-H",
        "127.0.0.1",
        "-p",
        &port.to_string(),
    ]);
    let process = crate::server_harness::Process::start("moto", command, log);
    poll(
        "the S3 server to answer",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || {
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            // An unsigned PUT creates the bucket on moto.
            http_request(addr, "PUT", "/profiles", b"", Duration::from_secs(5))
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
    );
    process
}

/// The keys under `prefix` in moto's bucket `profiles`.
fn s3_keys(port: u16, prefix: &str) -> Vec<String> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(r) = crate::server_harness::http_get(
        addr,
        &format!("/profiles?list-type=2&prefix={prefix}"),
        Duration::from_secs(5),
    ) else {
        return Vec::new();
    };
    r.text()
        .split("<Key>")
        .skip(1)
        .filter_map(|s| s.split("</Key>").next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn blocks_are_shipped_to_an_s3_compatible_server() {
    let python = match crate::server_harness::outside_target("python-s3") {
        Ok(python) => python,
        Err(why) => {
            return crate::server_harness::skip(
                "moto's S3 server (tests/tools/targets.sh python-s3)",
                &why,
            );
        }
    };
    let work = tempfile::tempdir().expect("tempdir");
    let port = crate::server_harness::free_port();
    let mut s3 = start_s3(&python, port, &work.path().join("moto.log"));
    let config = format!(
        "global:\n  external_labels: {{replica: b}}\nobject_storage:\n  bucket:\n    type: S3\n    prefix: parca\n    config:\n      bucket: profiles\n      endpoint: 127.0.0.1:{port}\n      insecure: true\n      access_key: test\n      secret_key: test\nscrape_configs: []\n"
    );
    let server = Server::start(
        &parca_binary(false),
        &["--storage-block-duration=1m"],
        |_| config.clone(),
    );
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    let push = |at: i64| push_at(&server, "s3", at);
    for ago in [180_000, 120_000, 60_000, 0] {
        push(now - ago);
    }
    let keys = poll(
        "a block in the S3 bucket",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || {
            let keys = s3_keys(port, "parca/");
            if keys.iter().any(|k| k.ends_with("/meta.json")) {
                Ok(keys)
            } else {
                Err(format!("{keys:?}\n{}", server.process.log_tail()))
            }
        },
    );
    let meta_key = keys
        .iter()
        .find(|k| k.ends_with("/meta.json"))
        .expect("meta");
    let block = meta_key
        .trim_start_matches("parca/")
        .trim_end_matches("/meta.json");
    for file in ["index", "symbols", "profiles"] {
        assert!(keys.contains(&format!("parca/{block}/{file}")), "{keys:?}");
    }
    // Objects are private: read back with boto3 (in the same venv), signed as any client.
    let read = std::process::Command::new(&python)
        .args([
            "-c",
            "import sys, boto3; s3 = boto3.client('s3', endpoint_url=sys.argv[1], \
             aws_access_key_id='test', aws_secret_access_key='test', region_name='us-east-1'); \
             sys.stdout.buffer.write(s3.get_object(Bucket='profiles', Key=sys.argv[2])['Body'].read())",
            &format!("http://127.0.0.1:{port}"),
            meta_key,
        ])
        .output()
        .expect("run boto3");
    let meta = String::from_utf8_lossy(&read.stdout);
    assert!(
        meta.contains("\"replica\": \"b\""),
        "{meta}\n{}",
        String::from_utf8_lossy(&read.stderr)
    );

    // A stateless reader of the S3 bucket answers over the shipped blocks as the shipping
    // server does: ranges of the objects read over S3's protocol.
    poll(
        "two blocks in the S3 bucket",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || match s3_keys(port, "parca/")
            .iter()
            .filter(|k| k.ends_with("/meta.json"))
            .count()
        {
            n if n >= 2 => Ok(()),
            n => Err(format!("{n}")),
        },
    );
    let reader = Server::start(&parca_binary(false), &["--mode=query"], |_| config.clone());
    wait_for_bucket_blocks(&reader, 2);
    // The two oldest pushes, in the first two blocks.
    let (start, end) = (now - 200_000, now - 110_000);
    let shipped = cpu_total(&server, "job=\"s3\"", start, end);
    assert!(shipped > 0);
    assert_eq!(cpu_total(&reader, "job=\"s3\"", start, end), shipped);
    assert!(metric(&reader, "parca_bucket_fetched_ranges_total") >= 1.0);
    drop(reader);

    // The S3 server goes away: new blocks wait on local disk, counted as failures; when a
    // server is back (empty: moto keeps nothing), they are shipped.
    drop(s3);
    for ahead in [60_000, 120_000, 180_000] {
        push(now + ahead);
    }
    wait_for_a_failed_upload(&server);
    s3 = start_s3(&python, port, &work.path().join("moto2.log"));
    poll(
        "the waiting blocks to reach the new S3 server",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || {
            let keys = s3_keys(port, "parca/");
            if keys.iter().any(|k| k.ends_with("/meta.json"))
                && metric(&server, "parca_shipper_pending_blocks") == 0.0
            {
                Ok(())
            } else {
                Err(format!("{keys:?}"))
            }
        },
    );
    drop(s3);
}

/// Every block visible in the bucket (one with its `meta.json`) is whole: its data files are
/// there, byte for byte the local block's. Returns the visible blocks.
fn assert_visible_blocks_whole(bucket: &Path, storage: &Path) -> Vec<String> {
    let visible = shipped_blocks(bucket);
    for name in &visible {
        for file in ["index", "symbols", "profiles"] {
            let remote = std::fs::read(bucket.join("fleet/eu").join(name).join(file))
                .unwrap_or_else(|e| panic!("{name} is visible but its {file} is not there: {e}"));
            let local = std::fs::read(storage.join(name).join(file)).expect("local file");
            assert!(
                remote == local,
                "{name}/{file} differs from the local block"
            );
        }
    }
    visible
}

/// kill -9 while blocks are being shipped, then a restart: no block is ever visible half
/// uploaded (a reader keys on `meta.json`, which goes last), none is lost (the restarted server
/// ships what was not finished), and none recorded as shipped is uploaded again.
#[test]
fn a_server_killed_while_shipping_loses_no_block_and_shows_none_half_uploaded() {
    let work = tempfile::tempdir().expect("tempdir");
    let (bucket, storage) = (work.path().join("bucket"), work.path().join("data"));
    let (server, now) = start_shipping(work.path());
    // Twelve minutes of profiles: about ten blocks cut, shipped one after another.
    for minute in (0..=12).rev() {
        push_at(&server, "killed", now - minute * 60_000);
        push_at(&server, "killed-too", now - minute * 60_000 + 1_000);
    }
    // Killed as soon as the first object of the first block is in the bucket: that block is
    // half uploaded, the others still to go. (A restart that ships nothing twice is
    // `blocks_are_shipped_to_the_bucket_once_with_external_labels`'s.)
    poll(
        "the first object in the bucket",
        Duration::from_secs(60),
        Duration::from_millis(1),
        || {
            let any = std::fs::read_dir(bucket.join("fleet/eu"))
                .map(|mut d| d.next().is_some())
                .unwrap_or(false);
            if any {
                Ok(())
            } else {
                Err(server.process.log_tail())
            }
        },
    );
    drop(server); // SIGKILL
    let visible = assert_visible_blocks_whole(&bucket, &storage);
    // Blocks only: a block still being written (`<ulid>.tmp`) is no block yet.
    let local: Vec<String> = blocks_in(&storage)
        .into_iter()
        .filter(|n| n.len() == 26)
        .collect();
    let partial = std::fs::read_dir(bucket.join("fleet/eu"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| !e.path().join("meta.json").exists())
        .count();
    crate::agent::say(&format!(
        "killed while shipping: {} of {} blocks visible in the bucket, {partial} partly \
         uploaded (invisible)",
        visible.len(),
        local.len()
    ));
    assert!(local.len() >= 3, "too few blocks cut: {local:?}");
    let modified = |name: &str| {
        std::fs::metadata(bucket.join("fleet/eu").join(name).join("meta.json"))
            .and_then(|m| m.modified())
            .expect("mtime")
    };
    let recorded = std::fs::read_to_string(storage.join("shipper.json")).unwrap_or_default();
    let recorded: Vec<&String> = visible
        .iter()
        .filter(|n| recorded.contains(n.as_str()))
        .collect();
    let before: Vec<_> = recorded.iter().map(|n| modified(n)).collect();

    let server = restart_shipping(work.path());
    poll(
        "every local block in the bucket",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || {
            let shipped = shipped_blocks(&bucket);
            let missing: Vec<&String> = local.iter().filter(|n| !shipped.contains(n)).collect();
            if missing.is_empty() && metric(&server, "parca_shipper_pending_blocks") == 0.0 {
                Ok(())
            } else {
                Err(format!("missing {missing:?}"))
            }
        },
    );
    assert_visible_blocks_whole(&bucket, &storage);
    let after: Vec<_> = recorded.iter().map(|n| modified(n)).collect();
    assert_eq!(
        before, after,
        "a block recorded as shipped was uploaded again"
    );
}

/// The CPU time `merge` of `selector` gives over `[start_ms, end_ms]`, from `server`.
fn cpu_total(server: &Server, selector: &str, start_ms: i64, end_ms: i64) -> i64 {
    let query = format!("merge(process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta{{{selector}}})");
    let data = server
        .api(&format!(
            "/api/v1/query?format=top&query={}&start={}&end={}",
            crate::server_harness::encode(&query),
            start_ms as f64 / 1000.0,
            end_ms as f64 / 1000.0
        ))
        .unwrap_or_else(|e| panic!("{e}\n{}", server.process.log_tail()));
    crate::server_harness::top_total(&data)
}

/// Bytes of the `profiles` files of the bucket's blocks.
fn profile_bytes_in(bucket: &Path) -> u64 {
    shipped_blocks(bucket)
        .iter()
        .filter_map(|b| std::fs::metadata(bucket.join("fleet/eu").join(b).join("profiles")).ok())
        .map(|m| m.len())
        .sum()
}

#[test]
fn the_bucket_is_read_when_local_copies_are_gone_and_by_other_servers() {
    let work = tempfile::tempdir().expect("tempdir");
    let (bucket, storage) = (work.path().join("bucket"), work.path().join("data"));
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    // Local retention of two minutes: shipped blocks older than that leave the disk.
    let server = Server::start_with_storage(
        &parca_binary(false),
        Some(&storage),
        &["--storage-block-duration=1m", "--storage-retention-time=2m"],
        |_| config(&bucket),
    );
    // Three minutes a minute apart, each a block of its own, all within the retention when
    // pushed (older ones are refused); then a newer profile moves the retention's horizon
    // (counted from the newest profile) past them.
    for ago in [110_000, 50_000, -10_000] {
        push_at(&server, "a", now - ago);
        push_at(&server, "b", now - ago);
    }
    push_at(&server, "one", now + 230_000);
    let (start, end) = (now - 140_000, now + 240_000);
    let one = cpu_total(&server, "job=\"one\"", start, end);
    assert!(one > 0);
    // Every old block shipped, then deleted from the disk by retention.
    let shipped = poll(
        "the old blocks to be shipped and their local copies deleted",
        Duration::from_secs(90),
        Duration::from_millis(500),
        || {
            let (remote, local) = (shipped_blocks(&bucket), blocks_in(&storage));
            if remote.len() >= 3 && remote.iter().all(|b| !local.contains(b)) {
                Ok(remote)
            } else {
                Err(format!("bucket {remote:?}, disk {local:?}"))
            }
        },
    );
    // The server answers from the bucket what it no longer holds: each of the three pushes
    // of job `a` is the same file as job `one`'s.
    let from_bucket = poll(
        "the server to serve the bucket's blocks",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || match cpu_total(&server, "job=\"a\"", start, end) {
            n if n == 3 * one => Ok(n),
            n => Err(format!("{n} of {}", 3 * one)),
        },
    );
    assert_eq!(from_bucket, 3 * one);

    // A stateless reader (`--mode=query`) of the same bucket: the same numbers, fetching only
    // the chunks of the series asked for; it takes no pushes.
    let reader = Server::start_with_storage(
        &parca_binary(false),
        Some(&work.path().join("reader")),
        &["--mode=query"],
        |_| config(&bucket),
    );
    let refused = http_request(
        reader.addr,
        "POST",
        "/api/v1/write?__name__=process_cpu&job=x",
        &profile_at(now),
        Duration::from_secs(30),
    )
    .expect("push");
    assert_eq!(refused.status, 403, "{}", refused.text());
    wait_for_bucket_blocks(&reader, shipped.len());
    let status = reader.api("/api/v1/status/tsdb").expect("status");
    assert!(
        status["bucketBlocks"].as_u64().unwrap_or(0) >= shipped.len() as u64,
        "{status}"
    );
    assert_eq!(status["blocks"], 0, "{status}");
    let before = metric(&reader, "parca_bucket_fetched_bytes_total");
    assert_eq!(cpu_total(&reader, "job=\"a\"", start, end), 3 * one);
    assert_eq!(cpu_total(&reader, "job=\"b\"", start, end), 3 * one);
    let fetched = metric(&reader, "parca_bucket_fetched_bytes_total") - before;
    let total = profile_bytes_in(&bucket) as f64;
    crate::agent::say(&format!(
        "bucket reads: {} blocks, {} of {} bytes of profile data fetched for two series, index and symbols cached: {} bytes",
        shipped.len(),
        fetched,
        total,
        metric(&reader, "parca_bucket_cached_bytes")
    ));
    // Each query fetches by byte ranges the frames its series lie in, each once. The series
    // of a block share frames (block format 4), and blocks this small are one frame each:
    // each of the two queries fetches at most every block's profile data once.
    assert!(
        fetched > 0.0 && fetched <= 2.0 * total,
        "{fetched} of {total}"
    );
    let before = metric(&reader, "parca_bucket_fetched_bytes_total");
    assert_eq!(cpu_total(&reader, "job=\"b\"", start, end), 3 * one);
    let one_series = metric(&reader, "parca_bucket_fetched_bytes_total") - before;
    assert!(
        one_series > 0.0 && one_series <= total,
        "{one_series} of {total}"
    );
    // Labels and series of the bucket's blocks are listed too.
    let series = reader
        .api(&format!(
            "/api/v1/series?match[]={}&start={}&end={}",
            crate::server_harness::encode("{job=~\"a|b\"}"),
            start as f64 / 1000.0,
            end as f64 / 1000.0
        ))
        .expect("series");
    assert!(series.to_string().contains("\"job\":\"b\""), "{series}");
    let cached_unbounded = metric(&reader, "parca_bucket_cached_bytes");
    drop(reader);

    // A reader whose cache is smaller than one block's index: it lets every block go, fetches
    // what each query needs again, and answers the same.
    let small_cache = work.path().join("reader-small");
    let small = Server::start_with_storage(
        &parca_binary(false),
        Some(&small_cache),
        &["--mode=query", "--objstore-cache-size=1"],
        |_| config(&bucket),
    );
    wait_for_bucket_blocks(&small, shipped.len());
    assert_eq!(cpu_total(&small, "job=\"a\"", start, end), 3 * one);
    assert_eq!(cpu_total(&small, "job=\"b\"", start, end), 3 * one);
    let refetches = metric(&small, "parca_bucket_cache_refetches_total");
    let evictions = metric(&small, "parca_bucket_cache_evictions_total");
    assert!(refetches >= shipped.len() as f64, "{refetches} refetches");
    assert!(
        evictions >= 2.0 * shipped.len() as f64,
        "{evictions} evictions"
    );
    assert_eq!(metric(&small, "parca_bucket_cached_bytes"), 0.0);
    let on_disk = blocks_in(&small_cache.join("bucket-cache"));
    assert!(on_disk.is_empty(), "blocks left in the cache: {on_disk:?}");
    crate::agent::say(&format!(
        "bucket cache: unbounded {cached_unbounded} bytes; bounded to 1 byte: {evictions} blocks let go, {refetches} fetched again, answers equal"
    ));
    drop(small);

    // A querier of the server as a shard, reading another prefix of the bucket: the server
    // says blocks of it are only in the bucket, and the querier lists none of them, so the
    // answer says what is missing instead of leaving it out silently.
    let wrong = Server::start(
        &parca_binary(false),
        &[
            "--mode=query",
            &format!("--query-store=http://{}", server.addr),
        ],
        |_| config(&bucket).replace("prefix: fleet/eu", "prefix: fleet/us"),
    );
    let r = wrong
        .get(&format!(
            "/api/v1/query?format=top&query={}&start={}&end={}",
            crate::server_harness::encode(
                "merge(process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta{job=\"a\"})"
            ),
            start as f64 / 1000.0,
            end as f64 / 1000.0
        ))
        .expect("query");
    let text = r.text();
    assert!(
        text.contains("lists none of its blocks") && text.contains("same bucket and prefix"),
        "{text}"
    );
    drop(wrong);

    // A damaged object in the bucket: a new reader sets that block aside, saying which and
    // why, and serves the rest (two of the three pushes).
    let damaged = &shipped[0];
    let index = bucket.join("fleet/eu").join(damaged).join("index");
    let mut bytes = std::fs::read(&index).expect("index");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x5a;
    std::fs::write(&index, &bytes).expect("damage");
    let reader = Server::start_with_storage(
        &parca_binary(false),
        Some(&work.path().join("reader-2")),
        &[],
        |_| config(&bucket),
    );
    poll(
        "the damaged block to be set aside",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || match metric(&reader, "parca_bucket_unreadable_blocks") {
            1.0 => Ok(()),
            n => Err(format!("{n}: {}", reader.process.log_tail())),
        },
    );
    let log = reader.process.log_tail();
    assert!(
        log.contains(damaged.as_str()) && log.contains("set aside") && log.contains("index"),
        "{log}"
    );
    assert_eq!(cpu_total(&reader, "job=\"a\"", start, end), 2 * one);
}

/// `meta.json` of a block in the bucket, as JSON (the file ends with a 12-byte footer).
fn bucket_meta(bucket: &Path, block: &str) -> serde_json::Value {
    let bytes = std::fs::read(bucket.join("fleet/eu").join(block).join("meta.json")).expect("meta");
    serde_json::from_slice(&bytes[..bytes.len() - 12]).expect("meta is JSON")
}

#[test]
fn parca_compact_merges_the_buckets_blocks_and_deletes_the_replaced_ones_after_a_delay() {
    let work = tempfile::tempdir().expect("tempdir");
    let bucket = work.path().join("bucket");
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    let (start, end) = (now - 420_000, now + 10_000);
    let server = restart_shipping(work.path());
    // Five minutes of one push each, then one now: the five are cut into blocks and shipped.
    for ago in [360_000, 300_000, 240_000, 180_000, 120_000] {
        push_at(&server, "a", now - ago);
    }
    push_at(&server, "one", now);
    let one = cpu_total(&server, "job=\"one\"", start, end);
    let before = poll(
        "five blocks in the bucket",
        Duration::from_secs(90),
        Duration::from_millis(500),
        || match shipped_blocks(&bucket) {
            names if names.len() >= 5 => Ok(names),
            names => Err(format!("{names:?}")),
        },
    );
    drop(server);

    let config_path = work.path().join("parca.yaml");
    std::fs::write(&config_path, config(&bucket)).expect("config");
    let compact = |delay: &str| {
        let output = std::process::Command::new(parca_binary(false))
            .args(["compact", "--objstore-compaction-ranges=3m"])
            .arg(format!("--objstore-delete-delay={delay}"))
            .arg(format!("--config-path={}", config_path.display()))
            .output()
            .expect("run parca compact");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        text
    };
    // The first run merges each full three-minute window and marks the merged blocks.
    let report = compact("1h");
    assert!(report.contains("compacted "), "{report}");
    let after = shipped_blocks(&bucket);
    let merged: Vec<&String> = after.iter().filter(|b| !before.contains(b)).collect();
    assert!(!merged.is_empty(), "{report}");
    for block in &merged {
        let meta = bucket_meta(&bucket, block);
        assert_eq!(meta["compaction"]["level"], 2, "{meta}");
        let sources = meta["compaction"]["sources"].as_array().expect("sources");
        assert!(sources.len() >= 2, "{meta}");
        assert_eq!(meta["external_labels"]["replica"], "a", "{meta}");
        for source in sources {
            let source = source.as_str().expect("name");
            assert!(
                bucket
                    .join("fleet/eu")
                    .join(source)
                    .join("deletion-mark.json")
                    .exists(),
                "{source} is marked"
            );
        }
    }
    // Readers see each profile once: the merged blocks hide their sources.
    let reader = Server::start_with_storage(
        &parca_binary(false),
        Some(&work.path().join("reader")),
        &[],
        |_| config(&bucket),
    );
    wait_for_bucket_blocks(&reader, after.len());
    assert_eq!(cpu_total(&reader, "job=\"a\"", start, end), 5 * one);
    // A second run past the delay deletes the replaced blocks; the answer stays the same.
    let report = compact("0s");
    assert!(report.contains("deleted "), "{report}");
    let last = shipped_blocks(&bucket);
    assert!(last.len() < after.len(), "{last:?} vs {after:?}");
    assert!(merged.iter().all(|b| last.contains(b)));
    poll(
        "the reader to drop the deleted blocks",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || match metric(&reader, "parca_bucket_blocks") as usize {
            n if n == last.len() => Ok(()),
            n => Err(format!("{n} of {}", last.len())),
        },
    );
    assert_eq!(cpu_total(&reader, "job=\"a\"", start, end), 5 * one);
    crate::agent::say(&format!(
        "parca compact: {} blocks became {}",
        before.len(),
        last.len()
    ));

    // Retention of one minute: every block ended longer ago; the first run marks them, the
    // next (the delay past) deletes them.
    let compact_with_retention = || {
        let output = std::process::Command::new(parca_binary(false))
            .args([
                "compact",
                "--objstore-retention-time=1m",
                "--objstore-delete-delay=0s",
            ])
            .arg(format!("--config-path={}", config_path.display()))
            .output()
            .expect("run parca compact");
        assert!(output.status.success());
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let marked = compact_with_retention();
    assert_eq!(marked.matches("marked ").count(), last.len(), "{marked}");
    let deleted = compact_with_retention();
    assert_eq!(deleted.matches("deleted ").count(), last.len(), "{deleted}");
    assert!(shipped_blocks(&bucket).is_empty());
}

#[test]
fn query_mode_without_a_bucket_refuses_to_start_saying_why() {
    let work = tempfile::tempdir().expect("tempdir");
    let config_path = work.path().join("parca.yaml");
    std::fs::write(&config_path, "scrape_configs: []\n").expect("config");
    let output = std::process::Command::new(parca_binary(false))
        .arg("--mode=query")
        .arg(format!("--config-path={}", config_path.display()))
        .arg(format!(
            "--storage-path={}",
            work.path().join("data").display()
        ))
        .arg("--http-address=127.0.0.1:0")
        .output()
        .expect("run parca");
    assert!(!output.status.success());
    let text = String::from_utf8_lossy(&output.stderr);
    assert!(
        text.contains("--mode=query serves the blocks of object_storage"),
        "{text}"
    );
}
