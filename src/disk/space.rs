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
}

/// The room on the file system of `dir`.
pub fn space(dir: &Path) -> std::io::Result<Space> {
    let st = rustix::fs::statvfs(dir)?;
    let dev = rustix::fs::stat(dir)?.st_dev;
    Ok(Space {
        dev,
        free: st.f_bavail.saturating_mul(st.f_frsize),
        size: st.f_blocks.saturating_mul(st.f_frsize),
    })
}

/// Below this much space available to the runner's user a file system counts as full: a
/// Node agent's transcript or a git object write needs more than that.
pub const FULL_BELOW: u64 = 256 * 1024;

/// The bytes available on the file system of `dir` if that is below [`FULL_BELOW`]; `None`
/// when there is room, or when it cannot be asked (the answer is only ever a hint).
pub fn full(dir: &Path) -> Option<u64> {
    let st = rustix::fs::statvfs(dir).ok()?;
    let available = st.f_bavail.saturating_mul(st.f_frsize);
    (available < FULL_BELOW).then_some(available)
}

/// One clause naming each of `dirs` whose file system is full, e.g. `; /var/lib/x's file
/// system is full (0 KiB free)`; empty when none is. File systems shared by several of
/// `dirs` are named once.
pub fn full_clause(dirs: &[&Path]) -> String {
    let mut seen = Vec::new();
    let mut clause = String::new();
    for dir in dirs {
        let Some(free) = full(dir) else { continue };
        let dev = std::fs::metadata(dir).map(|m| std::os::unix::fs::MetadataExt::dev(&m));
        if let Ok(dev) = dev {
            if seen.contains(&dev) {
                continue;
            }
            seen.push(dev);
        }
        clause.push_str(&format!(
            "; the file system of {} is full ({} KiB free)",
            dir.display(),
            free / 1024
        ));
    }
    clause
}

#[cfg(test)]
#[path = "space_tests.rs"]
mod tests;
