//! Claiming: the oldest queued file that is a valid job, under its claim lock, moved to
//! `running/`; files that are not jobs are set aside in `serve/rejected/` with the reason.

use std::path::Path;
use std::time::SystemTime;

use serde_json::Value;

use super::entry::write_entry;
use super::{job_files, now_rfc3339, Attempt, Entry, FsQueue, JobState, QueueError, Ticket};
use crate::job::{check_id, Job, JobSpec};
use crate::lockfile::LockFile;
use crate::serve::source::Claimed;
use crate::util::io::{IoContext, IoError};

impl FsQueue {
    /// Queue files, oldest first (by modification time, then name). Names starting with a dot
    /// are another program's files still being written.
    fn queued_names(&self) -> Result<Vec<String>, QueueError> {
        let dir = self.sub(JobState::Queued.dir());
        let mut found = Vec::new();
        for (id, e) in job_files(&dir).at("reading", &dir)? {
            let mtime = e
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            found.push((mtime, format!("{id}.json")));
        }
        found.sort();
        Ok(found.into_iter().map(|(_, n)| n).collect())
    }

    /// Claims the oldest queued job. Files that are not valid jobs are moved to
    /// `serve/rejected/` with the reason, and the next file is tried.
    pub fn claim_now(&self) -> Result<Option<Claimed<Ticket>>, QueueError> {
        for name in self.queued_names()? {
            let stem = name.trim_end_matches(".json").to_string();
            let queued = self.sub(JobState::Queued.dir()).join(&name);
            if let Err(e) = check_id(&stem) {
                self.reject(&queued, &name, &e.to_string());
                continue;
            }
            let lock_path = self.lock_path(&stem);
            let Some(lock) = LockFile::try_acquire(&lock_path).at("locking", &lock_path)? else {
                continue; // another runner is claiming it right now
            };
            let running = self.path(JobState::Running, &stem);
            match std::fs::rename(&queued, &running) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(IoError::at("claiming", &queued, e).into()),
            }
            match self.admit(&stem, &running) {
                Ok((job, mut entry)) => {
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
                        // A full disk, say: the job goes back to the queue, not astray in
                        // `running/`.
                        if let Err(back) = std::fs::rename(&running, &queued) {
                            tracing::error!(job = %job.id, "putting the job back in the queue: {back}");
                        }
                        return Err(e);
                    }
                    tracing::info!(job = %job.id, attempt, "claimed");
                    return Ok(Some(Claimed {
                        job,
                        attempt,
                        ticket: Ticket { entry, _lock: lock },
                    }));
                }
                Err(message) => self.reject(&running, &name, &message),
            }
        }
        Ok(None)
    }

    /// Reads and validates a claimed file; the message says why it is not a job.
    fn admit(&self, id: &str, path: &Path) -> Result<(Job, Entry), String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("unreadable: {e}"))?;
        let value: Value = serde_json::from_str(&text).map_err(|e| format!("invalid job: {e}"))?;
        let mut entry = if value.get("job").is_some() {
            serde_json::from_value::<Entry>(value)
                .map_err(|e| format!("invalid queue entry: {e}"))?
        } else {
            let spec = JobSpec::from_json(&text).map_err(|e| e.to_string())?;
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
                return Err(format!(
                    "invalid job field \"id\": {inner:?} differs from the file name {id}.json"
                ))
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
            if let Some(p) = taken {
                return Err(format!(
                    "job id {id:?} is already taken (by {})",
                    p.display()
                ));
            }
        }
        let job = entry
            .job
            .clone()
            .validate(self.default_timeout())
            .map_err(|e| e.to_string())?;
        Ok((job, entry))
    }

    /// Moves a file that is not a job out of the queue, with a `.reason` file beside it.
    pub(super) fn reject(&self, path: &Path, name: &str, reason: &str) {
        tracing::warn!(file = %name, "rejected: {reason}");
        let dir = self.sub(JobState::Rejected.dir());
        let stamp = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        let target = dir.join(format!("{stamp}-{name}"));
        if let Err(e) = std::fs::rename(path, &target) {
            tracing::warn!(file = %path.display(), "could not move a rejected file: {e}");
            return;
        }
        let reason_path = dir.join(format!("{stamp}-{name}.reason"));
        if let Err(e) = std::fs::write(&reason_path, format!("{reason}\n")) {
            tracing::warn!(file = %reason_path.display(), "{e}");
        }
    }
}
