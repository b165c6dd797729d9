//! Cancelling: a queued job is moved to `cancelled/` at once (under its claim lock, so no
//! runner claims it meanwhile); a running one gets a request its runner acts on.

use super::entry::{read_entry_text, write_entry, write_entry_bytes};
use super::{made_up_result, now_rfc3339, CancelOutcome, FsQueue, JobState, QueueError};
use crate::job::check_id;
use crate::lockfile::LockFile;
use crate::run::Outcome;
use crate::util::io::{IoContext, IoError};

impl FsQueue {
    /// Cancels a queued job at once, or asks the runner of a running one to stop it. All or
    /// nothing: a cancel that fails (a full disk) leaves the job as it was.
    pub fn cancel(&self, id: &str) -> Result<CancelOutcome, QueueError> {
        check_id(id)?;
        let lock_path = self.lock_path(id);
        if let Some(lock) = LockFile::try_acquire(&lock_path).at("locking", &lock_path)? {
            let dequeued = self.dequeue_cancelled(id);
            drop(lock);
            if dequeued? {
                return Ok(CancelOutcome::Dequeued);
            }
        }
        match self.find_state(id) {
            Some(JobState::Running) | Some(JobState::Queued) => {
                // Written whole or not at all: a marker left empty by a failed write would
                // still cancel the job.
                let marker = self.cancel_path(id);
                let dir = self.sub("serve/cancel");
                crate::util::fs::write_atomically(&dir, &marker, now_rfc3339().as_bytes())
                    .at("writing", &marker)?;
                Ok(CancelOutcome::Requested)
            }
            Some(state) => Err(QueueError::AlreadyFinished {
                id: id.to_string(),
                state: state.name(),
            }),
            None => Err(QueueError::NotFound(id.to_string())),
        }
    }

    /// Under the job's claim lock: moves the queued job `id` (if it is queued) to
    /// `cancelled/`, its result written into its file first, so that a failure leaves it
    /// queued as it was. Whether it was queued.
    fn dequeue_cancelled(&self, id: &str) -> Result<bool, QueueError> {
        let queued = self.path(JobState::Queued, id);
        if std::fs::symlink_metadata(&queued).is_err() {
            return Ok(false);
        }
        let (before, mut entry) = read_entry_text(&queued)?;
        entry.result = Some(made_up_result(
            id,
            Outcome::CANCELLED_ON_REQUEST,
            "cancelled by `quest-runner cancel` before it started",
        ));
        write_entry(&queued, &entry)?;
        let cancelled = self.path(JobState::Cancelled, id);
        if let Err(e) = std::fs::rename(&queued, &cancelled) {
            // Still queued: its file put back as it was.
            let restored = write_entry_bytes(&queued, before.as_bytes());
            let e = IoError::at("cancelling", &queued, e);
            return Err(match restored {
                Ok(()) => e.into(),
                Err(r) => QueueError::Cancel(format!(
                    "{e}; the job is still queued, but its file says it was cancelled ({r})"
                )),
            });
        }
        Ok(true)
    }
    /// Whether `cancel` asked for the running job `id` to stop.
    pub fn cancel_pending(&self, id: &str) -> bool {
        self.cancel_path(id).exists()
    }
}
