//! Claiming: the oldest queued file that is a valid job, under its claim lock, moved to
//! `running/`; files that are not jobs are set aside in `serve/rejected/` with the reason.

use std::ffi::OsStr;
use std::path::Path;
use std::time::SystemTime;

use serde_json::Value;

use super::entry::write_entry;
use super::read::{job_files, read_bounded, shown, JobFile, ReadError};
use super::{now_rfc3339, Attempt, Entry, FsQueue, JobState, QueueError, Ticket};
use crate::job::{check_id, Job, JobSpec};
use crate::lockfile::LockFile;
use crate::run::Outcome;
use crate::serve::not_a_job::NotAJob;
use crate::serve::source::Claimed;
use crate::util::io::{IoContext, IoError};

impl FsQueue {
    /// Queue files, oldest first (by modification time, then name), but for those found
    /// to be no jobs that could not be moved out of the queue.
    fn queued_files(&self) -> Result<Vec<JobFile>, QueueError> {
        let dir = self.sub(JobState::Queued.dir());
        let stuck = self.stuck.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut found = Vec::new();
        for file in job_files(&dir).at("reading", &dir)? {
            if stuck.contains(&file.path) {
                continue;
            }
            // lstat: a link's own time, and no FIFO is opened.
            let mtime = std::fs::symlink_metadata(&file.path)
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            found.push((mtime, file));
        }
        found.sort_by(|(ta, a), (tb, b)| (ta, &a.name).cmp(&(tb, &b.name)));
        Ok(found.into_iter().map(|(_, f)| f).collect())
    }

    /// Claims the oldest queued job. Files that are not valid jobs are moved to
    /// `serve/rejected/` with the reason, and the next file is tried.
    pub fn claim_now(&self) -> Result<Option<Claimed<Ticket>>, QueueError> {
        for file in self.queued_files()? {
            let Some(id) = file.id.as_deref() else {
                let why = NotAJob::NameNotUtf8(file.shown_name());
                self.reject(&file.path, &file.name, &why);
                continue;
            };
            if let Err(e) = check_id(id) {
                self.reject(&file.path, &file.name, &e.into());
                continue;
            }
            if let Some(claimed) = self.try_claim(&file, id)? {
                return Ok(Some(claimed));
            }
        }
        Ok(None)
    }

