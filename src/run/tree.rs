//! The agent's process tree: its process group, and the orphans that left it (opencode runs
//! its tools detached and does not stop them when it exits). The runner makes itself their
//! subreaper, so they stay its descendants, and stops all of them when the job ends.

use std::time::Duration;

use rustix::process::{kill_process_group, Pid, Signal};

use crate::procfs::Stopping;
use crate::workspace::WorkspacePaths;

/// The agent's process group and every descendant that left it; all are stopped when this
/// is dropped.
pub(super) struct ProcessTree {
    leader: Option<Pid>,
    /// What marks this job's processes apart from other jobs' (see [`job_markers`]).
    markers: Vec<String>,
}

impl ProcessTree {
    pub(super) fn new(pid: Option<u32>, markers: Vec<String>) -> ProcessTree {
        ProcessTree {
            leader: pid.and_then(|p| Pid::from_raw(p as i32)),
            markers,
        }
    }

    /// SIGKILLs the whole tree at once, without the SIGTERM and grace the drop gives it.
    pub(super) fn kill_now(&self) {
        if let Some(pid) = self.leader {
            let _ = kill_process_group(pid, Signal::KILL);
        }
        kill_descendants(&self.markers, None);
    }
}

impl Drop for ProcessTree {
    fn drop(&mut self) {
        if let Some(pid) = self.leader {
            crate::process::terminate_group(pid, crate::process::TERMINATE_GRACE);
        }
        kill_descendants(&self.markers, Some(ORPHANS_TERM_GRACE));
    }
}

/// How long the agent's orphans get between SIGTERM and SIGKILL: srt removes the mount
/// points it made in the checkout on SIGTERM.
const ORPHANS_TERM_GRACE: Duration = Duration::from_secs(2);

/// The job's private directories: its commands' HOME and TMPDIR, srt's scratch dir, and the
/// runner's job dir (opencode's own HOME and XDG dirs live there). Every process of the job
/// has one of them in its environment, the agent's and the sandboxed commands' alike.
/// `serve` runs several jobs in one process, so orphans re-parented to the runner are told
/// apart by these; another job's agent or a devShell build must survive this job's end.
pub(super) fn job_markers(paths: &WorkspacePaths) -> Vec<String> {
    [&paths.temp_dir, &paths.helper_tmp, &paths.job_dir]
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .filter(|v| v.len() > 1)
        .collect()
}

/// Stops every process of this job whose parent chain leads to the runner: SIGTERM first
/// when there is a `term_grace`, then SIGKILL to what is left. The runner's own threads are
/// tasks, not processes; nothing else of its is a child apart from the agent's tree (git and
/// nix have finished by now).
fn kill_descendants(markers: &[String], term_grace: Option<Duration>) {
    let me = std::process::id();
    let ours = || crate::procfs::marked(crate::procfs::descendants(me), markers);
    let how = Stopping {
        term_grace,
        kill_rounds: 5,
        kill_for: None,
        pause: Duration::from_millis(20),
    };
    crate::procfs::stop(ours, &how);
}
