//! Each `nix` run's private TMPDIR.
//!
//! Nix puts its build directories and its git fetcher's checkouts in TMPDIR and removes them
//! itself, unless it is killed outright. Given a directory of its own, removed when the run
//! returns, a nix killed by a signal leaves nothing behind either. A runner killed outright
//! cannot remove it; the directory is locked (`flock`) for as long as its run lasts, so a
//! later runner's [`sweep`] can tell an abandoned one from one in use.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::FlockOperation;

/// The name every scratch directory starts with, in the runner's temp dir.
pub const PREFIX: &str = "quest-nix-";

/// A directory is created a moment before it is locked; a sweep leaves younger ones alone.
const MIN_AGE: Duration = Duration::from_secs(10);

/// A locked scratch directory, removed (still locked) when dropped.
pub struct Scratch {
    dir: PathBuf,
    _lock: File,
}

impl Scratch {
    pub fn create() -> std::io::Result<Scratch> {
        let dir = tempfile::Builder::new().prefix(PREFIX).tempdir()?;
        let lock = File::open(dir.path())?;
        rustix::fs::flock(&lock, FlockOperation::NonBlockingLockExclusive)?;
        Ok(Scratch {
            dir: dir.keep(),
            _lock: lock,
        })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Before the lock goes (fields drop after this): a sweep never sees it half removed.
        if let Err(e) = crate::remove::remove_tree(&self.dir) {
            tracing::warn!(path = %self.dir.display(), "could not remove: {e}");
        }
    }
}

/// Removes the scratch directories of runs that are over (their runner was killed): those in
/// `parent` nobody holds locked and older than [`MIN_AGE`]. Returns what it removed.
pub fn sweep(parent: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(PREFIX) {
            continue;
        }
        let young = entry
            .metadata()
            .and_then(|m| m.modified())
            .map(|t| t.elapsed().unwrap_or_default() < MIN_AGE)
            .unwrap_or(true);
        if young || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let path = entry.path();
        let Ok(dir) = File::open(&path) else { continue };
        if rustix::fs::flock(&dir, FlockOperation::NonBlockingLockExclusive).is_err() {
            continue; // a run in progress
        }
        match crate::remove::remove_tree(&path) {
            Ok(()) => {
                tracing::info!(path = %path.display(), "removed the scratch dir of a nix run whose runner died");
                removed.push(path);
            }
            Err(e) => tracing::warn!(path = %path.display(), "could not remove: {e}"),
        }
    }
    removed
}

#[cfg(test)]
#[path = "scratch_tests.rs"]
mod tests;
