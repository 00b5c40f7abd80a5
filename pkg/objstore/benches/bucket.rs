//! Blocks in a bucket against blocks on disk (issue 17's figures): a store of `DAYS` days of
//! `SERIES` series (the corpus Go CPU profile every 10 minutes per series, its values varied per
//! copy, in 2-hour blocks) is
//! written, shipped to a `FILESYSTEM` bucket, and read back by a `BucketReader`; the merge of
//! one series over the whole time is timed from the bucket (cold: right after the listing;
//! warm: again) and from the disk, with the bytes of profile data fetched. Prints figures;
//! asserts nothing about them.
//!
//! `cargo bench -p parca-objstore --bench bucket [-- DAYS SERIES]` (default 7 100).

#![allow(clippy::print_stdout)] // A bench binary: its figures are its output.
#![allow(
    clippy::too_many_lines,
    reason = "a bench or test target is one scenario read top to bottom; the line budget is for product code"
)]

use std::sync::Arc;
use std::time::Instant;

use parca_tsdb::{Db, Labels, MatchOp, Matcher, Options};

const TYPE: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta";
const STEP_MS: i64 = 10 * 60_000;
const BLOCK_MS: i64 = 2 * 3_600_000;

fn corpus_profile() -> parca_profile::Profile {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/testdata/pprof/go/go-cpu.pb.gz"
    );
    let profile = parca_profile::decode(&std::fs::read(path).expect("corpus"), &Default::default())
        .expect("valid")
        .into_iter()
        .find(|p| p.meta.sample_type.kind == "cpu")
        .expect("cpu");
    parca_profile::merge([&profile]).expect("merge")
}

fn mb(bytes: f64) -> f64 {
    bytes / 1e6
}

