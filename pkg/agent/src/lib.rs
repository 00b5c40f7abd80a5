//! The eBPF agent's runtime (work in progress).
