//! A finished job's work leaving the host: pushed to a branch of a remote the operator names
//! (`push.rs`, the remote and its credential in `remote.rs`), or exported as a git bundle or
//! patches (`export.rs`). Everything is read from the shared clone's `refs/quest/jobs/<id>`,
//! whose objects the runner's verifying fetch brought in, never from the job's own git data,
//! and by the hardened host git (`crate::git`): no configuration but the runner's.

pub mod export;
pub mod push;
mod remote;

use std::path::PathBuf;

use crate::git::{Git, GitError};
use crate::job::Trust;
use crate::state::StateDir;
use crate::util::git_names::is_full_rev;
use crate::util::io::IoError;
use crate::workspace::{bare_clone_path, JOB_REFS};

pub use push::{push_job, PushRecord};

/// How long one git of the delivery may take: a remote that accepts the connection and then
/// says nothing must not hold a job's end, or `push`, for ever.
pub const DELIVER_GIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

#[derive(Debug, thiserror::Error)]
pub enum DeliverError {
    #[error("job {0} made no commits: nothing to deliver")]
    NoCommits(String),
    #[error("job {id}'s commits are not in the shared clone ({refname}): {why}")]
    MissingRef {
        id: String,
        refname: String,
        why: String,
    },
    #[error("{0} exists already: not overwritten")]
    Exists(PathBuf),
    #[error("job {id}'s result names no {what}, so its work cannot be found")]
    Incomplete { id: String, what: &'static str },
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Io(#[from] IoError),
}

/// What a job made, as its result records it: where its commits are and on what.
#[derive(Debug, Clone)]
pub struct JobWork {
    pub job_id: String,
    /// The repository as the job named it (the default remote, and the key of `push`).
    pub repo: String,
    /// The job's revision, on which its commits are.
    pub base: String,
    /// The worktree's HEAD when the job ended.
    pub head: String,
    pub trust: Trust,
    /// The repository's shared clone.
    pub bare: PathBuf,
}

impl JobWork {
    pub fn new(
        state: &StateDir,
        job_id: &str,
        repo: &str,
        base: &str,
        head: &str,
        trust: Trust,
    ) -> JobWork {
        JobWork {
            job_id: job_id.to_string(),
            repo: repo.to_string(),
            base: base.to_string(),
            head: head.to_string(),
            trust,
            bare: bare_clone_path(state, repo),
        }
    }

    /// `refs/quest/jobs/<id>`.
    pub fn refname(&self) -> String {
        format!("{JOB_REFS}{}", self.job_id)
    }

    /// The hardened git on the shared clone, once the job's ref is there and is its head
    /// above its base.
    async fn checked_git(&self) -> Result<Git, DeliverError> {
        if self.head == self.base {
            return Err(DeliverError::NoCommits(self.job_id.clone()));
        }
        let missing = |why: String| DeliverError::MissingRef {
            id: self.job_id.clone(),
            refname: self.refname(),
            why,
        };
        if !is_full_rev(&self.head) || !is_full_rev(&self.base) {
            return Err(missing(
                "its result's head or revision is not a commit id".into(),
            ));
        }
        if !self.bare.join("HEAD").is_file() {
            return Err(missing(format!("no clone at {}", self.bare.display())));
        }
        let git = Git::new(&self.bare)?;
        let at = git
            .output_within(
                &[
                    "rev-parse",
                    "--verify",
                    "--quiet",
                    &format!("{}^{{commit}}", self.refname()),
                ],
                DELIVER_GIT_LIMIT,
            )
            .await
            .map_err(|e| missing(e.to_string()))?;
        if at != self.head {
            return Err(missing(format!(
                "it is at {at}, the result's head is {}",
                self.head
            )));
        }
        let on_base = git
            .succeeds(&["merge-base", "--is-ancestor", &self.base, &self.head])
            .await?;
        if !on_base {
            return Err(missing(format!(
                "{} is not on the job's revision",
                self.head
            )));
        }
        Ok(git)
    }
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
