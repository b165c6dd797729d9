//! The file queue as the [`JobSource`] `serve` runs jobs from.

use super::{FsQueue, QueueError, Ticket, FULL_DISK_RETRY_FOR};
use crate::job::check_id;
use crate::lockfile::LockFile;
use crate::run::JobResult;
use crate::serve::source::{result_json, Claimed, Interruption, JobSource, Recovered};

impl JobSource for FsQueue {
    type Ticket = Ticket;
    type Error = QueueError;

    /// On a blocking thread: the runtime's own threads, which answer signals and drive the
    /// running jobs, never read a queue file.
    async fn claim(&self) -> Result<Option<Claimed<Ticket>>, QueueError> {
        let queue = self.clone();
        match tokio::task::spawn_blocking(move || queue.claim_now()).await {
            Ok(claimed) => claimed,
            Err(e) => Err(QueueError::Claim(e.to_string())),
        }
    }

    /// A full disk does not lose the result: the job stays claimed (and `running`) and the
    /// write is retried until there is room, for at most [`FULL_DISK_RETRY_FOR`].
    async fn finish(
        &self,
        mut claimed: Claimed<Ticket>,
        result: JobResult,
    ) -> Result<(), QueueError> {
        let (outcome, result) = result_json(&result);
        let deadline = std::time::Instant::now() + FULL_DISK_RETRY_FOR;
        let mut warned = false;
        loop {
            match self.try_finish(&mut claimed, outcome, result.clone()) {
                Err(e) if e.is_full_disk() && std::time::Instant::now() < deadline => {
                    if !warned {
                        tracing::error!(job = %claimed.job.id,
                            "recording the job's end: {e}; retrying until there is room");
                        warned = true;
                    }
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
                other => return other,
            }
        }
    }

    async fn release(&self, claimed: Claimed<Ticket>, why: Interruption) -> Result<(), QueueError> {
        self.release_now(claimed, why)
    }

    async fn cancel_requested(&self, id: &str) -> bool {
        self.cancel_pending(id)
    }

    async fn recover(&self, max_attempts: u32) -> Result<Recovered, QueueError> {
        self.recover_now(max_attempts)
    }

    /// Read on a blocking thread, as a claim is: a directory listing and one stat per job.
    async fn queue_depth(&self) -> Result<Option<crate::serve::metrics::QueueDepth>, String> {
        let queue = self.clone();
        match tokio::task::spawn_blocking(move || queue.depth()).await {
            Ok(Ok(depth)) => Ok(Some(depth)),
            Ok(Err(e)) => Err(format!("reading the queue: {e}")),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The job's lock, which its runner holds from claim to finish or release.
    async fn hold_idle(&self, id: &str) -> Option<Box<dyn std::any::Any + Send>> {
        check_id(id).ok()?;
        let lock = LockFile::try_acquire(&self.lock_path(id)).ok()??;
        Some(Box::new(lock))
    }
}
