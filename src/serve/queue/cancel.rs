//! Cancelling: a queued job is moved to `cancelled/` at once (under its claim lock, so no
//! runner claims it meanwhile); a running one gets a request its runner acts on.

use super::entry::{read_entry, write_entry};
use super::{made_up_result, now_rfc3339, CancelOutcome, FsQueue, JobState, QueueError};
use crate::job::check_id;
use crate::lockfile::LockFile;
use crate::run::Outcome;
use crate::util::io::IoContext;

impl FsQueue {
    /// Cancels a queued job at once, or asks the runner of a running one to stop it.
    pub fn cancel(&self, id: &str) -> Result<CancelOutcome, QueueError> {
        check_id(id)?;
        let lock_path = self.lock_path(id);
        if let Some(lock) = LockFile::try_acquire(&lock_path).at("locking", &lock_path)? {
            let queued = self.path(JobState::Queued, id);
            let cancelled = self.path(JobState::Cancelled, id);
            if std::fs::rename(&queued, &cancelled).is_ok() {
                let mut entry = read_entry(&cancelled)?;
                entry.result = Some(made_up_result(
                    id,
                    Outcome::CANCELLED_ON_REQUEST,
                    "cancelled by `quest-runner cancel` before it started",
                ));
                write_entry(&cancelled, &entry)?;
                drop(lock);
                return Ok(CancelOutcome::Dequeued);
            }
            drop(lock);
        }
        match self.find_state(id) {
            Some(JobState::Running) | Some(JobState::Queued) => {
                let marker = self.cancel_path(id);
                std::fs::write(&marker, now_rfc3339()).at("writing", &marker)?;
                Ok(CancelOutcome::Requested)
            }
            Some(state) => Err(QueueError::AlreadyFinished {
                id: id.to_string(),
                state: state.name(),
            }),
            None => Err(QueueError::NotFound(id.to_string())),
        }
    }

    /// Whether `cancel` asked for the running job `id` to stop.
    pub fn cancel_pending(&self, id: &str) -> bool {
        self.cancel_path(id).exists()
    }
}
