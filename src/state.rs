//! Where the runner keeps what outlives one command: caches, roots, and (later) jobs.
//!
//! One directory, chosen by `--state-dir`, `QUEST_RUNNER_STATE_DIR`, or the XDG state
//! directory. A job's commands must never read it: it holds account logins and tokens.

use std::path::{Path, PathBuf};

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

    /// Creates `sub` (and the state directory) owner-only, naming the state directory in the
    /// error so an unwritable location is reported as such.
    pub fn ensure_dir(&self, sub: &Path) -> Result<PathBuf, StateError> {
        use std::os::unix::fs::DirBuilderExt;
        let path = self.root.join(sub);
        let unusable = |source| StateError::Unusable {
            path: self.root.clone(),
            source,
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
