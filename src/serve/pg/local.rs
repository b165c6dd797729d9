//! What this host keeps of jobs: their directories, earlier attempts' directories, and the
//! processes an earlier process of this state directory left running.

use std::time::{Duration, Instant};

use super::Shared;
use crate::job::check_id;
use crate::state::StateDir;

impl Shared {
    /// Removes the job directories (and earlier attempts' directories) of jobs the database
    /// no longer has (`gc` removed them), and then their refs in the shared clones: at most
    /// every ten minutes.
    pub(super) async fn prune_local(&self) {
        {
            let mut last = self.last_prune.lock().unwrap_or_else(|e| e.into_inner());
            if last.is_some_and(|t| t.elapsed() < Duration::from_secs(600)) {
                return;
            }
            *last = Some(Instant::now());
        }
        let held: Vec<String> = self.signals.held().keys().cloned().collect();
        let mut local: Vec<String> = ["jobs", "serve/attempts"]
            .iter()
            .flat_map(|sub| {
                std::fs::read_dir(self.state.root().join(sub))
                    .map(|d| {
                        d.flatten()
                            .filter_map(|e| e.file_name().into_string().ok())
                            .collect::<Vec<_>>()
                    })
                    .unwrap_or_default()
            })
            .filter(|id| check_id(id).is_ok() && !held.contains(id))
            .collect();
        local.sort();
        local.dedup();
        if local.is_empty() {
            return;
        }
        let gone = self
            .session
            .run("looking for removed jobs", |c| async move {
                c.query(
                    "SELECT x FROM unnest($1::text[]) x
                     WHERE NOT EXISTS (SELECT 1 FROM quest_runner.jobs WHERE id = x)",
                    &[&local],
                )
                .await
            })
            .await;
        let Ok(gone) = gone else {
            return;
        };
        let mut removed = false;
        for row in gone {
            let id: String = row.get(0);
            remove_local(&self.state, &id);
            removed = true;
        }
        // With them, the refs that kept their commits in this host's shared clones.
        if removed {
            if let Err(e) = crate::workspace::forget_removed_jobs(&self.state).await {
                tracing::warn!("deleting removed jobs' refs: {e}");
            }
        }
    }
}

/// Removes what this host keeps of job `id`: its job directory and earlier attempts'.
pub fn remove_local(state: &StateDir, id: &str) {
    if check_id(id).is_err() {
        return;
    }
    for path in [
        crate::workspace::job_root(state, id),
        state.root().join("serve/attempts").join(id),
    ] {
        if let Err(e) = crate::remove::remove_tree(&path) {
            tracing::warn!("removing {}: {e}", path.display());
        }
    }
}

/// Stops the processes of jobs an earlier process of this state directory was running
/// (their directories still have a workspace record) and removes their workspaces. Only
/// called with the state directory's lock held, so no live runner's job is touched.
pub(super) fn stop_local_leftovers(state: &StateDir) {
    let jobs = state.root().join("jobs");
    let Ok(entries) = std::fs::read_dir(&jobs) else {
        return;
    };
    let mut any = false;
    for entry in entries.flatten() {
        let Some(id) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if check_id(&id).is_err() || !crate::workspace::has_record(&entry.path()) {
            continue;
        }
        any = true;
        let killed = crate::serve::procs::stop_leftovers(state, &id);
        if killed > 0 {
            tracing::info!(job = %id, killed, "stopped processes left by this runner's earlier process");
        }
    }
    if any {
        crate::workspace::sweep_abandoned(state);
    }
}

/// Moves the job directory an earlier attempt of `id` left on this host to
/// `serve/attempts/<id>/<n>` (`n` from `attempt` up), so the next attempt starts clean and
/// that one's files stay.
pub(super) fn set_aside(state: &StateDir, id: &str, attempt: i32) {
    let root = crate::workspace::job_root(state, id);
    if !root.exists() {
        return;
    }
    let parent = state.root().join("serve/attempts").join(id);
    if let Err(e) = std::fs::create_dir_all(&parent) {
        tracing::warn!("creating {}: {e}", parent.display());
        return;
    }
    let mut n = attempt.max(1);
    while parent.join(n.to_string()).exists() {
        n += 1;
    }
    let target = parent.join(n.to_string());
    if let Err(e) = std::fs::rename(&root, &target) {
        tracing::warn!("moving {} aside: {e}", root.display());
    }
}
