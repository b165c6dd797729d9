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

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::source::{Claimed, Interruption, JobSource, Recovered};
use crate::config::Config;
use crate::job::{check_id, Job, JobError, JobSpec};
use crate::lockfile::LockFile;
use crate::state::{StateDir, StateError};

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

/// A job's file in the queue: the job as submitted, its attempts, and (when finished) its
/// result. A file written by another program may also be a bare job file ([`JobSpec`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub job: JobSpec,
    pub submitted_at: String,
    #[serde(default)]
    pub attempts: Vec<Attempt>,
    /// The job's result object (`result.json`), or one the runner made up for a job it
    /// could not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
}

/// One run of a job.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Attempt {
    pub number: u32,
    pub started_at: String,
    /// The serve process that ran it: a crash report names it.
    pub runner_pid: u32,
    /// The host it ran on (the PostgreSQL queue's runners are on many).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// Why the attempt did not finish the job (interrupted, runner died).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
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
    #[error("{path}: {message}")]
    BadEntry { path: PathBuf, message: String },
}

/// How long [`FsQueue`]'s `finish` retries recording a job's end on a full disk.
pub const FULL_DISK_RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(3600);

impl QueueError {
    /// Whether this is the file system running out of space or quota.
    pub fn is_full_disk(&self) -> bool {
        let QueueError::Io { source, .. } = self else {
            return false;
        };
        // tempfile wraps the OS error with the path, keeping only its kind; the kinds are
        // named here, as `ErrorKind::StorageFull` is newer than the MSRV.
        matches!(
            source.raw_os_error(),
            Some(libc::ENOSPC) | Some(libc::EDQUOT)
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

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> QueueError {
    let path = path.to_path_buf();
    move |source| QueueError::Io {
        action,
        path,
        source,
    }
}

/// The job files of a state's directory, as (id, entry): `<id>.json` names only. Names
/// starting with a dot are another program's files still being written (or the queue's own
/// temporary ones), never jobs.
fn job_files(dir: &Path) -> std::io::Result<impl Iterator<Item = (String, std::fs::DirEntry)>> {
    Ok(std::fs::read_dir(dir)?.flatten().filter_map(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            return None;
        }
        let id = name.strip_suffix(".json")?.to_string();
        Some((id, e))
    }))
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
}

/// The claim a serve process holds on a running job.
pub struct Ticket {
    entry: Entry,
    _lock: LockFile,
}

/// The queue of one state directory.
pub struct FsQueue {
    state: StateDir,
    default_timeout: Mutex<Duration>,
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
            default_timeout: Mutex::new(default_timeout),
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

    /// Validates `spec` (a generated id when it has none), checks its account against
    /// `config`, and queues it. Returns the job as it will run.
    pub fn submit(&self, mut spec: JobSpec, config: &Config) -> Result<Job, QueueError> {
        let job = spec.clone().validate(self.default_timeout())?;
        match config.accounts.get(&job.account) {
            None => {
                return Err(QueueError::Account(format!(
                    "{:?} is not an account in the runner's config",
                    job.account
                )))
            }
            Some(a) if a.agent() != job.agent => {
                return Err(QueueError::Account(format!(
                    "{:?} is for {}, but the job asks for {}",
                    job.account,
                    a.agent().name(),
                    job.agent.name()
                )))
            }
            Some(_) => {}
        }
        if let Some(path) = self.existing(&job.id) {
            return Err(QueueError::Duplicate { id: job.id, path });
        }
        spec.id = Some(job.id.clone());
        let entry = Entry {
            job: spec,
            submitted_at: now_rfc3339(),
            attempts: Vec::new(),
            result: None,
        };
        let target = self.path(JobState::Queued, &job.id);
        let dir = self.sub(JobState::Queued.dir());
        let data = to_json(&entry);
        let tmp = tempfile::Builder::new()
            .prefix(".submit-")
            .tempfile_in(&dir)
            .map_err(io("creating a file in", &dir))?;
        std::fs::write(tmp.path(), &data).map_err(io("writing", tmp.path()))?;
        tmp.as_file()
            .sync_all()
            .map_err(io("syncing", tmp.path()))?;
        // No-replace: two submits of one id race to this rename, and only one wins.
        match rustix::fs::renameat_with(
            rustix::fs::CWD,
            tmp.path(),
            rustix::fs::CWD,
            &target,
            rustix::fs::RenameFlags::NOREPLACE,
        ) {
            Ok(()) => Ok(job),
            Err(rustix::io::Errno::EXIST) => Err(QueueError::Duplicate {
                id: job.id,
                path: target,
            }),
            Err(e) => Err(io("queueing", &target)(e.into())),
        }
    }

