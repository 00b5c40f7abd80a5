//! `parca import FILE|DIR… --name NAME [--label k=v]… [--time T]`: saved pprof files written as
//! complete blocks into a store, stopped or served.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use parca_ingest::{ImportOptions, ImportReport};

/// Flags of `parca import`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// pprof files (anything `parca profile` reads), or directories of them, walked recursively.
    #[arg(required = true, value_name = "FILE|DIR")]
    paths: Vec<PathBuf>,
    /// The profile name, the first part of each series' `__name__` (`process_cpu`, `memory`,
    /// `mutex`, …), as `/api/v1/write?__name__=` takes it.
    #[arg(long)]
    name: String,
    /// A label of every imported series, `NAME=VALUE` (repeatable), as a push's query
    /// parameters give them.
    #[arg(long = "label", value_name = "NAME=VALUE", value_parser = parse_label)]
    labels: Vec<(String, String)>,
    /// The time of files that carry none (google/pprof's legacy formats): RFC 3339
    /// (2022-02-10T16:00:00Z) or Unix seconds. A file with its own time keeps it.
    #[arg(long, value_parser = parca_api::parse_time_ms)]
    time: Option<i64>,
    /// Skip files that cannot be imported, reporting each, instead of stopping at the first one
    /// before anything is written.
    #[arg(long)]
    skip_bad: bool,
    /// Directory of the store (the server's --storage-path); it may be in use by a running
    /// server, which serves the new blocks within seconds.
    #[arg(long, default_value = "./data")]
    storage_path: PathBuf,
    /// How much time one block covers: the server's --storage-block-duration.
    #[arg(long, default_value = "2h", value_parser = crate::server::parse_duration)]
    storage_block_duration: Duration,
    /// The server's --storage-retention-time: a file with a profile older than it (before now,
    /// or before the newest block of the store) is refused, since the server would delete it.
    #[arg(long, default_value = "15d", value_parser = crate::server::parse_duration)]
    storage_retention_time: Duration,
    /// Import profiles older than --storage-retention-time all the same, for a server that will
    /// run with a longer retention (0 keeps everything).
    #[arg(long)]
    allow_past_retention: bool,
}

fn parse_label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err(format!("`{text}` is not of the form NAME=VALUE")),
    }
}

/// Reads every file, writes the blocks, prints what was done.
pub fn run(args: &Args) -> anyhow::Result<()> {
    if args.storage_block_duration < Duration::from_secs(60) {
        bail!("--storage-block-duration must be at least 1m");
    }
    let labels = parca_tsdb::Labels::new(args.labels.iter().cloned()).context("invalid --label")?;
    let options = ImportOptions {
        name: args.name.clone(),
        labels,
        default_time_ms: args.time,
        skip_bad: args.skip_bad,
        store: parca_tsdb::Options {
            block_duration_ms: args.storage_block_duration.as_millis() as i64,
            retention_ms: if args.allow_past_retention {
                0
            } else {
                args.storage_retention_time.as_millis() as i64
            },
            ..Default::default()
        },
        decode: Default::default(),
    };
    let report = parca_ingest::import(&args.paths, &args.storage_path, &options)
        .with_context(|| format!("cannot import into `{}`", args.storage_path.display()))?;
    let mut err = std::io::stderr().lock();
    for bad in &report.bad_files {
        writeln!(
            err,
            "parca: skipped `{}`: {}",
            bad.path.display(),
            bad.fault
        )?;
    }
    let mut out = std::io::stdout().lock();
    write_summary(&mut out, args, &report)?;
    out.flush()?;
    Ok(())
}

fn time(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms).map_or_else(|_| format!("{ms} ms"), |t| t.to_string())
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn write_summary(out: &mut dyn Write, args: &Args, report: &ImportReport) -> anyhow::Result<()> {
    let Some((min, max)) = report.time_range_ms else {
        writeln!(
            out,
            "read {}: no profile to import",
            plural(report.n_files, "file", "files")
        )?;
        return Ok(());
    };
    writeln!(
        out,
        "imported {} into `{}`: {} of {}, from {} to {}",
        plural(report.n_files, "file", "files"),
        args.storage_path.display(),
        plural(report.n_profiles, "profile", "profiles"),
        plural(report.n_series, "series", "series"),
        time(min),
        time(max)
    )?;
    writeln!(out, "{}:", plural(report.blocks.len(), "block", "blocks"))?;
    for b in &report.blocks {
        writeln!(
            out,
            "  {} from {} to {}: {}, {}",
            b.name,
            time(b.min_time_ms),
            time(b.max_time_ms),
            plural(b.n_series as usize, "series", "series"),
            plural(b.n_profiles as usize, "profile", "profiles")
        )?;
    }
    if report.n_duplicates > 0 {
        writeln!(
            out,
            "{} with the same series and time as one before (the same profile) imported once",
            plural(report.n_duplicates, "profile", "profiles")
        )?;
        if args.time.is_some() {
            writeln!(
                out,
                "  (files without a time all take --time: import such files of one type one at \
                 a time, each with its own --time)"
            )?;
        }
    }
    if !report.bad_files.is_empty() {
        writeln!(
            out,
            "skipped {} (listed on stderr)",
            plural(report.bad_files.len(), "bad file", "bad files")
        )?;
    }
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let retention_ms = args.storage_retention_time.as_millis() as i64;
    if args.allow_past_retention && retention_ms > 0 && min < now_ms.saturating_sub(retention_ms) {
        writeln!(
            out,
            "note: profiles from before {} are older than --storage-retention-time={}: a server \
             with that retention deletes their blocks once it holds profiles that much newer; \
             serve this store with a longer retention (0 keeps everything)",
            time(now_ms.saturating_sub(retention_ms)),
            parca_config::format_duration(args.storage_retention_time)
        )?;
    }
    Ok(())
}
