//! `parca profile FILE… [--diff BASE…] [--granularity G] --format top|folded|json|pprof|callgraph|dot`.

use std::fs;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::ValueEnum;
use parca_pprof::DecodeOptions;
use parca_profile::units::ValueStyle;
use parca_profile::{
    CallGraph, DiffMode, FlameGraph, Granularity, Profile, StackFilter, Tables, TopTable,
};

/// What `parca profile` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Flat and cumulative value per function, largest flat first (like `pprof -top`).
    Top,
    /// The top table as JSON.
    TopJson,
    /// One line per stack, `root;…;leaf value`: input for flamegraph.pl and inferno.
    Folded,
    /// The flame-graph tree as JSON, as the HTTP API serves it.
    Json,
    /// A gzipped pprof that `go tool pprof` opens.
    Pprof,
    /// The call graph as JSON (`pprof -dot`'s nodes and edges), as the HTTP API serves it.
    Callgraph,
    /// The call graph in Graphviz's language, for `dot -Tsvg`.
    Dot,
}

/// Flags of `parca profile`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// pprof files (gzipped or raw); several are merged into one.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Output format.
    #[arg(long, short = 'f', value_enum, default_value_t = Format::Top)]
    format: Format,
    /// What one frame is: `function` (default), `line` (`name file:line`, as `pprof -lines`)
    /// or `address`; pprof's plurals are accepted.
    #[arg(long, value_name = "G", value_parser = parse_granularity)]
    granularity: Option<Granularity>,
    /// Sample type to show, e.g. `alloc_space` (default: the profile's default, else the last).
    #[arg(long, value_name = "TYPE")]
    sample_type: Option<String>,
    /// Compare against these files (merged): values of both sides are kept per stack.
    #[arg(long, value_name = "BASE", num_args = 1..)]
    diff: Vec<PathBuf>,
    /// With --diff: scale the side with the smaller total to the other's total.
    #[arg(long, requires = "diff")]
    relative: bool,
    /// Keep only samples with a function whose name contains this text (repeatable).
    #[arg(long, value_name = "TEXT")]
    contains: Vec<String>,
    /// Keep only samples with a function whose whole name matches this regex (repeatable).
    #[arg(long, value_name = "REGEX")]
    matches: Vec<String>,
    /// Drop samples with a function whose whole name matches this regex (repeatable).
    #[arg(long, value_name = "REGEX")]
    drop: Vec<String>,
    /// Print values as stored (integers in the sample type's unit) instead of in human units
    /// (`240.29s`, `12.50MB`), for scripts.
    #[arg(long)]
    raw: bool,
    /// Write here instead of standard output.
    #[arg(long, short = 'o', value_name = "PATH")]
    output: Option<PathBuf>,
}

/// Reads, merges, optionally diffs, filters and prints.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let sample_type = args.sample_type.as_deref();
    let mut profile = load_merged(&args.files, sample_type)?;
    if !args.diff.is_empty() {
        // The base must measure the same thing: pick its sample type by the comparison's.
        let base = load_merged(&args.diff, Some(&profile.meta.sample_type.kind))?;
        profile =
            parca_profile::diff(&base, &profile).context("cannot compare with the --diff files")?;
        let mode = if args.relative {
            DiffMode::Relative
        } else {
            DiffMode::Absolute
        };
        profile = parca_profile::apply_diff_mode(profile, mode);
    }
    let mut filters: Vec<StackFilter> = args
        .contains
        .iter()
        .map(|s| StackFilter::contains(s))
        .collect();
    for re in &args.matches {
        filters.push(StackFilter::matches(re)?);
    }
    for re in &args.drop {
        filters.push(StackFilter::not_matches(re)?);
    }
    let profile = parca_profile::filter_stacks(&profile, &filters);
    let profile = match (args.granularity, args.format) {
        (None, _) => profile,
        (Some(g), Format::Pprof) => parca_profile::aggregate(&profile, g),
        (Some(g), _) => parca_profile::with_granularity(&profile, g),
    };

    let mut out: Box<dyn Write> = match &args.output {
        Some(path) => Box::new(BufWriter::new(
            fs::File::create(path)
                .with_context(|| format!("cannot create `{}`", path.display()))?,
        )),
        None => Box::new(BufWriter::new(io::stdout().lock())),
    };
    let style = if args.raw {
        ValueStyle::Raw
    } else {
        ValueStyle::Human
    };
    write(&profile, args.format, style, &mut out)?;
    out.flush().context("cannot write the output")?;
    Ok(())
}

fn write(
    profile: &Profile,
    format: Format,
    style: ValueStyle,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    match format {
        Format::Top => out.write_all(TopTable::build(profile).to_text(style).as_bytes())?,
        Format::TopJson => serde_json::to_writer(
            &mut *out,
            &parca_api::render::TopTableJson::from(&TopTable::build(profile)),
        )?,
        Format::Folded => FlameGraph::build(profile).write_folded(out)?,
        Format::Json => {
            parca_api::render::write_flame_graph_json(&FlameGraph::build(profile), out)?
        }
        Format::Pprof => out.write_all(&parca_pprof::encode(
            &parca_profile::to_pprof(profile),
            true,
        ))?,
        Format::Callgraph => serde_json::to_writer(
            &mut *out,
            &parca_api::render::CallGraphJson::from(&CallGraph::build(profile)),
        )?,
        Format::Dot => out.write_all(CallGraph::build(profile).to_dot().as_bytes())?,
    }
    Ok(())
}

fn parse_granularity(text: &str) -> Result<Granularity, String> {
    Granularity::parse(text).ok_or_else(|| {
        format!("`{text}` is not a granularity: use function, line or address (or pprof's plurals)")
    })
}

/// Decodes every file and merges the chosen sample type of all of them.
///
/// All files are normalized into one set of tables, so that each symbol and stack is interned
/// once and the merge is an array add (remapping each file's own tables cost ten times more).
fn load_merged(paths: &[PathBuf], sample_type: Option<&str>) -> anyhow::Result<Profile> {
    let mut tables = Tables::new();
    let mut chosen = Vec::with_capacity(paths.len());
    for path in paths {
        let bytes = fs::read(path).with_context(|| format!("cannot read `{}`", path.display()))?;
        let pprof = parca_pprof::decode(&bytes, &DecodeOptions::default())
            .with_context(|| format!("`{}` is not a usable pprof profile", path.display()))?;
        let default = pprof.header().default_sample_type;
        let default = (default != 0).then(|| pprof.string(default).to_owned());
        let mut parts = parca_profile::normalize_into(&pprof, &mut tables)
            .with_context(|| format!("in `{}`", path.display()))?;
        let idx = parca_profile::pick_sample_type(
            parts.iter().map(|(meta, _)| meta),
            sample_type,
            default.as_deref(),
        )
        .with_context(|| format!("in `{}`", path.display()))?;
        chosen.push((path, parts.swap_remove(idx)));
    }
    let tables = Arc::new(tables);
    let mut merger = parca_profile::Merger::new();
    for (path, (meta, samples)) in chosen {
        let profile = Profile {
            tables: Arc::clone(&tables),
            meta,
            samples,
        };
        merger.add(&profile).with_context(|| {
            format!("cannot merge `{}` with the files before it", path.display())
        })?;
    }
    match merger.finish() {
        Some(profile) => Ok(profile),
        None => bail!("no profile given"),
    }
}
