//! A job's file: what it holds, and how it is read and written (atomically, so that a reader
//! never sees half a file). A bare job file another program queued is read as an entry too.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::read::{read_bounded, ReadError};
use super::QueueError;
use crate::job::JobSpec;
use crate::run::{JobResult, Outcome};
use crate::serve::not_a_job::NotAJob;
use crate::util::io::{IoContext, IoError};

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
    /// Kept as stored, so that `show` prints it as it was saved; [`Entry::stored_result`]
    /// reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
}

impl Entry {
    /// The entry's result, read as what it is; `None` when there is none (or it is no
    /// result at all).
    pub fn stored_result(&self) -> Option<StoredResult> {
        self.result
            .as_ref()
            .and_then(|r| StoredResult::deserialize(r).ok())
    }
}

/// A stored result read back: the job's own [`JobResult`], or the fields every stored result
/// has — all that one the runner made up ([`made_up_result`]) holds, and what is still read
/// of one whose other fields this version cannot read.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum StoredResult {
    Ran(Box<JobResult>),
    Brief(BriefResult),
}

/// What every stored result says: how the job ended, and why.
#[derive(Debug, Clone, Deserialize)]
pub struct BriefResult {
    pub outcome: Outcome,
    #[serde(default)]
    pub message: Option<String>,
}

impl StoredResult {
    pub fn outcome(&self) -> Outcome {
        match self {
            StoredResult::Ran(r) => r.outcome,
            StoredResult::Brief(r) => r.outcome,
        }
    }

    pub fn message(&self) -> Option<&str> {
        match self {
            StoredResult::Ran(r) => r.message.as_deref(),
            StoredResult::Brief(r) => r.message.as_deref(),
        }
    }

    /// The job's model use, as the gateway metered it.
    pub fn usage(&self) -> Option<&crate::gateway::Usage> {
        match self {
            StoredResult::Ran(r) => r.usage.as_ref(),
            StoredResult::Brief(_) => None,
        }
    }
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

pub(super) fn to_json(entry: &Entry) -> Vec<u8> {
    let mut data = serde_json::to_vec_pretty(entry).unwrap_or_default();
    data.push(b'\n');
    data
}

/// The entry at `path`, read as [`super::read::read_bounded`] reads a job file: a file that
/// is no job file is a [`QueueError::BadEntry`], never waited for.
pub(super) fn read_entry(path: &Path) -> Result<Entry, QueueError> {
    Ok(read_entry_text(path)?.1)
}

/// [`read_entry`], with the file's text as it was read.
pub(super) fn read_entry_text(path: &Path) -> Result<(String, Entry), QueueError> {
    let text = match read_bounded(path) {
        Ok(text) => text,
        Err(ReadError::Io(e)) => return Err(IoError::at("reading", path, e).into()),
        Err(ReadError::Refused(reason)) => {
            return Err(QueueError::BadEntry {
                path: path.to_path_buf(),
                reason,
            })
        }
    };
    let entry = parse_entry(path, &text)?;
    Ok((text, entry))
}

/// An entry from its file's `text`.
pub(super) fn parse_entry(path: &Path, text: &str) -> Result<Entry, QueueError> {
    let bad = |reason| QueueError::BadEntry {
        path: path.to_path_buf(),
        reason,
    };
    let value: Value = serde_json::from_str(text).map_err(|e| bad(NotAJob::NotJson(e)))?;
    if value.get("job").is_some() {
        serde_json::from_value(value).map_err(|e| bad(NotAJob::NotAnEntry(e)))
    } else {
        // A bare job file another program queued, not claimed yet.
        Ok(Entry {
            job: JobSpec::from_json(text)?,
            submitted_at: String::new(),
            attempts: Vec::new(),
            result: None,
        })
    }
}

pub(super) fn write_entry(path: &Path, entry: &Entry) -> Result<(), QueueError> {
    write_entry_bytes(path, &to_json(entry))
}

/// Writes an entry's JSON whole (the temporary file starts with a dot: never a job).
pub(super) fn write_entry_bytes(path: &Path, data: &[u8]) -> Result<(), QueueError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    Ok(crate::util::fs::write_atomically(dir, path, data).at("writing", path)?)
}
