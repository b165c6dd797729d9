//! Where a job's private temp dirs go: the runner's `TMPDIR` when a temp dir in it is short
//! enough for Claude Code, else `/tmp`.

use std::path::PathBuf;

/// The parent of the private temp dirs when the runner's `TMPDIR` cannot be used.
pub const TEMP_PARENT: &str = "/tmp";
pub const TEMP_PREFIX: &str = "quest-job-";
/// Claude Code ignores a `CLAUDE_CODE_TMPDIR` longer than this (and falls back to the shared
/// `/tmp/claude-<uid>`); the job's temp dir is that variable.
pub const CLAUDE_TMPDIR_MAX: usize = 35;
/// What a temp dir's name adds to its parent: `/quest-job-XXXXXX`.
const TEMP_NAME_LEN: usize = 1 + TEMP_PREFIX.len() + 6;
/// The longest `TMPDIR` (resolved) jobs' temp dirs can go in.
pub const TMPDIR_MAX: usize = CLAUDE_TMPDIR_MAX - TEMP_NAME_LEN;

/// Where a job's private temp dirs are made, and why there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TempParent {
    pub path: PathBuf,
    /// Why the runner's `TMPDIR` was not used, when it was set.
    pub why_not_tmpdir: Option<String>,
}

/// The runner's `TMPDIR` (resolved), so that jobs write where the operator put temporary
/// files — often a larger disk than a RAM-backed `/tmp` — when a temp dir in it is short
/// enough for Claude Code's `CLAUDE_CODE_TMPDIR`; else `/tmp`.
pub fn temp_parent() -> TempParent {
    choose_temp_parent(std::env::var_os("TMPDIR").map(PathBuf::from))
}

fn choose_temp_parent(tmpdir: Option<PathBuf>) -> TempParent {
    let fallback = |why: String| TempParent {
        path: PathBuf::from(TEMP_PARENT),
        why_not_tmpdir: Some(why),
    };
    let Some(tmpdir) = tmpdir.filter(|t| !t.as_os_str().is_empty()) else {
        return TempParent {
            path: PathBuf::from(TEMP_PARENT),
            why_not_tmpdir: None,
        };
    };
    let shown = tmpdir.display();
    let resolved = match std::fs::canonicalize(&tmpdir) {
        Ok(p) if p.is_dir() => p,
        Ok(_) => return fallback(format!("TMPDIR={shown} is not a directory")),
        Err(e) => return fallback(format!("TMPDIR={shown}: {e}")),
    };
    let len = resolved.as_os_str().len();
    if resolved.parent().is_none() {
        return fallback(format!("TMPDIR={shown} is the root directory"));
    }
    if len > TMPDIR_MAX {
        return fallback(format!(
            "TMPDIR={} is {len} characters; a job's temp dir in it would be longer than the \
             {CLAUDE_TMPDIR_MAX} Claude Code accepts for CLAUDE_CODE_TMPDIR (at most \
             {TMPDIR_MAX} for TMPDIR)",
            resolved.display(),
        ));
    }
    TempParent {
        path: resolved,
        why_not_tmpdir: None,
    }
}

#[cfg(test)]
#[path = "temp_tests.rs"]
mod tests;
