//! Where the runner keeps what outlives one command: caches, roots, and (later) jobs.
//!
//! One directory, chosen by `--state-dir`, `QUEST_RUNNER_STATE_DIR`, or the XDG state
//! directory. A job's commands must never read it: it holds account logins and tokens.

use std::path::{Path, PathBuf};

use crate::users::{describe, user_name};

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("no state directory: pass --state-dir, or set QUEST_RUNNER_STATE_DIR or HOME")]
    NoDefault,
    #[error("state directory {path} is not usable: {source}")]
    Unusable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "state directory {} belongs to {}, not to {} who runs this: run as its owner (e.g. \
         sudo -u {} quest-runner ...) or choose another --state-dir",
        .0.state.display(), describe(.0.owner), describe(.0.user), user_name(.0.owner)
    )]
    OtherOwner(Box<Foreign>),
    #[error(
        "state directory {} is not usable: {} belongs to {}, not to {} who runs this (a leftover \
         of running quest-runner as {} on this state directory): remove it, or chown -R {} {}",
        .0.state.display(), .0.path.display(), describe(.0.owner), describe(.0.user),
        user_name(.0.owner), user_name(.0.user), .0.state.display()
    )]
    Leftover(Box<Foreign>),
}

/// A path of the state directory (or the directory itself) that belongs to another user.
#[derive(Debug)]
pub struct Foreign {
    pub state: PathBuf,
    pub path: PathBuf,
    pub owner: u32,
    pub user: u32,
}

#[derive(Debug, Clone)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    /// The default location: `$XDG_STATE_HOME/quest-runner` or `~/.local/state/quest-runner`.
    pub fn default_path() -> Result<PathBuf, StateError> {
        if let Some(xdg) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
            return Ok(PathBuf::from(xdg).join("quest-runner"));
        }
        let home = std::env::var_os("HOME")
            .filter(|v| !v.is_empty())
            .ok_or(StateError::NoDefault)?;
        Ok(PathBuf::from(home).join(".local/state/quest-runner"))
    }

    /// Uses `root` without touching the disk; directories are created when first written.
    /// A relative path is made absolute, since the paths the runner prints and hands to Nix
    /// must not depend on the directory a later reader runs in.
    pub fn at(root: impl Into<PathBuf>) -> StateDir {
        let root = root.into();
        StateDir {
            root: std::path::absolute(&root).unwrap_or(root),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn config_file(&self) -> PathBuf {
        self.root.join("config.json")
    }

    /// Refuses a state directory that exists and belongs to another user. Its files hold that
    /// user's logins and caches; and root working in a service user's directory would leave
    /// files there the service can no longer write.
    pub fn check_owner(&self) -> Result<(), StateError> {
        use std::os::unix::fs::MetadataExt;
        let Ok(meta) = std::fs::metadata(&self.root) else {
            return Ok(()); // made by the first write, as this user
        };
        let me = rustix::process::geteuid().as_raw();
        if meta.uid() == me {
            return Ok(());
        }
        Err(StateError::OtherOwner(Box::new(Foreign {
            state: self.root.clone(),
            path: self.root.clone(),
            owner: meta.uid(),
            user: me,
        })))
    }

    /// Refuses `path` inside the state directory when it, or a directory between, belongs to
    /// another user (a root-owned leftover): the writes to come would fail with a bare
    /// "permission denied", or a tool would (git refuses a repository of another owner).
    pub fn check_ours(&self, path: &Path) -> Result<(), StateError> {
        self.foreign_leftover(path).map_or(Ok(()), Err)
    }

    /// The first of `path` and the directories between it and the state directory that
    /// exists and belongs to another user: why a write failed with "permission denied".
    fn foreign_leftover(&self, path: &Path) -> Option<StateError> {
        use std::os::unix::fs::MetadataExt;
        let me = rustix::process::geteuid().as_raw();
        let rel = path.strip_prefix(&self.root).ok()?;
        let mut at = self.root.clone();
        for part in std::iter::once(None).chain(rel.components().map(Some)) {
            if let Some(part) = part {
                at.push(part);
            }
            let meta = std::fs::symlink_metadata(&at).ok()?;
            if meta.uid() != me {
                return Some(StateError::Leftover(Box::new(Foreign {
                    state: self.root.clone(),
                    path: at,
                    owner: meta.uid(),
                    user: me,
                })));
            }
        }
        None
    }

    /// Creates `sub` (and the state directory) owner-only, naming the state directory in the
    /// error so an unwritable location is reported as such, and a directory of another user
    /// in the way (a root-owned leftover) by its owner.
    pub fn ensure_dir(&self, sub: &Path) -> Result<PathBuf, StateError> {
        use std::os::unix::fs::DirBuilderExt;
        let path = self.root.join(sub);
        let unusable = |source: std::io::Error| {
            if source.kind() == std::io::ErrorKind::PermissionDenied {
                if let Some(leftover) = self.foreign_leftover(&path) {
                    return leftover;
                }
            }
            StateError::Unusable {
                path: self.root.clone(),
                source,
            }
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&path)
            .map_err(unusable)?;
        // Creating an existing directory succeeds even when it is read-only; probe it.
        tempfile::Builder::new()
            .prefix(".probe")
            .tempfile_in(&path)
            .map(drop)
            .map_err(unusable)?;
        Ok(path)
    }
}

/// For a "permission denied" on `path`: `" (<path> belongs to <owner>, not to <user> ...)"`
/// when it or its directory belongs to another user, else nothing.
pub fn foreign_owner_note(path: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    for at in [Some(path), path.parent()].into_iter().flatten() {
        if let Ok(meta) = std::fs::symlink_metadata(at) {
            if meta.uid() != me {
                return format!(
                    " ({} belongs to {}, not to {} who runs this: a leftover of running \
                     quest-runner as {} on this state directory? remove it, or chown it)",
                    at.display(),
                    describe(meta.uid()),
                    describe(me),
                    user_name(meta.uid()),
                );
            }
        }
    }
    String::new()
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