fn main() {
    let args: Vec<i64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let days = args.first().copied().unwrap_or(7);
    let n_series = args.get(1).copied().unwrap_or(100);
    let work = tempfile::tempdir().expect("tempdir");
    let (store, bucket_dir) = (work.path().join("store"), work.path().join("bucket"));
    let options = Options {
        block_duration_ms: BLOCK_MS,
        retention_ms: 0,
        ..Options::default()
    };

    // The store: complete 2-hour blocks, written as an import writes them.
    let profile = corpus_profile();
    let t0 = 1_700_000_000_000 - 1_700_000_000_000 % BLOCK_MS;
    let end = t0 + days * 24 * 3_600_000;
    let started = Instant::now();
    std::fs::create_dir_all(&store).expect("store");
    let mut backfill = parca_tsdb::Backfill::new(&store, &options);
    let mut n_profiles = 0u64;
    let mut t = t0;
    // Each stored profile has its own values (real profiles differ; identical copies would
    // compress to nothing): each sample's value scaled by 1 to 16 quarters.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut varied = profile.clone();
    while t < end {
        for s in 0..n_series {
            let labels = Labels::new([
                ("__name__", TYPE.to_owned()),
                ("job", "bench".to_owned()),
                ("instance", format!("host-{s}:6060")),
            ])
            .expect("labels");
            for (v, base) in varied
                .samples
                .values
                .iter_mut()
                .zip(&profile.samples.values)
            {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                *v = base * ((seed >> 60) as i64 + 1) / 4;
            }
            backfill.add(&labels, t, &varied).expect("add");
            n_profiles += 1;
        }
        t += STEP_MS;
    }
    backfill.write().expect("write blocks");
    let db = Db::open(&store, options.clone()).expect("open");
    let blocks = db.blocks();
    let store_bytes: u64 = blocks.iter().map(|b| b.size_bytes).sum();
    println!(
        "store: {days} days x {n_series} series, {n_profiles} profiles of {} samples, {} blocks, {:.1} MB, written in {:.1} s",
        profile.samples.len(),
        blocks.len(),
        mb(store_bytes as f64),
        started.elapsed().as_secs_f64()
    );

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let config = format!(
        "object_storage:\n  bucket:\n    type: FILESYSTEM\n    config: {{directory: {}}}\n",
        bucket_dir.display()
    );
    let bucket_config = parca_config::parse(&config, "bench.yaml")
        .expect("config")
        .object_storage
        .expect("object_storage")
        .bucket;
    let bucket = parca_objstore::Bucket::open(&bucket_config).expect("bucket");

    // Upload throughput: the shipper, block after block.
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = parca_objstore::ShipperMetrics::register(&mut registry);
    let mut shipper =
        parca_objstore::Shipper::new(bucket.clone(), &store, Default::default(), metrics)
            .expect("shipper");
    let started = Instant::now();
    let shipped = runtime.block_on(shipper.ship(&blocks));
    let upload = started.elapsed().as_secs_f64();
    println!(
        "upload: {} blocks, {:.1} MB in {:.2} s: {:.0} MB/s to a FILESYSTEM bucket",
        shipped.len(),
        mb(store_bytes as f64),
        upload,
        mb(store_bytes as f64) / upload
    );

    // Reading the bucket: the listing and the indexes, then one series over all of it.
    let reader_metrics = Arc::new(parca_objstore::ReaderMetrics::default());
    let (remote, listing) = runtime.block_on(async {
        let mut reader = parca_objstore::BucketReader::new(
            bucket.clone(),
            work.path().join("cache"),
            0,
            Arc::clone(&reader_metrics),
        )
        .expect("reader");
        let started = Instant::now();
        let blocks = reader.sync().await.expect("sync");
        (blocks, started.elapsed().as_secs_f64())
    });
    let cached = reader_metrics.cached_bytes.get() as u64;
    println!(
        "bucket listing: {} blocks opened in {:.2} s, {:.1} MB of index and symbols cached ({:.0}% of the bucket)",
        remote.len(),
        listing,
        mb(cached as f64),
        100.0 * cached as f64 / store_bytes as f64
    );
    let empty = work.path().join("reader-store");
    let reader_db = Arc::new(Db::open(&empty, options.clone()).expect("open"));
    reader_db.set_remote_blocks(remote);
    let one_series = vec![
        Matcher::new(MatchOp::Equal, "job", "bench").expect("matcher"),
        Matcher::new(MatchOp::Equal, "instance", "host-0:6060").expect("matcher"),
    ];
    let time_merge = |db: &Arc<Db>| {
        let (db, matchers) = (Arc::clone(db), one_series.clone());
        runtime.block_on(async move {
            tokio::task::spawn_blocking(move || {
                let started = Instant::now();
                let merged = db
                    .querier(t0, end)
                    .merge(&matchers)
                    .expect("merge")
                    .expect("profiles");
                (started.elapsed().as_secs_f64() * 1000.0, merged.total())
            })
            .await
            .expect("query")
        })
    };
    let fetched = |m: &parca_objstore::ReaderMetrics| m.fetched_bytes.get() as f64;
    let before = fetched(&reader_metrics);
    let (cold_ms, cold_total) = time_merge(&reader_db);
    let cold_bytes = fetched(&reader_metrics) - before;
    let before = fetched(&reader_metrics);
    let (warm_ms, warm_total) = time_merge(&reader_db);
    let warm_bytes = fetched(&reader_metrics) - before;
    let db = Arc::new(db);
    let (_, _) = time_merge(&db);
    let (local_ms, local_total) = time_merge(&db);
    assert_eq!(cold_total, local_total);
    assert_eq!(warm_total, local_total);
    println!(
        "merge of 1 of {n_series} series over {days} days: bucket cold {cold_ms:.1} ms ({:.2} MB fetched in {} ranges so far), bucket warm {warm_ms:.1} ms ({:.2} MB fetched), local disk {local_ms:.1} ms",
        mb(cold_bytes),
        reader_metrics.fetched_ranges.get(),
        mb(warm_bytes),
    );
    println!(
        "bytes fetched per query: {:.2}% of the bucket's {:.1} MB",
        100.0 * cold_bytes / store_bytes as f64,
        mb(store_bytes as f64)
    );

    // The same merge from a reader whose cache holds a quarter of the blocks' index and
    // symbols: the blocks it let go are fetched again, whole small files, as the query opens
    // them.
    let bound = cached / 4;
    let small_metrics = Arc::new(parca_objstore::ReaderMetrics::default());
    let small_remote = runtime.block_on(async {
        let mut reader = parca_objstore::BucketReader::new(
            bucket.clone(),
            work.path().join("cache-small"),
            bound,
            Arc::clone(&small_metrics),
        )
        .expect("reader");
        reader.sync().await.expect("sync")
    });
    let small_db = Arc::new(Db::open(&work.path().join("reader-small"), options).expect("open"));
    small_db.set_remote_blocks(small_remote);
    let refetched = |m: &parca_objstore::ReaderMetrics| m.refetches.get();
    let (before_blocks, before_bytes) = (refetched(&small_metrics), fetched(&small_metrics));
    let (bounded_ms, bounded_total) = time_merge(&small_db);
    assert_eq!(bounded_total, local_total);
    println!(
        "the same merge with the cache bounded to {:.1} MB: {bounded_ms:.1} ms, {} blocks' index and symbols fetched again, {:.2} MB of profile data; {:.1} MB cached after",
        mb(bound as f64),
        refetched(&small_metrics) - before_blocks,
        mb(fetched(&small_metrics) - before_bytes),
        mb(small_metrics.cached_bytes.get() as f64),
    );
}
