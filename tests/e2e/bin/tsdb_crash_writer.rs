//! Crash-test writer: appends a profile file (its last sample type) to three series as fast as it can, committing in
//! small batches, and after each commit prints `instance timestamp_ms` for every profile of the
//! batch: a printed line is an acknowledgment. It never stops by itself; the test kills it.
//!
//! `tsdb-crash-writer DATA_DIR PROFILE_FILE [BLOCK_DURATION_MS] [buffered]`: with a short block
//! duration the store cuts blocks, writes WAL checkpoints and compacts while it is being killed;
//! with `buffered` it commits as scrapes do (`commit_buffered`: no fsync, which a killed process
//! must not lose either).

use std::io::Write;

use anyhow::Context;
use parca_tsdb::{Db, Labels, Options};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (dir, file) = (
        args.next().context("DATA_DIR")?,
        args.next().context("PROFILE_FILE")?,
    );
    let bytes = std::fs::read(&file).with_context(|| format!("read {file}"))?;
    let profiles = parca_profile::decode(&bytes, &Default::default())?;
    let profile = parca_profile::select_sample_type(profiles, None, None)?;
    let mut options = Options::default();
    let mut buffered = false;
    for arg in args {
        if arg == "buffered" {
            buffered = true;
        } else {
            options.block_duration_ms = arg.parse().context("BLOCK_DURATION_MS")?;
        }
    }
    let db = Db::open(std::path::Path::new(&dir), options)?;
    let start = db
        .querier(i64::MIN, i64::MAX)
        .select(&[])
        .expect("query")
        .iter()
        .filter_map(|s| s.profiles.last().map(|(t, _)| *t))
        .max()
        .map_or(1, |t| t + 1);
    let series: Vec<Labels> = ["a", "b", "c"]
        .iter()
        .map(|i| {
            Labels::new([
                ("__name__", "crash:goroutine:count:goroutine:count"),
                ("instance", i),
            ])
        })
        .collect::<Result<_, _>>()?;
    let stdout = std::io::stdout();
    let mut ts = start;
    loop {
        let mut app = db.appender();
        let mut batch = Vec::new();
        for (i, labels) in series.iter().enumerate().take(1 + (ts as usize % 3)) {
            app.append(labels, ts, &profile)?;
            batch.push(format!("{} {ts}", ["a", "b", "c"][i]));
        }
        if buffered {
            app.commit_buffered()?;
        } else {
            app.commit()?;
        }
        let mut out = stdout.lock();
        for line in batch {
            writeln!(out, "{line}")?;
        }
        out.flush()?;
        ts += 1;
    }
}
