//! Reading the queue for people (`jobs`, `show`) and removing what is old (`gc`).

use std::time::{Duration, SystemTime};

use super::entry::read_entry;
use super::read::job_files;
use super::{Entry, FsQueue, JobState, Listed, QueueError};
use crate::job::check_id;
use crate::util::io::IoContext;

impl FsQueue {
    /// The queued jobs and the age of the oldest, by its file's time (written at submit):
    /// no job file is read, so this is cheap enough for every scrape.
    pub fn depth(&self) -> std::io::Result<crate::serve::metrics::QueueDepth> {
        let mut depth = crate::serve::metrics::QueueDepth::default();
        let now = SystemTime::now();
        for file in job_files(&self.sub(JobState::Queued.dir()))? {
            depth.queued += 1;
            let modified = std::fs::symlink_metadata(&file.path).and_then(|m| m.modified());
            if let Ok(age) = modified.map(|m| now.duration_since(m).unwrap_or_default()) {
                depth.oldest_age_seconds = depth.oldest_age_seconds.max(age.as_secs_f64());
            }
        }
        Ok(depth)
    }

    /// The state `id` is in.
    pub fn find_state(&self, id: &str) -> Option<JobState> {
        JobState::ALL
            .into_iter()
            .filter(|s| *s != JobState::Rejected)
            .find(|s| self.path(*s, id).exists())
    }

    /// The entry of `id` and its state.
    pub fn show(&self, id: &str) -> Result<(JobState, Entry), QueueError> {
        check_id(id)?;
        let state = self
            .find_state(id)
            .ok_or_else(|| QueueError::NotFound(id.to_string()))?;
        Ok((state, read_entry(&self.path(state, id))?))
    }

    /// Every job, oldest submission first; rejected files last.
    pub fn list(&self) -> Vec<Listed> {
        let mut out = Vec::new();
        for state in JobState::ALL {
            let dir = self.sub(state.dir());
            let Ok(entries) = job_files(&dir) else {
                continue;
            };
            for file in entries {
                // A name that is not UTF-8 names no job: `serve` sets it aside.
                let Some(id) = file.id else {
                    continue;
                };
                let name = format!("{id}.json");
                if state == JobState::Rejected {
                    let reason = std::fs::read_to_string(dir.join(format!("{name}.reason")))
                        .unwrap_or_default();
                    out.push(Listed {
                        id,
                        state,
                        submitted_at: None,
                        attempts: 0,
                        outcome: None,
                        message: Some(reason.trim().to_string()),
                        repo: None,
                        rev: None,
                        usage: None,
                        live: None,
                    });
                    continue;
                }
                let entry = read_entry(&file.path).ok();
                let result = entry.as_ref().and_then(Entry::stored_result);
                let result = result.as_ref();
                out.push(Listed {
                    id,
                    state,
                    submitted_at: entry.as_ref().map(|e| e.submitted_at.clone()),
                    attempts: entry.as_ref().map_or(0, |e| e.attempts.len()),
                    outcome: result.map(|r| r.outcome().as_str().to_string()),
                    message: result.and_then(|r| r.message()).map(str::to_string),
                    repo: entry.as_ref().map(|e| e.job.repo.clone()),
                    rev: entry.as_ref().map(|e| e.job.rev.clone()),
                    usage: result.and_then(|r| r.usage()).cloned(),
                    live: None,
                });
            }
        }
        out.sort_by(|a, b| {
            (a.state == JobState::Rejected, &a.submitted_at, &a.id).cmp(&(
                b.state == JobState::Rejected,
                &b.submitted_at,
                &b.id,
            ))
        });
        out
    }

    /// Removes finished jobs (and rejected files) last changed more than `older_than` ago:
    /// their queue file, job directory, earlier attempts and cancel request. Returns their ids.
    pub fn gc(&self, older_than: Duration) -> Result<Vec<String>, QueueError> {
        let cutoff = SystemTime::now()
            .checked_sub(older_than)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let mut removed = Vec::new();
        for state in JobState::ALL.into_iter().filter(|s| s.is_finished()) {
            let dir = self.sub(state.dir());
            for file in job_files(&dir).at("reading", &dir)? {
                let Some(id) = file.id else {
                    continue;
                };
                let name = format!("{id}.json");
                let old = std::fs::symlink_metadata(&file.path)
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t < cutoff);
                if !old {
                    continue;
                }
                let id = id.as_str();
                if state == JobState::Rejected {
                    let _ = std::fs::remove_file(dir.join(format!("{name}.reason")));
                } else if check_id(id).is_ok() {
                    for path in [
                        crate::workspace::job_root(&self.state, id),
                        self.sub("serve/attempts").join(id),
                    ] {
                        crate::remove::remove_tree(&path).at("removing", &path)?;
                    }
                    let _ = std::fs::remove_file(self.cancel_path(id));
                }
                std::fs::remove_file(&file.path).at("removing", &file.path)?;
                removed.push(id.to_string());
            }
        }
        Ok(removed)
    }
}
