//! `parca-agent`: the eBPF CPU profiler of the node. Flags (Parca agent's names) and wiring only;
//! everything else is `parca_agent_runtime`.

/// jemalloc: the sampling thread and the profile builder allocate and free small vectors all
/// the time, and glibc's malloc spent ~15% of the agent's CPU on them (measured on #28's busy
/// node; about 5% with jemalloc).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc reads its options from this symbol at start. Its defaults (four arenas per CPU,
/// freed pages kept 10 s) raised the agent's peak RSS from 83 to 114 MB on
/// the busy node; two arenas and freed pages given back after a second held it at 89 MB.
#[allow(non_upper_case_globals)]
// SAFETY: jemalloc looks this symbol up by name and reads it as a NUL-terminated string; nothing
// else defines it.
#[unsafe(export_name = "malloc_conf")]
pub static malloc_conf: &[u8] = b"narenas:2,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;

/// Samples the stacks of every process on every CPU with a BPF program, symbolizes them, and
/// serves them as pprof at /debug/pprof/profile (scrape it with a parca server). Needs root, or
/// CAP_BPF and CAP_PERFMON (plus CAP_SYSLOG and CAP_SYS_PTRACE for kernel and other users'
/// symbols), and a kernel with BTF.
#[derive(Debug, Parser)]
#[command(name = "parca-agent", version)]
struct Args {
    /// Address to listen on; `:7071` means every interface.
    #[arg(long, default_value = ":7071")]
    http_address: String,
    /// Samples per second on each CPU. 19 (a prime, as Parca) costs well under 0.1% of a CPU.
    #[arg(long, default_value_t = 19)]
    profiling_cpu_sampling_frequency: u64,
    /// How often the BPF maps are drained (and a window pushed), e.g. 10s.
    #[arg(long, default_value = "10s", value_parser = parca_vocab::duration::parse)]
    profiling_duration: Duration,
    /// A parca server to push every window to: `host:port` (over TLS unless
    /// --remote-store-insecure), or a URL with its scheme.
    #[arg(long)]
    remote_store_address: Option<String>,
    /// Bearer token sent with every push.
    #[arg(long, conflicts_with = "remote_store_bearer_token_file")]
    remote_store_bearer_token: Option<String>,
    /// File holding the bearer token sent with every push (read before each push, so a
    /// rotated token is picked up).
    #[arg(long)]
    remote_store_bearer_token_file: Option<std::path::PathBuf>,
    /// Push over plain HTTP (for an address without a scheme).
    #[arg(long)]
    remote_store_insecure: bool,
    /// Do not verify the server's certificate. For labs with self-signed certificates only:
    /// prefer --remote-store-ca-file.
    #[arg(long)]
    remote_store_insecure_skip_verify: bool,
    /// PEM file of CAs to trust for the server's certificate, besides the built-in roots.
    #[arg(long)]
    remote_store_ca_file: Option<std::path::PathBuf>,
    /// Windows kept while the server cannot take them (memory is bounded by this); the oldest
    /// is dropped beyond it, and counted in /metrics.
    #[arg(long, default_value_t = 12)]
    remote_store_max_pending_windows: usize,
    /// Labels added to every sample, `name=value` separated by `;` (repeatable), e.g.
    /// `region=eu-1;cluster=prod`.
    #[arg(long, value_parser = parse_labels)]
    metadata_external_labels: Vec<Vec<(String, String)>>,
    /// Profile only the processes of these systemd units (comma-separated), e.g.
    /// `nginx.service,postgresql@15-main.service`, matched on the process's cgroup.
    #[arg(long, value_delimiter = ',')]
    systemd_units: Vec<String>,
    /// Share of processes profiled, from 0 (exclusive) to 1. Chosen by a hash of pid and
    /// start time, so a process is in or out for its whole life.
    #[arg(long, default_value_t = 1.0)]
    sampling_ratio: f64,
    /// Prometheus' web configuration file (TLS, basic auth, headers) for the agent's own HTTP
    /// port, as the server's --web-config-file.
    #[arg(long)]
    web_config_file: Option<std::path::PathBuf>,
    /// A file of bearer tokens (one per line) accepted on the agent's own HTTP port.
    #[arg(long)]
    web_bearer_token_file: Option<std::path::PathBuf>,
    /// The `node` label of every sample (default: the host name).
    #[arg(long)]
    node: Option<String>,
    /// Least severe log level shown: error, warn, info or debug.
    #[arg(long, default_value = "info")]
    log_level: tracing::Level,
    /// debuginfod servers to fetch the debug files of stripped binaries from, separated by
    /// spaces or commas (default: $DEBUGINFOD_URLS). Asked only for objects lacking symbols or
    /// DWARF whose debug file is not under --debug-dirs.
    #[arg(long)]
    debuginfod_urls: Option<String>,
    /// Where debug files fetched from debuginfod are kept, by build id.
    #[arg(long, default_value = "/var/cache/parca-agent/debuginfod")]
    debuginfod_cache_dir: std::path::PathBuf,
    /// Bytes the debuginfod cache may hold; the oldest files go first.
    #[arg(long, default_value_t = 2 << 30)]
    debuginfod_cache_max_bytes: u64,
    /// Where objects' DWARF is kept decompressed, one file per build id, to be mapped rather
    /// than held in the agent's memory (and inflated once, not at every reload).
    #[arg(long, default_value = "/var/cache/parca-agent/dwarf")]
    dwarf_cache_dir: std::path::PathBuf,
    /// Bytes the DWARF cache may hold; the least recently used files go first. 0: no cache,
    /// DWARF is copied into memory (at most 24 MiB an object, 32 MiB in all).
    #[arg(long, default_value_t = 2 << 30)]
    dwarf_cache_max_bytes: u64,
    /// Directories searched for separate debug files, by build id and .gnu_debuglink
    /// (comma-separated).
    #[arg(long, default_value = "/usr/lib/debug", value_delimiter = ',')]
    debug_dirs: Vec<std::path::PathBuf>,
    /// Kernel memory the unwind tables may take, in bytes (at least 1 MiB); past it the least
    /// recently used objects' tables are evicted.
    #[arg(long, default_value_t = 64 << 20)]
    unwind_tables_max_bytes: u64,
    /// Off-CPU profiling: the probability (0 to 1) that a thread's switch-out is recorded; its
    /// stack and the time until it runs again are served at /debug/pprof/off_cpu (and pushed).
    /// 0 (the default) turns it off; 1 records every switch-out.
    #[arg(long, default_value_t = 0.0)]
    off_cpu_threshold: f64,
    /// Where the kernel's BTF is looked for (for tests of the refusal).
    #[arg(long, default_value = "/sys/kernel/btf/vmlinux", hide = true)]
    btf_path: std::path::PathBuf,
}