    /// Queue files, oldest first (by modification time, then name). Names starting with a dot
    /// are another program's files still being written.
    fn queued_names(&self) -> Result<Vec<String>, QueueError> {
        let dir = self.sub(JobState::Queued.dir());
        let mut found = Vec::new();
        for (id, e) in job_files(&dir).map_err(io("reading", &dir))? {
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
            let Some(lock) =
                LockFile::try_acquire(&lock_path).map_err(io("locking", &lock_path))?
            else {
                continue; // another runner is claiming it right now
            };
            let running = self.path(JobState::Running, &stem);
            match std::fs::rename(&queued, &running) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io("claiming", &queued)(e)),
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
    fn reject(&self, path: &Path, name: &str, reason: &str) {
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

    /// Ends a claim with its result: the file moves to `done/`, `failed/` or `cancelled/`.
    pub fn finish_now(
        &self,
        mut claimed: Claimed<Ticket>,
        result: Value,
    ) -> Result<(), QueueError> {
        self.try_finish(&mut claimed, result)
        // The claim lock drops here, after the file has left `running/`.
    }

    /// [`Self::finish_now`] without ending the claim, so that a failure (a full disk) can
    /// be retried.
    fn try_finish(&self, claimed: &mut Claimed<Ticket>, result: Value) -> Result<(), QueueError> {
        let id = claimed.job.id.clone();
        let entry = &mut claimed.ticket.entry;
        let outcome = result
            .get("outcome")
            .and_then(Value::as_str)
            .unwrap_or("error")
            .to_string();
        if let Some(a) = entry.attempts.last_mut() {
            a.ended_at = Some(now_rfc3339());
            a.outcome = Some(outcome.clone());
        }
        entry.result = Some(result);
        let target_state = match outcome.as_str() {
            "succeeded" => JobState::Done,
            "cancelled" => JobState::Cancelled,
            _ => JobState::Failed,
        };
        let running = self.path(JobState::Running, &id);
        write_entry(&running, entry)?;
        let target = self.path(target_state, &id);
        std::fs::rename(&running, &target).map_err(io("finishing", &running))?;
        let _ = std::fs::remove_file(self.cancel_path(&id));
        tracing::info!(job = %id, state = target_state.name(), %outcome, "finished");
        Ok(())
    }

    /// Gives a claimed job back to the queue; its job directory moves to
    /// `serve/attempts/<id>/<n>` so the next attempt starts clean and this one's logs stay.
    pub fn release_now(
        &self,
        claimed: Claimed<Ticket>,
        why: Interruption,
    ) -> Result<(), QueueError> {
        let id = claimed.job.id.clone();
        let mut entry = claimed.ticket.entry;
        if let Some(a) = entry.attempts.last_mut() {
            a.ended_at = Some(now_rfc3339());
            a.outcome = Some("interrupted".into());
            a.reason = Some(why.reason.clone());
        }
        self.set_aside(&id, claimed.attempt)?;
        let running = self.path(JobState::Running, &id);
        write_entry(&running, &entry)?;
        let queued = self.path(JobState::Queued, &id);
        std::fs::rename(&running, &queued).map_err(io("requeueing", &running))?;
        tracing::info!(job = %id, reason = %why.reason, "requeued");
        Ok(())
    }

    /// Moves `jobs/<id>` (if any) to `serve/attempts/<id>/<n>`.
    fn set_aside(&self, id: &str, attempt: u32) -> Result<(), QueueError> {
        let root = crate::workspace::job_root(&self.state, id);
        if !root.exists() {
            return Ok(());
        }
        let parent = self.sub("serve/attempts").join(id);
        std::fs::create_dir_all(&parent).map_err(io("creating", &parent))?;
        let mut n = attempt;
        while parent.join(n.to_string()).exists() {
            n += 1;
        }
        let target = parent.join(n.to_string());
        std::fs::rename(&root, &target).map_err(io("moving aside", &root))
    }

    /// Requeues (or fails, past `max_attempts`) jobs left in `running/` by a runner that
    /// died: their leftover processes are stopped and their workspaces removed first.
    pub fn recover_now(&self, max_attempts: u32) -> Result<Recovered, QueueError> {
        let dir = self.sub(JobState::Running.dir());
        let mut orphans = Vec::new();
        for (id, e) in job_files(&dir).map_err(io("reading", &dir))? {
            let id = id.as_str();
            if check_id(id).is_err() {
                continue;
            }
            let lock_path = self.lock_path(id);
            let Some(lock) =
                LockFile::try_acquire(&lock_path).map_err(io("locking", &lock_path))?
            else {
                continue; // a live runner holds it
            };
            if !e.path().exists() {
                continue; // finished between the listing and the lock
            }
            orphans.push((id.to_string(), e.path(), lock));
        }
        if orphans.is_empty() {
            return Ok(Recovered::default());
        }
        for (id, _, _) in &orphans {
            let killed = super::procs::stop_leftovers(&self.state, id);
            if killed > 0 {
                tracing::info!(job = %id, killed, "stopped processes left by a dead runner");
            }
        }
        crate::workspace::sweep_abandoned(&self.state);
        let mut report = Recovered::default();
        for (id, path, lock) in orphans {
            let entry = match read_entry(&path) {
                Ok(entry) => entry,
                Err(e) => {
                    self.reject(&path, &format!("{id}.json"), &e.to_string());
                    continue;
                }
            };
            let attempt = entry.attempts.len() as u32;
            let pid = entry.attempts.last().map_or(0, |a| a.runner_pid);
            let reason = format!("the runner (pid {pid}) died while the job was running");
            let job = match entry.job.clone().validate(self.default_timeout()) {
                Ok(job) => job,
                Err(e) => {
                    self.reject(&path, &format!("{id}.json"), &e.to_string());
                    continue;
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
                let result = made_up_result(&id, "error", &message);
                self.set_aside(&id, attempt)?;
                self.finish_now(claimed, result)?;
                report.failed.push(id);
            } else {
                self.release_now(claimed, Interruption { reason })?;
                report.requeued.push(id);
            }
        }
        Ok(report)
    }

    /// Cancels a queued job at once, or asks the runner of a running one to stop it.
    pub fn cancel(&self, id: &str) -> Result<CancelOutcome, QueueError> {
        check_id(id)?;
        let lock_path = self.lock_path(id);
        if let Some(lock) = LockFile::try_acquire(&lock_path).map_err(io("locking", &lock_path))? {
            let queued = self.path(JobState::Queued, id);
            let cancelled = self.path(JobState::Cancelled, id);
            if std::fs::rename(&queued, &cancelled).is_ok() {
                let mut entry = read_entry(&cancelled)?;
                entry.result = Some(made_up_result(
                    id,
                    "cancelled",
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
                std::fs::write(&marker, now_rfc3339()).map_err(io("writing", &marker))?;
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
            for (id, e) in entries {
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
                    });
                    continue;
                }
                let entry = read_entry(&e.path()).ok();
                let result = entry.as_ref().and_then(|e| e.result.as_ref());
                let text = |key: &str| {
                    result
                        .and_then(|r| r.get(key))
                        .and_then(Value::as_str)
                        .map(str::to_string)
                };
                out.push(Listed {
                    id,
                    state,
                    submitted_at: entry.as_ref().map(|e| e.submitted_at.clone()),
                    attempts: entry.as_ref().map_or(0, |e| e.attempts.len()),
                    outcome: text("outcome"),
                    message: text("message"),
                    repo: entry.as_ref().map(|e| e.job.repo.clone()),
                    rev: entry.as_ref().map(|e| e.job.rev.clone()),
                    usage: result
                        .and_then(|r| r.get("usage"))
                        .and_then(|u| serde_json::from_value(u.clone()).ok()),
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
            for (id, e) in job_files(&dir).map_err(io("reading", &dir))? {
                let name = format!("{id}.json");
                let old = e
                    .metadata()
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
                        crate::remove::remove_tree(&path).map_err(io("removing", &path))?;
                    }
                    let _ = std::fs::remove_file(self.cancel_path(id));
                }
                std::fs::remove_file(e.path()).map_err(io("removing", &e.path()))?;
                removed.push(id.to_string());
            }
        }
        Ok(removed)
    }

    /// The job directory of `id`'s current or last attempt.
    pub fn job_dir(&self, id: &str) -> PathBuf {
        crate::workspace::job_root(&self.state, id)
    }
}

/// A result object for a job the runner ended without running it to the end.
pub fn made_up_result(id: &str, outcome: &str, message: &str) -> Value {
    serde_json::json!({"job_id": id, "outcome": outcome, "message": message})
}

fn to_json(entry: &Entry) -> Vec<u8> {
    let mut data = serde_json::to_vec_pretty(entry).unwrap_or_default();
    data.push(b'\n');
    data
}

fn read_entry(path: &Path) -> Result<Entry, QueueError> {
    let text = std::fs::read_to_string(path).map_err(io("reading", path))?;
    let value: Value = serde_json::from_str(&text).map_err(|e| QueueError::BadEntry {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    if value.get("job").is_some() {
        serde_json::from_value(value).map_err(|e| QueueError::BadEntry {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
    } else {
        // A bare job file another program queued, not claimed yet.
        Ok(Entry {
            job: JobSpec::from_json(&text)?,
            submitted_at: String::new(),
            attempts: Vec::new(),
            result: None,
        })
    }
}

fn write_entry(path: &Path, entry: &Entry) -> Result<(), QueueError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    crate::devshell::nix_version::write_atomically(dir, path, &to_json(entry))
        .map_err(io("writing", path))
}

impl JobSource for FsQueue {
    type Ticket = Ticket;
    type Error = QueueError;

    async fn claim(&self) -> Result<Option<Claimed<Ticket>>, QueueError> {
        self.claim_now()
    }

    /// A full disk does not lose the result: the job stays claimed (and `running`) and the
    /// write is retried until there is room, for at most [`FULL_DISK_RETRY_FOR`].
    async fn finish(&self, mut claimed: Claimed<Ticket>, result: Value) -> Result<(), QueueError> {
        let deadline = std::time::Instant::now() + FULL_DISK_RETRY_FOR;
        let mut warned = false;
        loop {
            match self.try_finish(&mut claimed, result.clone()) {
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

    /// The job's lock, which its runner holds from claim to finish or release.
    async fn hold_idle(&self, id: &str) -> Option<Box<dyn std::any::Any + Send>> {
        check_id(id).ok()?;
        let lock = LockFile::try_acquire(&self.lock_path(id)).ok()??;
        Some(Box::new(lock))
    }
}

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;
