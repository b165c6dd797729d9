//! The room on a file system, and whether it is (nearly) full, for naming the likely cause
//! of a failure.
//!
//! An agent that runs out of space dies with whatever exit status its runtime picks for the
//! failed write; the operator reading "exited with status 1" would look at the agent first.
//! The runner cannot know that ENOSPC was the cause, but it can say that the job's file
//! systems were full when the agent ended, which is the fact that sends one to the right place.

use std::path::Path;

/// A file system's room, as the runner's user sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    /// `st_dev` of the directory asked about: which file system it is.
    pub dev: u64,
    /// Bytes available to the runner's user (`f_bavail`: root's reserved blocks excluded).
    pub free: u64,
    /// The file system's size in bytes.
    pub size: u64,
    /// Inodes available to the runner's user (`f_favail`).
    pub files_free: u64,
    /// The file system's inodes (`f_files`; 0 where it has no fixed number, as on btrfs).
    pub files: u64,
}

/// The room on the file system of `dir`.
pub fn space(dir: &Path) -> std::io::Result<Space> {
    let st = rustix::fs::statvfs(dir)?;
    let dev = rustix::fs::stat(dir)?.st_dev;
    Ok(Space {
        dev,
        free: st.f_bavail.saturating_mul(st.f_frsize),
        size: st.f_blocks.saturating_mul(st.f_frsize),
        files_free: st.f_favail,
        files: st.f_files,
    })
}

/// Below this much space available to the runner's user a file system counts as full: a
/// Node agent's transcript or a git object write needs more than that.
pub const FULL_BELOW: u64 = 256 * 1024;

/// Below this many inodes available a file system counts as full: a clone's lock file, a
/// worktree or an agent's transcript needs more.
pub const FULL_BELOW_FILES: u64 = 64;

/// Why the file system of `dir` is full: `is full (12 KiB free)` or `has no inodes left (3
/// free)`; `None` when there is room, or when it cannot be asked (the answer is only ever a
/// hint).
pub fn full(dir: &Path) -> Option<String> {
    let st = rustix::fs::statvfs(dir).ok()?;
    let available = st.f_bavail.saturating_mul(st.f_frsize);
    if available < FULL_BELOW {
        return Some(format!("is full ({} KiB free)", available / 1024));
    }
    // `f_files` 0: no fixed number of inodes (btrfs), never out of them on its own.
    (st.f_files > 0 && st.f_favail < FULL_BELOW_FILES)
        .then(|| format!("has no inodes left ({} free)", st.f_favail))
}

/// One clause naming each of `dirs` whose file system is full, e.g. `; the file system of
/// /var/lib/x is full (0 KiB free)`; empty when none is. File systems shared by several of
/// `dirs` are named once.
pub fn full_clause(dirs: &[&Path]) -> String {
    let mut seen = Vec::new();
    let mut clause = String::new();
    for dir in dirs {
        let Some(why) = full(dir) else { continue };
        let dev = std::fs::metadata(dir).map(|m| std::os::unix::fs::MetadataExt::dev(&m));
        if let Ok(dev) = dev {
            if seen.contains(&dev) {
                continue;
            }
            seen.push(dev);
        }
        clause.push_str(&format!("; the file system of {} {why}", dir.display()));
    }
    clause
}

#[cfg(test)]
#[path = "space_tests.rs"]
mod tests;
