//! What `serve` sets on each agent process before it starts (the runner's agent hook).
//!
//! - A parent-death signal: a runner killed outright takes its agents with it instead of
//!   leaving them working on a worktree the next runner is about to remove. The signal is
//!   tied to the thread that spawned the agent; the serve runtime's worker threads live as
//!   long as the runner.
//! - Optional rlimits (process count, address space, CPU time), the fallback for hosts
//!   without a delegated cgroup: the kernel enforces them on the agent and everything it
//!   starts. A job the agent of which a signal killed names the limits in force, and the
//!   limit that fired when the signal tells (SIGXCPU: the CPU-time limit).
//!
//! [`host_support`] says which kinds of limit this host offers (`doctor` prints it); the
//! runner does not place jobs in cgroups yet.

use std::os::unix::process::CommandExt;
use std::sync::Arc;

use crate::run::CommandHook;

/// Per-job resource limits; `None` leaves the runner's own limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// RLIMIT_NPROC: processes of the runner's user, counted by the kernel across all jobs
    /// of that user, so it bounds a fork bomb rather than sizing one job.
    pub nproc: Option<u64>,
    /// RLIMIT_AS in bytes, per process.
    pub address_space: Option<u64>,
    /// RLIMIT_CPU in seconds, per process: SIGXCPU at the limit, SIGKILL
    /// [`CPU_KILL_AFTER`] seconds later.
    pub cpu_seconds: Option<u64>,
}

/// Seconds of CPU time between RLIMIT_CPU's soft limit (SIGXCPU) and its hard one (SIGKILL).
pub const CPU_KILL_AFTER: u64 = 5;

/// The agent hook: parent-death signal and `limits`, chained after `inner` (a test's hook).
pub fn agent_hook(limits: Limits, inner: Option<CommandHook>) -> CommandHook {
    Arc::new(move |cmd: &mut std::process::Command| {
        if let Some(inner) = &inner {
            inner(cmd);
        }
        // SAFETY: only async-signal-safe calls (prctl, setrlimit) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                for (resource, value, hard_extra) in [
                    (libc::RLIMIT_NPROC, limits.nproc, 0),
                    (libc::RLIMIT_AS, limits.address_space, 0),
                    (libc::RLIMIT_CPU, limits.cpu_seconds, CPU_KILL_AFTER),
                ] {
                    if let Some(v) = value {
                        // Never above the runner's own hard limit: raising it needs
                        // CAP_SYS_RESOURCE, and the agent would not start.
                        let mut own = libc::rlimit {
                            rlim_cur: 0,
                            rlim_max: 0,
                        };
                        if libc::getrlimit(resource, &mut own) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        let hard = (v.saturating_add(hard_extra) as libc::rlim_t).min(own.rlim_max);
                        let lim = libc::rlimit {
                            rlim_cur: (v as libc::rlim_t).min(hard),
                            rlim_max: hard,
                        };
                        if libc::setrlimit(resource, &lim) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                }
                Ok(())
            });
        }
    })
}

impl Limits {
    /// One line naming the limits in force, for the log and a job's failure message: the
    /// runner cannot see which limit made an agent fail, only which ones could have.
    pub fn describe(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(n) = self.nproc {
            parts.push(format!("RLIMIT_NPROC={n}"));
        }
        if let Some(b) = self.address_space {
            parts.push(format!("RLIMIT_AS={b}"));
        }
        if let Some(s) = self.cpu_seconds {
            parts.push(format!("RLIMIT_CPU={s}s"));
        }
        (!parts.is_empty()).then(|| parts.join(", "))
    }

    /// What to add to the message of a job whose agent `signal` killed: the limit that
    /// fired when the signal names one, else the limits that could have. `None` without
    /// limits.
    pub fn explain(&self, signal: i32) -> Option<String> {
        let all = self.describe()?;
        Some(match self.cpu_seconds {
            Some(s) if signal == libc::SIGXCPU => {
                format!("the CPU-time limit fired (RLIMIT_CPU={s}s); limits in force: {all}")
            }
            _ => format!("limits in force: {all}"),
        })
    }
}

/// The name of a signal that commonly ends an agent.
pub fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        _ => return None,
    })
}

/// Which per-job limits this host can enforce: cgroup v2 with the runner's own cgroup
/// delegated (writable, with the memory, cpu and pids controllers), or rlimits only.
/// The first field says whether cgroup limits are possible; the second is one line.
pub fn host_support() -> (bool, String) {
    let root = std::path::Path::new("/sys/fs/cgroup");
    let Ok(controllers) = std::fs::read_to_string(root.join("cgroup.controllers")) else {
        let why = if root.join("unified").is_dir() {
            "a hybrid cgroup v1/v2 host: the controllers are on cgroup v1"
        } else {
            "no cgroup v2 unified hierarchy at /sys/fs/cgroup"
        };
        return (false, format!("rlimits only: {why}"));
    };
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("0::").map(|p| p.trim().to_string()))
        });
    let Some(own) = own else {
        return (
            false,
            "rlimits only: this process is not in a cgroup v2 group".into(),
        );
    };
    let dir = root.join(own.trim_start_matches('/'));
    let available = std::fs::read_to_string(dir.join("cgroup.controllers"))
        .unwrap_or_else(|_| controllers.clone());
    let missing: Vec<&str> = ["memory", "cpu", "pids"]
        .into_iter()
        .filter(|c| !available.split_whitespace().any(|a| a == *c))
        .collect();
    let writable = rustix::fs::access(&dir, rustix::fs::Access::WRITE_OK).is_ok()
        && rustix::fs::access(
            dir.join("cgroup.subtree_control"),
            rustix::fs::Access::WRITE_OK,
        )
        .is_ok();
    let shown = dir.display();
    match (writable, missing.is_empty()) {
        (true, true) => (
            true,
            format!(
                "cgroup v2 delegated: {shown} is writable with memory, cpu and pids \
                 (the runner does not place jobs in cgroups yet: rlimits apply)"
            ),
        ),
        (true, false) => (
            false,
            format!(
                "rlimits only: {shown} is writable but lacks the {} controller(s)",
                missing.join(", ")
            ),
        ),
        (false, _) => (
            false,
            format!(
                "rlimits only: cgroup v2 is mounted, but the runner's cgroup {shown} is not \
                 writable (not delegated; the systemd unit's Delegate= does that)"
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_killed_agent_names_the_limit_that_fired_or_those_in_force() {
        assert_eq!(Limits::default().explain(libc::SIGKILL), None);
        let limits = Limits {
            nproc: Some(100),
            address_space: None,
            cpu_seconds: Some(60),
        };
        assert_eq!(
            limits.explain(libc::SIGXCPU).unwrap(),
            "the CPU-time limit fired (RLIMIT_CPU=60s); limits in force: RLIMIT_NPROC=100, RLIMIT_CPU=60s"
        );
        assert_eq!(
            limits.explain(libc::SIGKILL).unwrap(),
            "limits in force: RLIMIT_NPROC=100, RLIMIT_CPU=60s"
        );
        assert_eq!(signal_name(libc::SIGKILL), Some("SIGKILL"));
    }

    #[test]
    fn the_host_support_line_names_cgroups_or_rlimits() {
        let (cgroups, line) = host_support();
        assert!(
            line.starts_with(if cgroups { "cgroup v2" } else { "rlimits only" }),
            "{line}"
        );
    }
}
