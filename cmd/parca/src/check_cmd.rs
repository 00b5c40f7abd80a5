//! `parca check rules FILE…`: checks rule files as `promtool check rules` does, each fault with
//! its file, line and column, before a server is given them (`rule_files:` in parca.yaml).

use std::io::Write;
use std::path::PathBuf;

use anyhow::bail;

/// Flags of `parca check`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// Check rule files (Prometheus' format, expressions in the profile query language): the
    /// YAML's shape, group and rule names, fields, durations, templates and expressions.
    Rules {
        /// The rule files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let What::Rules { files } = &args.what;
    let mut out = std::io::stdout().lock();
    let mut n_failed = 0;
    for path in files {
        writeln!(out, "Checking {}", path.display())?;
        match parca_config::load_rules(path) {
            Ok(file) => writeln!(out, "  SUCCESS: {} rules found\n", file.n_rules())?,
            Err(e) => {
                n_failed += 1;
                writeln!(out, "  FAILED:\n{e}\n")?;
            }
        }
    }
    out.flush()?;
    if n_failed > 0 {
        bail!("{n_failed} of {} rule files have faults", files.len());
    }
    Ok(())
}
