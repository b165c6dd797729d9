//! Running git on repositories whose content the runner does not trust.
//!
//! A job's repository is written by whoever pushed it, and a bare clone's `config` is read by
//! every git command run on it. So every git the runner starts ignores the system and global
//! configuration, and overrides each key through which configuration can run a program.

use std::path::{Path, PathBuf};

use tokio::process::Command;

use crate::binaries::{self, BinaryError, Tool};
use crate::process;

/// Configuration that would let a repository run code when git runs on it.
const NEUTRALISED: &[(&str, &str)] = &[
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.gitProxy", ""),
    ("core.pager", "cat"),
    ("core.editor", "false"),
    ("diff.external", ""),
    ("gpg.program", "false"),
    ("protocol.ext.allow", "never"),
    ("protocol.file.allow", "always"),
    ("uploadpack.packObjectsHook", ""),
    ("filter.lfs.process", ""),
    ("filter.lfs.smudge", ""),
    ("safe.bareRepository", "all"),
];

/// Also neutralised where the operator's own configuration is not wanted either: ways to
/// reach the network with the operator's credentials.
const NEUTRALISED_OFFLINE: &[(&str, &str)] = &[
    ("core.sshCommand", "false"),
    ("core.askPass", ""),
    ("credential.helper", ""),
];

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error(transparent)]
    Binary(#[from] BinaryError),
    #[error("could not run git {args}: {source}")]
    Spawn {
        args: String,
        #[source]
        source: std::io::Error,
    },
    #[error("git {args} failed: {message}")]
    Failed { args: String, message: String },
}

/// A git binary and the repository (a git directory) it works on.
#[derive(Debug, Clone)]
pub struct Git {
    binary: PathBuf,
    git_dir: PathBuf,
    operator_config: bool,
}

impl Git {
    /// Git for local work: no system or global configuration at all.
    pub fn new(git_dir: &Path) -> Result<Git, GitError> {
        Ok(Git {
            binary: binaries::find(Tool::Git)?,
            git_dir: git_dir.to_path_buf(),
            operator_config: false,
        })
    }

    /// Git for fetching: keeps the operator's global configuration (credential helpers, SSH
    /// settings) so private repositories can be fetched, while the repository's own
    /// configuration still cannot run anything.
    pub fn for_fetch(git_dir: &Path) -> Result<Git, GitError> {
        Ok(Git {
            operator_config: true,
            ..Git::new(git_dir)?
        })
    }

    pub fn git_dir(&self) -> &Path {
        &self.git_dir
    }

    /// A command with the repository and the neutralised configuration already set.
    pub fn command<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let mut cmd = Command::new(&self.binary);
        cmd.env("GIT_TERMINAL_PROMPT", "0")
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .env_remove("GIT_CONFIG_PARAMETERS")
            .env_remove("GIT_EXTERNAL_DIFF");
        if !self.operator_config {
            cmd.env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null");
            for (key, value) in NEUTRALISED_OFFLINE {
                cmd.arg("-c").arg(format!("{key}={value}"));
            }
        }
        for (key, value) in NEUTRALISED {
            cmd.arg("-c").arg(format!("{key}={value}"));
        }
        cmd.arg("--git-dir").arg(&self.git_dir);
        cmd.args(args);
        cmd
    }

    /// Runs git and returns its trimmed stdout, or its own error message.
    pub async fn output(&self, args: &[&str]) -> Result<String, GitError> {
        Ok(self.stdout(args).await?.trim().to_string())
    }

    /// Runs git and returns its stdout as it is (porcelain formats start lines with spaces).
    pub async fn stdout(&self, args: &[&str]) -> Result<String, GitError> {
        let joined = args.join(" ");
        let out = process::run_captured(self.command(args), "git")
            .await
            .map_err(|source| GitError::Spawn {
                args: joined.clone(),
                source,
            })?;
        if !out.status.success() {
            return Err(GitError::Failed {
                args: joined,
                message: out.error_message(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Whether git succeeds on `args` (for existence checks, where failure is an answer).
    pub async fn succeeds(&self, args: &[&str]) -> Result<bool, GitError> {
        let joined = args.join(" ");
        let mut cmd = self.command(args);
        cmd.stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        let status = cmd.status().await.map_err(|source| GitError::Spawn {
            args: joined,
            source,
        })?;
        Ok(status.success())
    }
}
