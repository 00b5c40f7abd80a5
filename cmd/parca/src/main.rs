//! `parca`: the continuous-profiling server's binary. Thin: flags in, library calls out.
//!
//! Without a subcommand it runs the server; `parca profile` reads pprof files for people and
//! scripts; `parca import` writes saved pprof files as blocks into a store; `parca compact`
//! compacts the object store's blocks and applies its retention; `parca check rules` checks
//! rule files.

mod check_cmd;
mod compact_cmd;
mod import_cmd;
mod profile_cmd;
mod server;

/// jemalloc, so that the server can profile its own heap (`/debug/pprof/heap`).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc reads its options from this symbol at start: heap profiling on, one sample per
/// 512 KiB allocated on average (`lg_prof_sample:19`), cheap enough to leave on, as
/// Polar Signals' jemalloc_pprof recommends.
#[allow(non_upper_case_globals)]
// SAFETY: jemalloc looks this symbol up by name and reads it as a NUL-terminated string; nothing
// else defines it.
#[unsafe(export_name = "malloc_conf")]
pub static malloc_conf: &[u8] = b"prof:true,prof_active:true,lg_prof_sample:19\0";

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// Continuous profiling: collect, store, query and compare pprof profiles.
#[derive(Debug, Parser)]
#[command(name = "parca", version, about, long_about = None)]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    server: server::ServerArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Read pprof files: print the top table, folded stacks or flame-graph JSON, or write pprof.
    /// Several files are merged; --diff compares them against a base.
    Profile(profile_cmd::Args),
    /// Write pprof files (and directories of them) as complete blocks into a store, stopped or
    /// served: profiles of any age, named as /api/v1/write names them.
    Import(import_cmd::Args),
    /// Compact the object store's blocks and apply its retention, once (for a bucket that no
    /// server runs --objstore-compactor on).
    Compact(compact_cmd::Args),
    /// Check files before a server reads them: `parca check rules FILE…`, as promtool's.
    Check(check_cmd::Args),
}

fn main() -> ExitCode {
    let command = Cli::command();
    let matches = command.clone().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let result = match cli.command {
        Some(Command::Profile(args)) => profile_cmd::run(&args),
        Some(Command::Import(args)) => import_cmd::run(&args),
        Some(Command::Compact(args)) => compact_cmd::run(&args),
        Some(Command::Check(args)) => check_cmd::run(&args),
        None => server::run(cli.server.with_flag_values(&command, &matches)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that stops early (`parca profile … | head`) is not an error.
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            // The binary's edge: one line with the whole cause chain, non-zero exit.
            #[allow(clippy::print_stderr)]
            {
                eprintln!("parca: error: {err:#}");
            }
            ExitCode::FAILURE
        }
    }
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain()
        .filter_map(|cause| cause.downcast_ref::<std::io::Error>())
        .any(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}
