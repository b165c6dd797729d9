//! Finding and stopping the processes a dead runner's job left behind.
//!
//! A runner killed outright cannot stop its agent; the agent gets SIGKILL from the kernel
//! through its parent-death signal (see [`super::limits`]), but what the agent started may
//! outlive it. Those processes are recognised by their environment: every process of a job
//! inherits HOME or TMPDIR pointing into the job's private temp dir or its job directory,
//! paths no other job shares.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::procfs::Stopping;
use crate::state::StateDir;

/// The paths whose mention in a process's environment marks it as one of job `id`'s.
pub fn markers(state: &StateDir, id: &str) -> Vec<String> {
    let root = crate::workspace::job_root(state, id);
    let mut found = vec![format!("{}/", root.display())];
    if let Some(temp) = recorded_temp_dir(&root) {
        found.push(temp.display().to_string());
    }
    found
}

/// The temp dir named by the job's `workspace.json`, if it is still there.
fn recorded_temp_dir(job_root: &Path) -> Option<PathBuf> {
    let record = crate::workspace::WorkspaceRecord::read(job_root).ok()??;
    Some(record.temp_dir)
        // Only what the runner makes: an absolute `…/quest-job-*` (a damaged record must not
        // make a marker such as `/` that every process matches).
        .filter(|p| {
            p.is_absolute()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(crate::workspace::TEMP_PREFIX))
        })
}

/// SIGKILLs every process of job `id` (by [`markers`]), again until none is left or two
/// seconds have passed. Returns how many signals were sent.
pub fn stop_leftovers(state: &StateDir, id: &str) -> usize {
    let markers = markers(state, id);
    let me = std::process::id();
    crate::procfs::stop(|| matching(&markers, me), &LEFTOVERS)
}

/// A dead runner's job's processes get SIGKILL at once: nothing of theirs is worth a grace.
const LEFTOVERS: Stopping = Stopping {
    term_grace: None,
    kill_rounds: usize::MAX,
    kill_for: Some(Duration::from_secs(2)),
    pause: Duration::from_millis(50),
};

/// Pids (other than `me`) whose environment has a value starting with one of `markers`.
pub fn matching(markers: &[String], me: u32) -> Vec<u32> {
    crate::procfs::pids()
        .into_iter()
        .filter(|&pid| pid != me && crate::procfs::environ_mentions(pid, markers))
        .collect()
}
