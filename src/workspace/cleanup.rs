//! Cleaning up after a job: `workspace.json` names every directory the job's workspace made
//! outside its job directory, so the workspace's drop, or a later runner's
//! [`sweep_abandoned`] when the runner died, removes them all.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::clone::{lock_bare_blocking, CLEANUP_LOCK_WAIT};
use super::overlay::{self, Layer};
use super::paths::RECORD_FILE;
use super::WorkspaceError;
use crate::lockfile::LockFile;
use crate::remove::remove_tree;
use crate::state::StateDir;
use crate::util::io::IoContext;

/// What `workspace.json` records, so a later runner can clean up after a dead one, and
/// `serve` can recognise the job's processes by its temp dir.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkspaceRecord {
    pub checkout: PathBuf,
    /// The job's git store. Absent in records of runners that registered the checkout in the
    /// shared clone (`worktree_admin` then lies in `<bare>/worktrees/`).
    #[serde(default)]
    pub git_store: Option<PathBuf>,
    pub worktree_admin: Option<PathBuf>,
    pub temp_dir: PathBuf,
    pub helper_tmp: PathBuf,
    /// Absent in records written before it existed.
    #[serde(default)]
    pub proxy_tmp: Option<PathBuf>,
    /// The checkout is an overlay with this job's layer on top (see `overlay`): unmounted
    /// before anything is removed. Absent for a full checkout, and in older records.
    #[serde(default)]
    pub layer: Option<Layer>,
}

impl WorkspaceRecord {
    /// The record of the job at `job_root`: `None` when there is none to read, an error when
    /// it cannot be parsed.
    pub fn read(job_root: &Path) -> Result<Option<WorkspaceRecord>, serde_json::Error> {
        let Ok(bytes) = std::fs::read(job_root.join(RECORD_FILE)) else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes).map(Some)
    }

    /// Writes the record into `job_root`, whole or not at all.
    pub(super) fn write(&self, job_root: &Path) -> Result<(), WorkspaceError> {
        let path = job_root.join(RECORD_FILE);
        let data = serde_json::to_vec_pretty(self).unwrap_or_default();
        Ok(crate::util::fs::write_atomically(job_root, &path, &data).at("writing", &path)?)
    }
}

/// Whether the job at `job_root` has a workspace record: its workspace exists, or was left
/// behind by a runner that died.
pub fn has_record(job_root: &Path) -> bool {
    job_root.join(RECORD_FILE).exists()
}

/// Removes what `workspace.json` names, unless disarmed.
pub(super) struct Cleanup {
    pub(super) job_root: PathBuf,
    pub(super) armed: bool,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if self.armed {
            clean(&self.job_root, CLEANUP_LOCK_WAIT);
        }
    }
}

/// Removes the worktree, its administrative directory and the temp dir of the job at
/// `job_root`, then the record itself. Errors are logged: cleanup must not mask the job's
/// own outcome, and a leftover is retried by the next sweep.
pub(super) fn clean(job_root: &Path, lock_wait: std::time::Duration) {
    let record_path = job_root.join(RECORD_FILE);
    let record = match WorkspaceRecord::read(job_root) {
        Ok(Some(record)) => record,
        Ok(None) => return,
        Err(_) => {
            tracing::warn!(path = %record_path.display(), "unreadable workspace record");
            return;
        }
    };
    // Removing through a mount would only cover the job's layer in whiteouts: unmounted
    // first, and left for the next sweep when that fails.
    // A runner that is not root mounted it in the job's own namespace alone, gone with its
    // descriptors (`owned_mount`): nothing is mounted in this one.
    let root = rustix::process::geteuid().is_root();
    let unmounted = match &record.layer {
        Some(_) if root => overlay::unmount(&record.checkout)
            .inspect_err(|e| {
                tracing::warn!("could not unmount the job's checkout: {e}; the next sweep retries")
            })
            .is_ok(),
        _ => true,
    };
    let mut ok = unmounted;
    let mut remove = |dir: &Path| {
        if let Err(e) = remove_tree(dir) {
            tracing::warn!(path = %dir.display(), "could not remove: {e}");
            ok = false;
        }
    };
    if unmounted {
        remove(&record.checkout);
        if let Some(dir) = record.layer.as_ref().and_then(Layer::dir) {
            remove(dir);
        }
    }
    remove(&record.temp_dir);
    remove(&record.helper_tmp);
    if let Some(dir) = &record.proxy_tmp {
        remove(dir);
    }
    if let Some(store) = &record.git_store {
        remove(store);
    }
    if let Some(admin) = &record.worktree_admin {
        // A record of an older runner, whose checkouts were worktrees of the shared clone:
        // `<bare>/worktrees/<name>`, which other git on the clone reads while it exists.
        match admin.parent().and_then(Path::parent) {
            Some(bare) => match lock_bare_blocking(bare, lock_wait) {
                Ok(Some(_bare)) => remove(admin),
                Ok(None) => {
                    tracing::warn!(path = %admin.display(), "the bare clone stayed locked; the next sweep removes this worktree entry");
                    ok = false;
                }
                Err(e) => {
                    tracing::warn!(path = %admin.display(), "could not lock the bare clone: {e}");
                    ok = false;
                }
            },
            None => remove(admin),
        }
    }
    if ok {
        let _ = std::fs::remove_file(&record_path);
    }
}

/// Cleans the workspaces of jobs whose runner died: a `workspace.json` whose job lock nobody
/// holds. Returns how many were cleaned.
pub fn sweep_abandoned(state: &StateDir) -> usize {
    let Ok(jobs) = std::fs::read_dir(state.root().join("jobs")) else {
        return 0;
    };
    let mut cleaned = 0;
    for job in jobs.flatten() {
        let root = job.path();
        if !has_record(&root) {
            continue;
        }
        if let Ok(Some(_lock)) = LockFile::try_acquire(&root.join("lock")) {
            tracing::info!(job = %root.display(), "cleaning the workspace of a job whose runner died");
            // No wait: a clone locked now is retried by the next sweep, and a runner
            // sweeping many leftovers must not wait for each in turn.
            clean(&root, std::time::Duration::ZERO);
            cleaned += 1;
        }
    }
    cleaned
}
