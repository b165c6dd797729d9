//! Recovery at start: jobs left in `running/` by a runner that died (their claim lock is
//! free) are requeued, or failed once they have used up their attempts.

use std::path::PathBuf;

use super::entry::read_entry;
use super::read::job_files;
use super::{made_up_result, FsQueue, JobState, QueueError, Ticket};
use crate::job::check_id;
use crate::lockfile::LockFile;
use crate::run::Outcome;
use crate::serve::source::{Claimed, Interruption, Recovered};
use crate::util::io::IoContext;

/// A job in `running/` whose runner is gone: its id, its file, and its claim lock, now
/// held by this process.
struct Orphan {
    id: String,
    path: PathBuf,
    lock: LockFile,
}

impl FsQueue {
    /// Requeues (or fails, past `max_attempts`) jobs left in `running/` by a runner that
    /// died: their leftover processes are stopped and their workspaces removed first.
    pub fn recover_now(&self, max_attempts: u32) -> Result<Recovered, QueueError> {
        let orphans = self.orphans()?;
        if orphans.is_empty() {
            return Ok(Recovered::default());
        }
        for Orphan { id, .. } in &orphans {
            let killed = crate::serve::procs::stop_leftovers(&self.state, id);
            if killed > 0 {
                tracing::info!(job = %id, killed, "stopped processes left by a dead runner");
            }
        }
        crate::workspace::sweep_abandoned(&self.state);
        let mut report = Recovered::default();
        for orphan in orphans {
            self.recover_one(orphan, max_attempts, &mut report)?;
        }
        Ok(report)
    }

    /// The jobs in `running/` whose claim lock is free: no live runner holds them.
    fn orphans(&self) -> Result<Vec<Orphan>, QueueError> {
        let dir = self.sub(JobState::Running.dir());
        let mut orphans = Vec::new();
        for file in job_files(&dir).at("reading", &dir)? {
            let Some(id) = file.id.filter(|id| check_id(id).is_ok()) else {
                continue;
            };
            let lock_path = self.lock_path(&id);
            let Some(lock) = LockFile::try_acquire(&lock_path).at("locking", &lock_path)? else {
                continue; // a live runner holds it
            };
            if std::fs::symlink_metadata(&file.path).is_err() {
                continue; // finished between the listing and the lock
            }
            orphans.push(Orphan {
                id,
                path: file.path,
                lock,
            });
        }
        Ok(orphans)
    }

    /// Requeues one orphan, or fails it once it has had `max_attempts`; a file that is no
    /// longer a valid job is rejected.
    fn recover_one(
        &self,
        Orphan { id, path, lock }: Orphan,
        max_attempts: u32,
        report: &mut Recovered,
    ) -> Result<(), QueueError> {
        let name = format!("{id}.json");
        let entry = match read_entry(&path) {
            Ok(entry) => entry,
            Err(QueueError::BadEntry { reason, .. }) => {
                self.reject(&path, name.as_ref(), &reason);
                return Ok(());
            }
            Err(QueueError::Job(e)) => {
                self.reject(&path, name.as_ref(), &e.into());
                return Ok(());
            }
            // The host failing to read it (not the file) is retried at the next recovery.
            Err(e) => return Err(e),
        };
        let attempt = entry.attempts.len() as u32;
        let pid = entry.attempts.last().map_or(0, |a| a.runner_pid);
        let reason = format!("the runner (pid {pid}) died while the job was running");
        let job = match entry.job.clone().validate(self.default_timeout()) {
            Ok(job) => job,
            Err(e) => {
                self.reject(&path, name.as_ref(), &e.into());
                return Ok(());
            }
        };
        let claimed = Claimed {
            job,
            attempt,
            ticket: Ticket { entry, _lock: lock },
        };
        tracing::warn!(job = %id, attempt, "{reason}");
        if attempt >= max_attempts {
            let message = format!("{reason}; gave up after {attempt} attempt(s)");
            let result = made_up_result(&id, Outcome::Error, &message);
            self.set_aside(&id, attempt)?;
            self.finish_now(claimed, Outcome::Error, result)?;
            report.failed.push(id);
        } else {
            self.release_now(claimed, Interruption { reason })?;
            report.requeued.push(id);
        }
        Ok(())
    }
}
