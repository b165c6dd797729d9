//! What a stopped build leaves in a repository's store, and who may clear it.
//!
//! Nix killed mid-build (its job's disk limit fired, its timeout ran out, it was cancelled)
//! leaves, in the store's directory, the lock of every path it was making, the directory of
//! its build's sandbox (`<drv>.chroot`, holding the outputs it was writing), and a path it was
//! substituting half written at its final name. Nix replaces such a path when it next makes
//! it, but a revision nobody builds again would keep its bytes until `cache gc`.
//!
//! A store is shared by the daemons of every run of its repository, in this runner and any
//! other on the state directory; a sandbox or a half-written path may be another run's,
//! still at work. So each daemon holds the store's `daemons.lock` shared while it runs, and a
//! stopped run clears sandboxes and half-written paths only when it can take that lock
//! alone: no daemon of the store runs. Otherwise the last run to stop clears them.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::fs::FlockOperation;
use tokio::process::Command;

use super::repo_store::RepoStore;
use super::DevShellError;

/// How long a daemon waits for a run clearing the store to finish before it starts anyway
/// ([`RepoStore::serving`]).
const CLEARING: Duration = Duration::from_secs(60);

impl RepoStore {
    fn daemons_lock(&self) -> PathBuf {
        self.root().join("daemons.lock")
    }

    /// The store's lock, held shared for as long as a daemon serves it.
    pub async fn serving(&self) -> Result<File, DevShellError> {
        let path = self.daemons_lock();
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| DevShellError::io("opening", &path, e))?;
        let deadline = Instant::now() + CLEARING;
        loop {
            match rustix::fs::flock(&file, FlockOperation::NonBlockingLockShared) {
                Ok(()) => return Ok(file),
                Err(e) if Instant::now() > deadline => {
                    return Err(DevShellError::io("locking", &path, e.into()))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    /// Clears what stopped builds left (see the module's doc): stale locks always; when no
    /// daemon of the store runs, sandboxes' directories, and the paths `nix` says are not
    /// valid of those whose locks were stale.
    pub async fn clear_unfinished(&self, nix: &Path) {
        if let Some((_alone, targets)) = self.clear_left() {
            for path in self.invalid(nix, &targets).await {
                remove(&path);
            }
        }
    }

    /// [`clear_unfinished`](Self::clear_unfinished) without asking nix: a half-written path
    /// stays (for a run dropped where nothing can be awaited).
    pub fn clear_unfinished_now(&self) {
        let _ = self.clear_left();
    }

    /// Clears stale locks, and when alone the sandboxes' directories; returns the store's
    /// lock held alone and the paths the stale locks were for, when alone.
    fn clear_left(&self) -> Option<(File, Vec<PathBuf>)> {
        let alone = self.alone();
        let targets = self.clear_stale_locks();
        let alone = alone?;
        if let Ok(entries) = std::fs::read_dir(self.real_store_dir()) {
            for entry in entries.flatten() {
                if entry.file_name().as_encoded_bytes().ends_with(b".chroot") {
                    remove(&entry.path());
                }
            }
        }
        Some((alone, targets))
    }

    /// The store's lock held alone, if no daemon holds it.
    fn alone(&self) -> Option<File> {
        let file = File::open(self.daemons_lock()).ok()?;
        rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive).ok()?;
        Some(file)
    }

    /// Those of `paths` (in the store's directory) the store does not hold valid, as its
    /// database says; none if nix cannot tell.
    async fn invalid(&self, nix: &Path, paths: &[PathBuf]) -> Vec<PathBuf> {
        if paths.is_empty() {
            return Vec::new();
        }
        let store = crate::store_path::store_dir();
        let named: Vec<PathBuf> = paths
            .iter()
            .filter_map(|p| p.file_name().map(|n| store.join(n)))
            .collect();
        let mut cmd = Command::new(nix.with_file_name("nix-store"));
        cmd.args([
            "--store",
            &self.uri(),
            "--check-validity",
            "--print-invalid",
        ])
        .args(&named);
        let out = match crate::process::run_captured(cmd, "nix").await {
            Ok(out) if out.status.success() => out,
            Ok(out) => {
                tracing::warn!(
                    "asking which unfinished paths are valid: {}",
                    out.error_message()
                );
                return Vec::new();
            }
            Err(e) => {
                tracing::warn!("asking which unfinished paths are valid: {e}");
                return Vec::new();
            }
        };
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| Path::new(l.trim()).file_name())
            .map(|name| self.real_store_dir().join(name))
            .filter(|p| paths.contains(p))
            .collect()
    }
}

/// Removes `path`, a directory tree or a file.
fn remove(path: &Path) {
    let dir = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir());
    let removed = match dir {
        true => crate::remove::remove_tree(path),
        false => std::fs::remove_file(path),
    };
    match removed {
        Ok(()) => tracing::info!(path = %path.display(), "removed what a stopped build left"),
        Err(e) => tracing::warn!(path = %path.display(), "removing what a stopped build left: {e}"),
    }
}