    /// Claims the queue file `file` of job `id`, unless another runner is claiming it, or
    /// it is no job (then it is rejected).
    fn try_claim(&self, file: &JobFile, id: &str) -> Result<Option<Claimed<Ticket>>, QueueError> {
        let lock_path = self.lock_path(id);
        let Some(lock) = LockFile::try_acquire(&lock_path).at("locking", &lock_path)? else {
            return Ok(None); // another runner is claiming it right now
        };
        let queued = &file.path;
        let running = self.path(JobState::Running, id);
        match std::fs::rename(queued, &running) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(IoError::at("claiming", queued, e).into()),
        }
        let (job, mut entry) = match self.admit(id, &running) {
            Ok(admitted) => admitted,
            Err(ReadError::Refused(reason)) => {
                self.reject(&running, &file.name, &reason);
                return Ok(None);
            }
            Err(ReadError::Io(e)) => {
                // The host failed to read it (too many open files, say): it may well be a
                // job, so it goes back to the queue rather than being rejected.
                self.put_back(&running, queued, id);
                return Err(IoError::at("reading", &running, e).into());
            }
        };
        if entry
            .stored_result()
            .is_some_and(|r| matches!(r.outcome(), Outcome::Cancelled(_)))
        {
            // A cancel that wrote its result into the file but was cut short before moving
            // it (it crashed): the move is all it had left.
            let cancelled = self.path(JobState::Cancelled, id);
            std::fs::rename(&running, &cancelled).at("cancelling", &running)?;
            tracing::info!(job = %id, "cancelled: its cancel had been cut short");
            return Ok(None);
        }
        let attempt = entry.attempts.len() as u32 + 1;
        entry.attempts.push(Attempt {
            number: attempt,
            started_at: now_rfc3339(),
            runner_pid: std::process::id(),
            host: None,
            ended_at: None,
            outcome: None,
            reason: None,
        });
        if let Err(e) = write_entry(&running, &entry) {
            // A full disk, say: the job goes back to the queue, not astray in `running/`.
            self.put_back(&running, queued, id);
            return Err(e);
        }
        tracing::info!(job = %job.id, attempt, "claimed");
        Ok(Some(Claimed {
            job,
            attempt,
            ticket: Ticket { entry, _lock: lock },
        }))
    }

    fn put_back(&self, running: &Path, queued: &Path, id: &str) {
        if let Err(back) = std::fs::rename(running, queued) {
            tracing::error!(job = %id, "putting the job back in the queue: {back}");
        }
    }

    /// Reads and validates a claimed file; the message says why it is not a job.
    fn admit(&self, id: &str, path: &Path) -> Result<(Job, Entry), ReadError> {
        let text = read_bounded(path)?;
        Ok(self.admit_text(id, &text)?)
    }

    /// Validates a claimed file's `text`; the error says why it is not a job.
    fn admit_text(&self, id: &str, text: &str) -> Result<(Job, Entry), NotAJob> {
        let value: Value = serde_json::from_str(text).map_err(NotAJob::NotJson)?;
        let mut entry = if value.get("job").is_some() {
            serde_json::from_value::<Entry>(value).map_err(NotAJob::NotAnEntry)?
        } else {
            let spec = JobSpec::from_json(text)?;
            Entry {
                job: spec,
                submitted_at: now_rfc3339(),
                attempts: Vec::new(),
                result: None,
            }
        };
        match &entry.job.id {
            None => entry.job.id = Some(id.to_string()),
            Some(inner) if inner != id => {
                return Err(NotAJob::IdDiffers {
                    inner: inner.clone(),
                    named: format!("the file name {id}.json"),
                })
            }
            Some(_) => {}
        }
        if entry.attempts.is_empty() {
            // A retry's directory was moved aside when it was requeued; a first attempt's
            // must not exist yet.
            let taken = JobState::ALL
                .iter()
                .filter(|s| s.is_finished() && **s != JobState::Rejected)
                .map(|s| self.path(*s, id))
                .chain([crate::workspace::job_root(&self.state, id)])
                .find(|p| p.exists());
            if let Some(by) = taken {
                return Err(NotAJob::Taken {
                    id: id.to_string(),
                    by,
                });
            }
        }
        let job = entry.job.clone().validate(self.default_timeout())?;
        Ok((job, entry))
    }

    /// Moves a file that is not a job out of the queue, with a `.reason` file beside it,
    /// and says so once. One that cannot be moved is said once, and passed over from then on.
    pub(super) fn reject(&self, path: &Path, name: &OsStr, reason: &NotAJob) {
        let dir = self.sub(JobState::Rejected.dir());
        let stamp = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        let shown = shown(name);
        let target = dir.join(format!("{stamp}-{shown}"));
        let reason_path = dir.join(format!("{stamp}-{shown}.reason"));
        // The reason first: whoever lists the file sees why at once.
        let noted = std::fs::write(&reason_path, format!("{reason}\n"));
        if let Err(e) = std::fs::rename(path, &target) {
            let _ = std::fs::remove_file(&reason_path);
            if e.kind() == std::io::ErrorKind::NotFound {
                return; // another runner set it aside first
            }
            let new = (self.stuck.lock().unwrap_or_else(|e| e.into_inner())).insert(path.into());
            if new {
                tracing::warn!(file = %shown,
                    "not a job ({reason}), and it cannot be moved out of the queue: {e}; passed over");
            }
            return;
        }
        match noted {
            Ok(()) => tracing::warn!(file = %shown, "rejected: {reason}"),
            Err(e) => tracing::warn!(file = %shown,
                "rejected: {reason} (writing {}: {e})", reason_path.display()),
        }
    }
}
