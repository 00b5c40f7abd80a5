//! Checks done before loading anything: capabilities and kernel BTF.

use std::path::Path;

use crate::Error;

/// Capability bits (`linux/capability.h`).
const CAP_SYS_ADMIN: u32 = 21;
const CAP_SYS_PTRACE: u32 = 19;
const CAP_SYSLOG: u32 = 34;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// The effective capability set of this process, from `CapEff:` in `/proc/self/status`.
pub fn effective_capabilities() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| parse_cap_eff(&s))
        .unwrap_or(0)
}

fn parse_cap_eff(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
    u64::from_str_radix(line["CapEff:".len()..].trim(), 16).ok()
}

fn has(caps: u64, cap: u32) -> bool {
    caps & (1 << cap) != 0
}

/// Refuses unless `caps` allow loading BPF and opening perf events on every CPU: CAP_BPF and
/// CAP_PERFMON, or CAP_SYS_ADMIN (which covers both, as on kernels before 5.8).
pub fn check_capabilities(caps: u64) -> Result<(), Error> {
    if has(caps, CAP_SYS_ADMIN) || (has(caps, CAP_BPF) && has(caps, CAP_PERFMON)) {
        return Ok(());
    }
    let missing: Vec<&str> = [(CAP_BPF, "CAP_BPF"), (CAP_PERFMON, "CAP_PERFMON")]
        .into_iter()
        .filter(|&(cap, _)| !has(caps, cap))
        .map(|(_, name)| name)
        .collect();
    Err(Error::NotPrivileged {
        missing: missing.join(", "),
    })
}

/// What the agent can do but less well with `caps`, in words (for a warning at start).
pub fn limitations(caps: u64) -> Vec<&'static str> {
    let mut out = Vec::new();
    if !has(caps, CAP_SYS_ADMIN) && !has(caps, CAP_SYSLOG) {
        out.push("without CAP_SYSLOG kernel addresses are hidden: kernel frames stay unsymbolized");
    }
    if !has(caps, CAP_SYS_ADMIN) && !has(caps, CAP_SYS_PTRACE) {
        out.push(
            "without CAP_SYS_PTRACE other users' processes cannot be read: their frames stay \
             unsymbolized and their labels unknown",
        );
    }
    out
}

/// Refuses when the kernel exposes no BTF at `path` (normally `/sys/kernel/btf/vmlinux`).
pub fn check_btf(path: &Path) -> Result<(), Error> {
    if path.exists() {
        Ok(())
    } else {
        Err(Error::NoBtf {
            path: path.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_bpf_perfmon_pass_others_are_told_what_is_missing() {
        assert!(check_capabilities(u64::MAX).is_ok());
        assert!(check_capabilities(1 << CAP_SYS_ADMIN).is_ok());
        assert!(check_capabilities((1 << CAP_BPF) | (1 << CAP_PERFMON)).is_ok());
        let err = check_capabilities(1 << CAP_BPF).unwrap_err().to_string();
        assert!(
            err.contains("missing: CAP_PERFMON") && err.contains("root"),
            "{err}"
        );
        let err = check_capabilities(0).unwrap_err().to_string();
        assert!(err.contains("missing: CAP_BPF, CAP_PERFMON"), "{err}");
    }

    #[test]
    fn limitations_name_syslog_and_ptrace() {
        assert!(limitations(u64::MAX).is_empty());
        let l = limitations((1 << CAP_BPF) | (1 << CAP_PERFMON));
        assert_eq!(l.len(), 2);
        assert!(l[0].contains("CAP_SYSLOG") && l[1].contains("CAP_SYS_PTRACE"));
    }

    #[test]
    fn cap_eff_is_parsed() {
        let status = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        assert_eq!(parse_cap_eff(status), Some(0x1ffffffffff));
        assert_eq!(parse_cap_eff("nothing"), None);
    }

    #[test]
    fn missing_btf_is_refused_with_the_path() {
        let err = check_btf(Path::new("/nonexistent/btf/vmlinux"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("/nonexistent/btf/vmlinux") && err.contains("BTF"),
            "{err}"
        );
    }
}
