//! The job queue in the state directory: one JSON file per job, in the directory of its state.
//!
//! ```text
//! <state>/queue/<id>.json          queued: `submit` writes here, or any program that writes a
//!                                  job file atomically (a temp name starting with '.', then
//!                                  rename to <id>.json)
//! <state>/running/<id>.json        claimed by a serve process (which holds its claim lock)
//! <state>/done/<id>.json           the agent succeeded
//! <state>/failed/<id>.json         failed, timed out, refused, error, or out of attempts
//! <state>/cancelled/<id>.json      cancelled by `quest-runner cancel`
//! <state>/serve/rejected/          files that were not valid jobs, each with a .reason file
//! <state>/serve/locks/<id>.lock    claim locks (flock; gone when nobody holds them)
//! <state>/serve/cancel/<id>        a cancel request for a running job
//! <state>/serve/attempts/<id>/<n>/ the job directory of an interrupted attempt n
//! <state>/jobs/<id>/               the job directory of the current or last attempt
//! ```
//!
//! A file moves between state directories by `rename`, so a job is always in exactly one
//! state, and a reader never sees half a file. Claiming takes the job's claim lock first, then
//! renames `queue/` → `running/`: of two serve processes only one can do both, and a restarted
//! runner tells a job whose runner died (lock free) from one running elsewhere (lock held).

mod cancel;
mod claim;
mod end;
mod entry;
mod listing;
mod read;
mod recover;
mod runners;
mod source;
mod submit;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::job::JobError;
use crate::lockfile::LockFile;
use crate::serve::not_a_job::NotAJob;
use crate::state::{StateDir, StateError};
use crate::util::io::IoError;

pub use crate::serve::source::made_up_result;
pub use entry::{Attempt, BriefResult, Entry, StoredResult};
pub use read::MAX_ENTRY_BYTES;

#[cfg(test)]
use crate::{config::Config, job::JobSpec, serve::source::Interruption};

/// The state of a job, as the directory its file is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    Queued,
    Running,
    Done,
    Failed,
    Cancelled,
    /// Not a valid job; kept with the reason for whoever wrote it.
    Rejected,
}

impl JobState {
    pub const ALL: [JobState; 6] = [
        JobState::Queued,
        JobState::Running,
        JobState::Done,
        JobState::Failed,
        JobState::Cancelled,
        JobState::Rejected,
    ];

    /// The directory, relative to the state dir, holding the jobs in this state.
    pub fn dir(self) -> &'static str {
        match self {
            JobState::Queued => "queue",
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
            JobState::Rejected => "serve/rejected",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
            JobState::Rejected => "rejected",
        }
    }

    pub fn is_finished(self) -> bool {
        !matches!(self, JobState::Queued | JobState::Running)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Io(#[from] IoError),
    #[error(transparent)]
    Job(#[from] JobError),
    #[error("job id {id:?} is already taken (by {path})")]
    Duplicate { id: String, path: PathBuf },
    #[error("invalid job field \"account\": {0}")]
    Account(String),
    #[error("no job {0:?}: it is not queued, running or finished")]
    NotFound(String),
    #[error("job {id:?} is already {state}")]
    AlreadyFinished { id: String, state: &'static str },
    #[error("{}: {reason}", .path.display())]
    BadEntry { path: PathBuf, reason: NotAJob },
    #[error("claiming a job: {0}")]
    Claim(String),
    #[error("cancelling: {0}")]
    Cancel(String),
    #[error("giving a job back: {0}")]
    Release(String),
}

/// How long [`FsQueue`]'s `finish` retries recording a job's end on a full disk.
pub const FULL_DISK_RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(3600);

impl QueueError {
    /// Whether this is the file system running out of space or quota.
    pub fn is_full_disk(&self) -> bool {
        let QueueError::Io(IoError { source, .. }) = self else {
            return false;
        };
        // tempfile wraps the OS error with the path, keeping only its kind; the kinds are
        // named here, as `ErrorKind::StorageFull` is newer than the MSRV.
        use rustix::io::Errno;
        matches!(
            Errno::from_io_error(source),
            Some(Errno::NOSPC | Errno::DQUOT)
        ) || matches!(
            format!("{:?}", source.kind()).as_str(),
            "StorageFull" | "QuotaExceeded"
        )
    }

    /// Whether the caller's input was at fault (exit code 2) rather than the host.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            QueueError::Job(_)
                | QueueError::Duplicate { .. }
                | QueueError::Account(_)
                | QueueError::NotFound(_)
                | QueueError::AlreadyFinished { .. }
                | QueueError::BadEntry { .. }
        )
    }
}

pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// What `cancel` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The job was queued and is now cancelled.
    Dequeued,
    /// The job is running; its runner will stop it.
    Requested,
}

/// A job as `jobs` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct Listed {
    pub id: String,
    pub state: JobState,
    pub submitted_at: Option<String>,
    pub attempts: usize,
    pub outcome: Option<String>,
    pub message: Option<String>,
    pub repo: Option<String>,
    pub rev: Option<String>,
    /// The finished job's model use (the result's `usage`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::gateway::Usage>,
    /// A running job's use now, when it runs on this host ([`crate::serve::live`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub live: Option<crate::serve::live::Live>,
}

pub use runners::Serving;

/// The claim a serve process holds on a running job.
pub struct Ticket {
    entry: Entry,
    _lock: LockFile,
}

/// The queue of one state directory; its clones share the reloaded timeout, and what
/// could not be set aside.
#[derive(Clone)]
pub struct FsQueue {
    state: StateDir,
    default_timeout: Arc<Mutex<Duration>>,
    /// Queue files that are no jobs and could not be moved out of the queue: said once,
    /// then passed over.
    stuck: Arc<Mutex<HashSet<PathBuf>>>,
}

impl FsQueue {
    /// Opens (creating its directories) the queue of `state`.
    pub fn open(state: &StateDir, default_timeout: Duration) -> Result<FsQueue, QueueError> {
        for s in JobState::ALL {
            state.ensure_dir(Path::new(s.dir()))?;
        }
        for sub in ["serve/locks", "serve/cancel", "serve/attempts"] {
            state.ensure_dir(Path::new(sub))?;
        }
        Ok(FsQueue {
            state: state.clone(),
            default_timeout: Arc::new(Mutex::new(default_timeout)),
            stuck: Arc::default(),
        })
    }

    /// The timeout of jobs that name none, from the (reloaded) config.
    pub fn set_default_timeout(&self, timeout: Duration) {
        *self
            .default_timeout
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = timeout;
    }

    fn default_timeout(&self) -> Duration {
        *self
            .default_timeout
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn path(&self, state: JobState, id: &str) -> PathBuf {
        self.state
            .root()
            .join(state.dir())
            .join(format!("{id}.json"))
    }

    fn sub(&self, sub: &str) -> PathBuf {
        self.state.root().join(sub)
    }

    fn lock_path(&self, id: &str) -> PathBuf {
        self.sub("serve/locks").join(format!("{id}.lock"))
    }

    fn cancel_path(&self, id: &str) -> PathBuf {
        self.sub("serve/cancel").join(id)
    }

    /// Where `id` already is, if anywhere: a queue file or a job directory.
    fn existing(&self, id: &str) -> Option<PathBuf> {
        JobState::ALL
            .iter()
            .filter(|s| **s != JobState::Rejected)
            .map(|s| self.path(*s, id))
            .chain([crate::workspace::job_root(&self.state, id)])
            .find(|p| p.exists())
    }

    /// The job directory of `id`'s current or last attempt.
    pub fn job_dir(&self, id: &str) -> PathBuf {
        crate::workspace::job_root(&self.state, id)
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
