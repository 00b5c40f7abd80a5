//! Bytes per sample on disk: real profiles of three programs (Go's net/http/pprof, Debian's
//! Prometheus, Node with @datadog/pprof; every profile kind each serves, scraped every 5 s,
//! committed under `tests/testdata/fleet/`) imported as `parca import` imports them, compacted
//! until nothing more is due, and the blocks' files weighed per kind: `profiles` (the
//! samples), `index`, `symbols`, and `meta.json`. Beside them: the same profiles as the gzipped
//! pprof they arrived as.
//!
//!     cargo bench -p parca-ingest --bench bytes_per_sample
//!     FLEET_DIR=/tmp/fleet cargo bench -p parca-ingest --bench bytes_per_sample   # another set
//!     STORE_DIR=/tmp/store cargo bench …   # keeps the whole set's store there
//!
//! The set's layout is `<target>/<kind>/<unix-ms>.pb.gz` (`tests/tools/collect-fleet.sh` makes
//! one); each target's profiles get the label `job=<target>` and the profile name a scrape
//! config would give its kind.

// A bench binary's output is its product.
#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use parca_ingest::{ImportOptions, import, list_files};
use parca_tsdb::{Db, Labels, MatchOp, Matcher, NAME_LABEL, SUMMARY_RESOLUTIONS_MS};

/// The store's default block duration: imports write blocks of it.
const TWO_HOURS_MS: i64 = 2 * 3_600_000;

/// The profile name a scrape gives each kind of endpoint (Parca's defaults where it has one).
fn profile_name(kind: &str) -> &str {
    match kind {
        "cpu" => "process_cpu",
        "heap" => "memory",
        other => other,
    }
}

/// Bytes of the blocks' files, by file name.
#[derive(Default)]
struct Weights {
    by_file: BTreeMap<String, u64>,
    n_samples: u64,
    n_profiles: u64,
    n_series: u64,
    n_blocks: usize,
    pprof_gz_bytes: u64,
    n_files: usize,
    /// The median time to merge each profile type whole, every type in turn (what a flame
    /// graph of the set's whole range reads), with summaries where the store has them.
    merge_all_ms: f64,
}

impl Weights {
    fn row(&self, name: &str) -> String {
        let per = |b: u64| b as f64 / self.n_samples.max(1) as f64;
        let get = |f: &str| self.by_file.get(f).copied().unwrap_or(0);
        let total: u64 = self.by_file.values().sum();
        format!(
            "{name:<12} {:>5} {:>7} {:>9} {:>6} | {:>7.3} {:>7.3} {:>7.3} {:>7.3} | {:>7.3} | {:>7.2}",
            self.n_files,
            self.n_profiles,
            self.n_samples,
            self.n_blocks,
            per(get("profiles")),
            per(get("index")),
            per(get("symbols")),
            per(get("meta.json")),
            per(total),
            per(self.pprof_gz_bytes),
        )
    }
}

/// Imports every kind of every target under `targets` into a new store, compacts it, and
/// weighs its blocks.
/// Imports `targets` of `set` into a store of blocks of `block_duration_ms` (blocks of 6 hours
/// and longer hold summaries, as compaction writes them) and weighs its blocks.
fn weigh(set: &Path, targets: &[String], keep: Option<&Path>, block_duration_ms: i64) -> Weights {
    let temp = tempfile::tempdir().expect("temporary store");
    let store = match keep {
        Some(dir) => {
            let _ = std::fs::remove_dir_all(dir);
            std::fs::create_dir_all(dir).expect("store directory");
            dir
        }
        None => temp.path(),
    };
    let store_options = parca_tsdb::Options {
        // The set's times are whenever it was collected: keep them all.
        retention_ms: 0,
        block_duration_ms,
        ..Default::default()
    };
    let mut w = Weights::default();
    for target in targets {
        for kind in sorted_dirs(&set.join(target)) {
            let dir = set.join(target).join(&kind);
            let files = list_files(std::slice::from_ref(&dir)).expect("listed");
            w.n_files += files.len();
            w.pprof_gz_bytes += files
                .iter()
                .map(|f| std::fs::metadata(f).expect("stat").len())
                .sum::<u64>();
            let options = ImportOptions {
                name: profile_name(&kind).to_owned(),
                labels: Labels::new([("job", target.as_str())]).expect("valid label"),
                default_time_ms: None,
                skip_bad: false,
                store: store_options.clone(),
                decode: Default::default(),
            };
            import(&[dir], store, &options).expect("imported");
        }
    }
    let db = Db::open(store, store_options).expect("store opens");
    db.compact().expect("compacted");
    let stats = db.stats();
    w.n_samples = stats.n_samples as u64;
    w.n_profiles = stats.n_profiles as u64;
    for block in db.blocks() {
        w.n_blocks += 1;
        for entry in std::fs::read_dir(&block.dir).expect("block dir") {
            let entry = entry.expect("entry");
            let len = entry.metadata().expect("stat").len();
            *w.by_file
                .entry(entry.file_name().to_string_lossy().into_owned())
                .or_default() += len;
        }
    }
    let all_series = db
        .querier(i64::MIN, i64::MAX)
        .series(&[])
        .expect("series listed");
    w.n_series = all_series.len() as u64;
    w.merge_all_ms = time_merges(&db, &all_series);
    db.close().expect("closed");
    w
}

