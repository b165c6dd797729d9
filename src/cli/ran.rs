//! Jobs `quest-runner run` made: they have a directory under `<state>/jobs/` (the same as a
//! queued job's) and no queue entry, so `show`, `logs` and `gc` find them here when the queue
//! does not know the id.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use super::{Context, Failure};
use crate::exit::Exit;

/// The directory of a job `run` made, when there is one.
pub(super) fn dir(ctx: &Context, id: &str) -> Option<PathBuf> {
    crate::job::check_id(id).ok()?;
    let dir = crate::workspace::job_root(&ctx.state, id);
    dir.is_dir().then_some(dir)
}

/// Whether the job has ended: `run` writes `result.json` last.
pub(super) fn finished(dir: &std::path::Path) -> bool {
    dir.join("result.json").is_file()
}

/// What `show` prints of it: its result, or that it is still running.
pub(super) fn show(ctx: &Context, id: &str) -> Option<Result<serde_json::Value, Failure>> {
    let dir = dir(ctx, id)?;
    let result_file = dir.join("result.json");
    let result = match std::fs::read_to_string(&result_file) {
        Ok(text) => match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(v) => Some(v),
            Err(e) => {
                let why = format!("{} is not JSON: {e}", result_file.display());
                return Some(Err(Failure::new(Exit::Failed, why)));
            }
        },
        Err(_) => None,
    };
    Some(Ok(serde_json::json!({
        "id": id,
        "state": if result.is_some() { "finished" } else { "running" },
        "made_by": "run",
        "result": result,
        "dir": dir.display().to_string(),
    })))
}

/// Removes the directories of `run`'s finished jobs whose result is older than `older_than`
/// (a running one has no result yet and is left alone); returns their ids.
pub(super) fn gc(
    ctx: &Context,
    older_than: Duration,
    queued: &dyn Fn(&str) -> bool,
) -> Vec<String> {
    let cutoff = SystemTime::now()
        .checked_sub(older_than)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let jobs = ctx.state.root().join("jobs");
    let Ok(entries) = std::fs::read_dir(&jobs) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let Some(id) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if crate::job::check_id(&id).is_err() || queued(&id) {
            continue;
        }
        let old = std::fs::metadata(entry.path().join("result.json"))
            .and_then(|m| m.modified())
            .is_ok_and(|t| t < cutoff);
        if !old {
            continue;
        }
        match crate::remove::remove_tree(&entry.path()) {
            Ok(()) => removed.push(id),
            Err(e) => tracing::warn!(job = %id, "removing {}: {e}", entry.path().display()),
        }
    }
    removed.sort();
    removed
}
