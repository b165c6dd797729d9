//! Where a job's files are, computed before any of them exists: the layout under the state
//! directory ([`JobLayout`]) and the paths the sandbox policy is planned from
//! ([`WorkspacePaths`]). Pure: nothing here touches the disk, so `quest-runner policy` shows
//! the very paths a run would use, and `serve` finds a job's files without rebuilding them.

use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::job_git::JobGit;
use super::temp::TEMP_PREFIX;
use crate::state::StateDir;

/// Where a job's files are. All paths absolute and canonical once the workspace is prepared
/// (see [`JobLayout::planned`] for the paths shown before).
#[derive(Debug, Clone, Serialize)]
pub struct WorkspacePaths {
    /// The worktree the agent edits.
    pub checkout: PathBuf,
    /// The repository's shared clone: the job reads its objects, and writes none of it.
    pub bare_clone: PathBuf,
    /// The job's own git store (`<job>/git`, see `job_git`), the checkout's common dir: its
    /// objects (the shared clone's through alternates), refs and reflogs.
    pub git_store: PathBuf,
    /// The worktree's administrative directory in the store (`<store>/worktrees/checkout`):
    /// HEAD, index, logs of this checkout.
    pub worktree_admin: PathBuf,
    /// The private `/tmp/quest-job-*` directory: HOME and TMPDIR of every command.
    pub temp_dir: PathBuf,
    /// The runner's own files for this job (agent config, devShell script); only the
    /// devShell script in it is readable by commands.
    pub job_dir: PathBuf,
    /// The devShell script commands source, if the revision has one.
    pub devshell_script: Option<PathBuf>,
    /// A short private directory for the runner's own helpers (srt's sockets must have short
    /// paths); commands cannot read it.
    pub helper_tmp: PathBuf,
}

/// The prefix of the runner's helpers' private temp dir (`helper_tmp`).
pub const HELPER_TMP_PREFIX: &str = "quest-srt-";
/// The prefix of the network proxy's temp dir.
pub const PROXY_TMP_PREFIX: &str = "quest-proxy-";
/// The name of the record a later runner cleans up by (see `cleanup`).
pub const RECORD_FILE: &str = "workspace.json";

/// The directories of one job under the state directory, and its repository's shared clone.
/// The temp dirs are not part of it: their names are random, chosen when they are made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobLayout {
    /// `<state>/jobs/<id>`: everything of the job's that the runner keeps.
    pub root: PathBuf,
    /// `<state>/repos/<hash of repo>.git`, see [`bare_clone_path`].
    pub bare_clone: PathBuf,
    /// The worktree, `<root>/checkout`.
    pub checkout: PathBuf,
    /// The job's own git store, `<root>/git`.
    pub git_store: PathBuf,
    /// The worktree's administrative directory in the store.
    pub worktree_admin: PathBuf,
    /// The runner's own files for the job (agent config, devShell script), `<root>/runner`.
    pub runner_dir: PathBuf,
}

impl JobLayout {
    /// The layout of job `id`, which runs on `repo`.
    pub fn of(state: &StateDir, id: &str, repo: &str) -> JobLayout {
        let root = job_root(state, id);
        let git = JobGit::at(&root);
        JobLayout {
            bare_clone: bare_clone_path(state, repo),
            checkout: git.checkout,
            git_store: git.store,
            worktree_admin: git.admin,
            runner_dir: root.join("runner"),
            root,
        }
    }

    /// The job's `workspace.json`.
    pub fn record(&self) -> PathBuf {
        self.root.join(RECORD_FILE)
    }

    /// The workspace's paths with the temp dirs made for it (the devShell script is set once
    /// the devShell is known).
    pub fn paths(&self, temp_dir: PathBuf, helper_tmp: PathBuf) -> WorkspacePaths {
        WorkspacePaths {
            checkout: self.checkout.clone(),
            bare_clone: self.bare_clone.clone(),
            git_store: self.git_store.clone(),
            worktree_admin: self.worktree_admin.clone(),
            temp_dir,
            job_dir: self.runner_dir.clone(),
            devshell_script: None,
            helper_tmp,
        }
    }

    /// The paths a run would use with its temp dirs in `temp_parent`, their random suffix
    /// shown as `XXXXXX`: what `quest-runner policy` plans the policy from. A trusted job
    /// gets its devShell script at `<runner>/devshell.sh`.
    pub fn planned(&self, temp_parent: &Path, trusted: bool) -> WorkspacePaths {
        let placeholder = |prefix: &str| temp_parent.join(format!("{prefix}XXXXXX"));
        WorkspacePaths {
            devshell_script: trusted.then(|| self.runner_dir.join("devshell.sh")),
            ..self.paths(placeholder(TEMP_PREFIX), placeholder(HELPER_TMP_PREFIX))
        }
    }
}

/// The bare clone's directory for `repo`: named by a hash, so no URL can name a path.
pub fn bare_clone_path(state: &StateDir, repo: &str) -> PathBuf {
    let digest = Sha256::digest(repo.as_bytes());
    state
        .root()
        .join("repos")
        .join(format!("{}.git", crate::util::hex::encode(&digest[..10])))
}

/// The directory of job `id`: `<state>/jobs/<id>`.
pub fn job_root(state: &StateDir, id: &str) -> PathBuf {
    state.root().join("jobs").join(id)
}

#[cfg(test)]
#[path = "paths_tests.rs"]
mod tests;
