//! Per-job cgroups (cgroup v2): every process of a job in one group the runner owns, with
//! the memory, process-count and CPU limits the host's delegated controllers allow.
//!
//! First a pure [`plan()`] from what the kernel shows (`/proc/self/cgroup`,
//! `/proc/self/mountinfo`, the runner's own group's `cgroup.controllers` and
//! `cgroup.subtree_control`, and whether that group is writable): which group the jobs live
//! under, which controllers are enabled there, and for each limit whether a cgroup file or
//! an rlimit enforces it, or why nothing does. Then [`setup()`] carries it out once per
//! `serve`, and [`JobCgroup`] does each job's part.
//!
//! Layout, with `<own>` the runner's group when it starts (under systemd with `Delegate=`,
//! the unit's group, which the runner then owns):
//!
//! ```text
//! <own>/runner/                     the runner itself, moved out of <own> only when it must
//!                                   enable controllers in <own> (no internal processes)
//! <own>/quest-runner.<key>/         one per state dir (<key> hashes its path), so runners
//!                                   of other state dirs in the same group never meet
//! <own>/quest-runner.<key>/job-<id> one job's agent and everything it starts
//! ```
//!
//! Placement happens in the agent's child between fork and exec: it writes `0` (itself)
//! into its job's `cgroup.procs` with plain `open`/`write`/`close`, the async-signal-safe
//! calls allowed there. The agent therefore starts inside the group, and so does everything
//! it ever forks: no process of the job can be outside it, however it detaches (setsid,
//! double fork, a cleared environment). `clone3(CLONE_INTO_CGROUP)` would do the same
//! without the write, but the standard library's `Command` cannot issue it, and the write
//! costs one syscall in a process that is about to exec anyway.
//!
//! At the job's end the group is the process-tree kill that cannot miss: `cgroup.kill`
//! SIGKILLs every member atomically (after the runner's marker-based stop, which lets srt
//! clean up on SIGTERM first). Its event counters then say which limit fired
//! (`memory.events` `oom_kill`, `pids.events` `max`, `cpu.stat` `nr_throttled`), and it is
//! removed. A runner that died leaves groups behind; the next `serve` kills and removes those
//! of [`job_groups`] whose job no live runner holds, and removes the empty state-dir groups
//! ([`remove_empty_bases`]) that runners of other state dirs left — a runner killed outright
//! and never started again would otherwise leave its `quest-runner.<key>` for good. That
//! includes an idle live runner's empty group: [`JobCgroup::create`] makes it again.

mod job;
mod locate;
mod plan;
mod setup;
mod sweep;

use std::path::PathBuf;
use std::time::Duration;

pub use job::{JobCgroup, Report};
pub use locate::{locate, Located, OwnState};
pub use plan::{base_name, host_support, plan, probe, probe_named, Applied, CgroupPlan, How, Plan};
pub use setup::setup;
pub use sweep::{
    job_groups, kill, kill_and_remove, members, remove, remove_empty_bases, stray_groups, Swept,
};

#[cfg(test)]
use super::limits::Limits;
use crate::util::io::IoError;
#[cfg(test)]
use plan::{cpu_max, pids_max, PIDS_MAX};
#[cfg(test)]
use setup::ensure_base;

/// The standard place of the unified hierarchy; `plan` finds the real one in mountinfo.
pub const DEFAULT_MOUNT: &str = "/sys/fs/cgroup";
/// The name of each job's group under the state dir's group.
pub const JOB_PREFIX: &str = "job-";
/// The name of each state dir's group in the runner's group, before the key ([`base_name`]).
pub const BASE_PREFIX: &str = "quest-runner.";
/// Files of [`CgroupPlan::job_files`] an older kernel or its configuration may lack
/// (`memory.swap.max` without swap accounting, `memory.oom.group` before Linux 4.19): a job
/// runs without them rather than not at all.
const OPTIONAL_FILES: &[&str] = &["memory.swap.max", "memory.oom.group"];
/// How long a killed group may take to empty before the runner gives up on removing it.
const EMPTY_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("cgroup: {0}")]
    Io(#[from] IoError),
    #[error("cgroup: writing {value:?} to {path}: {source}")]
    Write {
        path: PathBuf,
        value: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cgroup: {0} is not a usable path (it holds a NUL byte)")]
    BadPath(PathBuf),
    #[error("cgroup: no group for job {0:?}: {1}")]
    BadId(String, String),
    #[error("cgroup: {path} still has processes {waited:?} after cgroup.kill")]
    NotEmptied { path: PathBuf, waited: Duration },
}

/// A cgroup v2 controller the runner uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Controller {
    Memory,
    Pids,
    Cpu,
}

impl Controller {
    pub fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Pids => "pids",
            Controller::Cpu => "cpu",
        }
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
