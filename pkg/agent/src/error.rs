//! The agent's one error type.

use std::net::SocketAddr;
use std::path::PathBuf;

/// What stops the agent. Messages say what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The process lacks the capabilities to load BPF and open perf events.
    #[error(
        "parca-agent needs root, or the capabilities CAP_BPF and CAP_PERFMON (missing: {missing}); \
         run it as root, or grant them with `setcap cap_bpf,cap_perfmon,cap_syslog,cap_sys_ptrace+ep`"
    )]
    NotPrivileged {
        /// The capabilities it lacks, by name.
        missing: String,
    },
    /// The kernel exposes no BTF.
    #[error(
        "the kernel has no BTF (`{path}` is missing): parca-agent needs a kernel built with \
         CONFIG_DEBUG_INFO_BTF=y (5.x and later distribution kernels have it)"
    )]
    NoBtf {
        /// Where BTF was looked for.
        path: PathBuf,
    },
    /// The kernel refused the BPF object.
    #[error("cannot load the BPF object `ebpf/profiler.bpf.o`")]
    Load {
        /// aya's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A program or map the agent expects is not in the BPF object.
    #[error(
        "the BPF object has no `{name}`: it does not match this agent (rebuild with ebpf/build.sh)"
    )]
    MissingInObject {
        /// The program or map.
        name: &'static str,
    },
    /// A program could not be loaded or attached.
    #[error("cannot attach the BPF program `{program}`")]
    Attach {
        /// The program.
        program: &'static str,
        /// aya's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A map operation failed.
    #[error("BPF map `{name}` failed")]
    Map {
        /// The map.
        name: &'static str,
        /// aya's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The online CPUs could not be listed.
    #[error("cannot read the online CPUs from `{path}`")]
    OnlineCpus {
        /// The file read.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP address is taken or not ours.
    #[error("cannot listen on `{address}`")]
    Listen {
        /// The address.
        address: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A flag value is out of range.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The sampling thread stopped.
    #[error("the sampling thread stopped: {0}")]
    Stopped(String),
}