/// The median over 15 rounds of merging every profile type of `series` whole over the block's
/// range, a type at a time, reading summaries of any resolution where they cover windows whole.
fn time_merges(db: &Db, series: &[Labels]) -> f64 {
    let mut names: Vec<&str> = series.iter().filter_map(|l| l.get(NAME_LABEL)).collect();
    names.sort_unstable();
    names.dedup();
    let blocks = db.blocks();
    let from = blocks.iter().map(|b| b.min_time_ms).min().expect("a block");
    let to = blocks.iter().map(|b| b.max_time_ms).max().expect("a block");
    let resolution = *SUMMARY_RESOLUTIONS_MS.last().expect("resolutions");
    // The whole range in whole windows of a day, so that every summary level may be read.
    let from = from.div_euclid(resolution) * resolution;
    let to = (to.div_euclid(resolution) + 1) * resolution;
    let mut rounds: Vec<f64> = (0..15)
        .map(|_| {
            let start = std::time::Instant::now();
            for name in &names {
                let m = [Matcher::new(MatchOp::Equal, NAME_LABEL, *name).expect("valid matcher")];
                db.querier(from, to)
                    .with_summaries(resolution)
                    .merge(&m)
                    .expect("merged");
            }
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    rounds[rounds.len() / 2]
}

fn sorted_dirs(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read `{}`: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

fn main() {
    let set = std::env::var_os("FLEET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/testdata/fleet")
        });
    let targets = sorted_dirs(&set);
    println!("data set: {} ({} targets)", set.display(), targets.len());
    println!(
        "{:<12} {:>5} {:>7} {:>9} {:>6} | {:>7} {:>7} {:>7} {:>7} | {:>7} | {:>7}",
        "store",
        "files",
        "profiles",
        "samples",
        "blocks",
        "samples",
        "index",
        "symbols",
        "meta",
        "B/smpl",
        "pprof.gz"
    );
    for target in &targets {
        let w = weigh(&set, std::slice::from_ref(target), None, TWO_HOURS_MS);
        println!("{}", w.row(target));
    }
    // STORE_DIR keeps the whole set's store for a closer look.
    let keep = std::env::var_os("STORE_DIR").map(PathBuf::from);
    let all = weigh(&set, &targets, keep.as_deref(), TWO_HOURS_MS);
    println!("{}", all.row("all"));
    // The same in one block of 6 hours, which holds summaries (of 5-minute windows here).
    let keep6 = std::env::var_os("STORE_DIR_6H").map(PathBuf::from);
    let summarized = weigh(&set, &targets, keep6.as_deref(), 3 * TWO_HOURS_MS);
    println!("{}", summarized.row("all, 6h"));
    println!(
        "merge of each profile type over the whole set, every type in turn (median of 15): \
         {:.2} ms in 2-hour blocks, {:.2} ms in the 6-hour block",
        all.merge_all_ms, summarized.merge_all_ms
    );
    println!(
        "all: {} series; bytes per sample by file kind after compaction (columns 6–9), their sum, \
         and the gzipped pprof the profiles came as; `all, 6h`: imported into a block of 6 hours, \
         with summaries, as compaction writes blocks that long",
        all.n_series
    );
}
