//! Append throughput with the WAL: one profile appended and committed per iteration, on real
//! corpus profiles, once with `commit` (waits for the fsync, as a push) and once with
//! `commit_buffered` (the WAL record written to the operating system, fsynced in the background
//! within a second, as a scrape).
//! Each iteration appends a copy of the profile with tables of its own, as a freshly decoded
//! profile has (the store remembers the last tables it imported from).
//! `cargo bench -p parca-tsdb --bench append`.

use std::sync::Arc;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use parca_tsdb::{Db, Labels, Options};

#[path = "support/corpus.rs"]
mod corpus;
use corpus::profile;

/// `p` with a copy of its tables, so that the store cannot reuse what it remembers of them.
fn fresh(p: &parca_profile::Profile) -> parca_profile::Profile {
    parca_profile::Profile {
        tables: Arc::new((*p.tables).clone()),
        ..p.clone()
    }
}

/// How an iteration commits.
#[derive(Clone, Copy)]
enum Commit {
    /// `commit`: returns once fsynced, as a push is answered.
    Synced,
    /// `commit_buffered`: the WAL records written to the operating system, fsynced by the
    /// store's sync thread within a second, as scrapes commit.
    Buffered,
}

fn append(c: &mut Criterion) {
    for (name, commit) in [
        ("append_commit", Commit::Synced),
        ("append_commit_buffered", Commit::Buffered),
    ] {
        let mut group = c.benchmark_group(name);
        for (rel, sample_type) in [
            ("published/parca/alloc_space_delta.pb.gz", "alloc_space"),
            ("go/go-cpu.pb.gz", "cpu"),
            ("published/google-pprof/large.cpu", "cpu"),
        ] {
            let p = profile(rel, sample_type);
            let dir = tempfile::tempdir().expect("tempdir");
            let db = Db::open(dir.path(), Options::default()).expect("open");
            let labels = Labels::new([("__name__", "bench"), ("file", rel)]).expect("labels");
            let mut ts = 0i64;
            group.throughput(Throughput::Elements(p.samples.len() as u64));
            group.bench_function(format!("{rel} ({} samples)", p.samples.len()), |b| {
                b.iter_batched(
                    || fresh(&p),
                    |p| {
                        ts += 1;
                        let mut app = db.appender();
                        app.append(&labels, ts, &p).expect("append");
                        match commit {
                            Commit::Synced => app.commit(),
                            Commit::Buffered => app.commit_buffered(),
                        }
                        .expect("commit");
                    },
                    BatchSize::SmallInput,
                )
            });
        }
        group.finish();
    }
}

criterion_group!(benches, append);
criterion_main!(benches);
