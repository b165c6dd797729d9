//! Ends of claims the database could not be told of yet, kept on disk until it can.
//!
//! While the database is unreachable a finished job's end is retried in memory; it is also
//! written to `<state>/serve/pg-pending/<id>.json`, so that a runner stopped meanwhile (or
//! killed) records it at its next start rather than losing it — the job would otherwise run
//! again once its lease expired. The end is fenced by the claim's token like any other: if
//! another runner took the job over in the meantime, the stale end is dropped.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::run::Outcome;
use crate::state::StateDir;

/// How a claim ended.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum End {
    /// The job ended: its result is final.
    Finish {
        /// done, failed or cancelled.
        state: String,
        /// The result's outcome, for the attempt.
        outcome: Outcome,
        result: serde_json::Value,
    },
    /// The job was interrupted and goes back to the queue (or is cancelled, if that was
    /// asked for meanwhile, with `cancelled`).
    Release {
        reason: String,
        cancelled: serde_json::Value,
    },
}

/// An end waiting for the database.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pending {
    pub id: String,
    pub claim: String,
    pub attempt: i32,
    pub end: End,
    /// When the job ended (RFC 3339, this host's clock): the end is stored with this time,
    /// however much later the database takes it. Absent in files of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
}

impl Pending {
    /// How long ago the job ended, by this host's clock (0 when unknown): the database
    /// subtracts it from its own `now()`, so a clock skew between the two does not matter.
    pub fn age(&self) -> std::time::Duration {
        self.ended_at
            .as_deref()
            .and_then(|t| humantime::parse_rfc3339(t).ok())
            .and_then(|t| std::time::SystemTime::now().duration_since(t).ok())
            .unwrap_or_default()
    }
}

/// Now, as [`Pending::ended_at`] keeps it.
pub fn now() -> String {
    humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string()
}

pub fn dir(state: &StateDir) -> PathBuf {
    state.root().join("serve/pg-pending")
}

fn path(state: &StateDir, id: &str) -> PathBuf {
    dir(state).join(format!("{id}.json"))
}

pub fn write(state: &StateDir, pending: &Pending) -> std::io::Result<PathBuf> {
    let dir = dir(state);
    std::fs::create_dir_all(&dir)?;
    let target = path(state, &pending.id);
    let data = serde_json::to_vec_pretty(pending).map_err(std::io::Error::other)?;
    crate::util::fs::write_atomically(&dir, &target, &data)?;
    Ok(target)
}

pub fn remove(state: &StateDir, id: &str) {
    let target = path(state, id);
    if let Err(e) = std::fs::remove_file(&target) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!("removing {}: {e}", target.display());
        }
    }
}

/// Every pending end, or why a file is not one (it is then left for the operator).
pub fn list(state: &StateDir) -> Vec<(PathBuf, Result<Pending, String>)> {
    let Ok(entries) = std::fs::read_dir(dir(state)) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let read = read(&p);
            (p, read)
        })
        .collect()
}

fn read(path: &Path) -> Result<Pending, String> {
    let text = std::fs::read(path).map_err(|e| e.to_string())?;
    serde_json::from_slice(&text).map_err(|e| e.to_string())
}