/// `region=eu-1;cluster=prod`: label names as Prometheus allows them, values anything.
fn parse_labels(text: &str) -> Result<Vec<(String, String)>, String> {
    text.split(';')
        .filter(|pair| !pair.trim().is_empty())
        .map(|pair| {
            let (name, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("`{pair}` is not of the form name=value"))?;
            let name = name.trim();
            let valid = name
                .chars()
                .enumerate()
                .all(|(i, c)| c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()));
            if name.is_empty() || !valid || name.starts_with("__") {
                return Err(format!(
                    "`{name}` is not a label name: letters, digits and `_`, not starting with a \
                     digit or `__`"
                ));
            }
            Ok((name.to_owned(), value.to_owned()))
        })
        .collect()
}

/// `:7071` (every interface), `127.0.0.1:7071` or `[::1]:7071`.
fn listen_address(text: &str) -> anyhow::Result<SocketAddr> {
    let full = if text.starts_with(':') {
        format!("0.0.0.0{text}")
    } else {
        text.to_owned()
    };
    full.parse()
        .with_context(|| format!("--http-address `{text}` is not of the form host:port or :port"))
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without handlers the default action (exit) still detaches everything.
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {},
        _ = int.recv() => {},
    }
    tracing::info!("stopping");
}

async fn run(args: Args) -> anyhow::Result<()> {
    let defaults = parca_agent_runtime::Config::default();
    let config = parca_agent_runtime::Config {
        frequency_hz: args.profiling_cpu_sampling_frequency,
        profiling_duration: args.profiling_duration,
        http_address: listen_address(&args.http_address)?,
        remote_store: args
            .remote_store_address
            .map(|address| parca_agent_runtime::RemoteStore {
                address,
                bearer_token: args.remote_store_bearer_token,
                bearer_token_file: args.remote_store_bearer_token_file,
                insecure: args.remote_store_insecure,
                insecure_skip_verify: args.remote_store_insecure_skip_verify,
                ca_file: args.remote_store_ca_file,
                max_pending_windows: args.remote_store_max_pending_windows,
            }),
        node: args.node.unwrap_or(defaults.node),
        external_labels: args
            .metadata_external_labels
            .into_iter()
            .flatten()
            .collect(),
        process_filter: parca_agent_runtime::ProcessFilter {
            systemd_units: args.systemd_units,
            sampling_ratio: args.sampling_ratio,
        },
        security: std::sync::Arc::new(
            parca_webconfig::Security::load(
                args.web_config_file.as_deref(),
                args.web_bearer_token_file.as_deref(),
            )
            .context("cannot use the web configuration")?,
        ),
        btf_path: args.btf_path,
        unwind_tables_max_bytes: args.unwind_tables_max_bytes,
        off_cpu_threshold: args.off_cpu_threshold,
        debug_dirs: args.debug_dirs,
        debuginfod_urls: match args.debuginfod_urls {
            Some(urls) => urls
                .split([' ', ','])
                .filter(|u| !u.is_empty())
                .map(str::to_owned)
                .collect(),
            None => defaults.debuginfod_urls,
        },
        debuginfod_cache_dir: args.debuginfod_cache_dir,
        debuginfod_cache_max_bytes: args.debuginfod_cache_max_bytes,
        dwarf_cache_dir: args.dwarf_cache_dir,
        dwarf_cache_max_bytes: args.dwarf_cache_max_bytes,
    };
    parca_agent_runtime::run(config, shutdown_signal()).await?;
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_max_level(args.log_level)
        .with_writer(std::io::stderr)
        .event_format(tracing_logfmt::EventsFormatter::default())
        .fmt_fields(tracing_logfmt::FieldsFormatter::default())
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(2)
        .thread_name("parca-agent")
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!("cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // `{:#}` prints the chain: what failed, then why.
            tracing::error!("{error:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_addresses() {
        for (flag, seconds) in [("10s", 10.0), ("500ms", 0.5), ("1m30s", 90.0)] {
            let args = Args::try_parse_from(["parca-agent", "--profiling-duration", flag]).unwrap();
            assert_eq!(args.profiling_duration.as_secs_f64(), seconds);
        }
        for bad in ["10", "s", "30s1m"] {
            assert!(Args::try_parse_from(["parca-agent", "--profiling-duration", bad]).is_err());
        }
        assert_eq!(
            listen_address(":7071").unwrap(),
            "0.0.0.0:7071".parse::<SocketAddr>().unwrap()
        );
        assert!(listen_address("nonsense").is_err());
        assert_eq!(
            parse_labels("region=eu-1; cluster=a=b;").unwrap(),
            [
                ("region".to_owned(), "eu-1".to_owned()),
                ("cluster".to_owned(), "a=b".to_owned())
            ]
        );
        assert!(parse_labels("1x=y").is_err());
        assert!(parse_labels("novalue").is_err());
    }
}
