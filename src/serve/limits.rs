//! What `serve` sets on each agent process before it starts (its enclosure's hook).
//!
//! - A parent-death signal: a runner killed outright takes its agents with it instead of
//!   leaving them working on a worktree the next runner is about to remove. The signal is
//!   tied to the thread that spawned the agent; the serve runtime's worker threads live as
//!   long as the runner.
//! - rlimits (process count, address space, CPU time): those asked for by name, and the
//!   fallback of a cgroup limit the host cannot enforce (see [`super::cgroup::plan`]). The
//!   kernel enforces them on the agent and everything it starts. A job the agent of which a
//!   signal killed names the limits in force, and the limit that fired when the signal
//!   tells (SIGXCPU: the CPU-time limit).
//!
//! Per-job cgroups (memory, pids, cpu) are [`super::cgroup`]'s; `cgroup::host_support` says
//! which limits apply on this host and how (`doctor` prints it).

use std::os::unix::process::CommandExt;
use std::sync::Arc;

use rustix::process::{Resource, Signal};

use crate::run::CommandHook;

/// Per-job resource limits; `None` leaves the runner's own limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// memory.max of the job's cgroup, in bytes (with memory.swap.max 0). No rlimit
    /// fallback: RLIMIT_AS is not a memory limit.
    pub memory: Option<u64>,
    /// pids.max of the job's cgroup: processes and threads of this job. Falls back to
    /// RLIMIT_NPROC (per user) where the pids controller is not delegated.
    pub pids: Option<u64>,
    /// cpu.max of the job's cgroup, in thousandths of a CPU (1500: one and a half cores).
    /// It throttles; nothing falls back to it.
    pub cpus_milli: Option<u64>,
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

/// The agent hook: parent-death signal and `limits`.
pub fn agent_hook(limits: Limits) -> CommandHook {
    Arc::new(move |cmd: &mut std::process::Command| {
        // SAFETY: only async-signal-safe calls (prctl, getrlimit, setrlimit) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
                for (resource, value, hard_extra) in [
                    (Resource::Nproc, limits.nproc, 0),
                    (Resource::As, limits.address_space, 0),
                    (Resource::Cpu, limits.cpu_seconds, CPU_KILL_AFTER),
                ] {
                    if let Some(v) = value {
                        crate::util::rlimit::set_capped(resource, v, v.saturating_add(hard_extra))?;
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
            Some(s) if signal == Signal::XCPU.as_raw() => {
                format!("the CPU-time limit fired (RLIMIT_CPU={s}s); limits in force: {all}")
            }
            _ => format!("limits in force: {all}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_killed_agent_names_the_limit_that_fired_or_those_in_force() {
        assert_eq!(Limits::default().explain(Signal::KILL.as_raw()), None);
        let limits = Limits {
            nproc: Some(100),
            address_space: None,
            cpu_seconds: Some(60),
            ..Limits::default()
        };
        assert_eq!(
            limits.explain(Signal::XCPU.as_raw()).unwrap(),
            "the CPU-time limit fired (RLIMIT_CPU=60s); limits in force: RLIMIT_NPROC=100, RLIMIT_CPU=60s"
        );
        assert_eq!(
            limits.explain(Signal::KILL.as_raw()).unwrap(),
            "limits in force: RLIMIT_NPROC=100, RLIMIT_CPU=60s"
        );
        assert_eq!(
            crate::util::units::signal_name(Signal::KILL.as_raw()),
            Some("SIGKILL")
        );
    }
}
