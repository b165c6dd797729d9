//! What `serve` sets on each agent process before it starts (the runner's agent hook).
//!
//! - A parent-death signal: a runner killed outright takes its agents with it instead of
//!   leaving them working on a worktree the next runner is about to remove. The signal is
//!   tied to the thread that spawned the agent; the serve runtime's worker threads live as
//!   long as the runner.
//! - Optional rlimits (process count, address space), the fallback for hosts without a
//!   delegated cgroup: the kernel enforces them on the agent and everything it starts.

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
}

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
                for (resource, value) in [
                    (libc::RLIMIT_NPROC, limits.nproc),
                    (libc::RLIMIT_AS, limits.address_space),
                ] {
                    if let Some(v) = value {
                        let lim = libc::rlimit {
                            rlim_cur: v as libc::rlim_t,
                            rlim_max: v as libc::rlim_t,
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
        (!parts.is_empty()).then(|| parts.join(", "))
    }
}
