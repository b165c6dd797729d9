//! Running git on repositories whose content the runner does not trust.
//!
//! A job's repository is written by whoever pushed it, and a job's own git data (its objects,
//! refs, HEAD and index) by the job. Every git the runner starts reads configuration from
//! nowhere but the repository's own `config`, which the runner writes and no job can:
//! - no system or global configuration (`GIT_CONFIG_NOSYSTEM`, `GIT_CONFIG_GLOBAL=/dev/null`)
//!   and none from the environment: every `GIT_*` variable of the runner's is dropped
//!   (`GIT_CONFIG_PARAMETERS`, `GIT_CONFIG_COUNT`, `GIT_DIR`, `GIT_INDEX_FILE`, ...), so
//!   nothing the runner inherited points git elsewhere;
//! - the git directory and, for a worktree, the common directory are the paths the runner
//!   computed (`--git-dir`, `GIT_COMMON_DIR`), never what a worktree's `commondir` file says;
//! - no submodule is entered: a submodule's git would read the submodule's own config, which
//!   a job writes;
//! - no replace refs (`GIT_NO_REPLACE_OBJECTS`), and attributes only from the tree itself
//!   (`GIT_ATTR_NOSYSTEM`, `core.attributesFile=/dev/null`).
//!
//! Filters, textconv and diff or merge drivers run only when configuration defines them, and
//! git has no switch that turns all of them off; with every configuration source the runner's,
//! none is defined, so attributes naming one (`* filter=x` in a job's `.gitattributes`) do
//! nothing. The keys below are set besides, for the places a program would run even so.

use std::path::{Path, PathBuf};

use tokio::process::Command;

use crate::binaries::{self, BinaryError, Tool};
use crate::process;

/// Configuration that would let a repository run code when git runs on it, and the
/// submodule and attribute sources the runner never reads.
const NEUTRALISED: &[(&str, &str)] = &[
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.gitProxy", ""),
    ("core.pager", "cat"),
    ("core.editor", "false"),
    ("core.attributesFile", "/dev/null"),
    ("diff.external", ""),
    ("diff.ignoreSubmodules", "all"),
    ("gpg.program", "false"),
    ("protocol.ext.allow", "never"),
    ("protocol.file.allow", "always"),
    ("uploadpack.packObjectsHook", ""),
    ("filter.lfs.process", ""),
    ("filter.lfs.smudge", ""),
    ("filter.lfs.clean", ""),
    ("submodule.recurse", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("status.submoduleSummary", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("safe.bareRepository", "all"),
];

/// Also neutralised where the operator's own configuration is not wanted either: ways to
/// reach the network with the operator's credentials, and every transport but local files.
const NEUTRALISED_OFFLINE: &[(&str, &str)] = &[
    ("core.sshCommand", "false"),
    ("core.askPass", ""),
    ("credential.helper", ""),
    ("protocol.allow", "never"),
];

/// Variables a fetch keeps from the runner's environment: how the operator reaches their
/// remotes (SSH, HTTP proxies and CAs, askpass), and tracing. Every other `GIT_*` is dropped.
const FETCH_ENV: &[&str] = &[
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_SSH_VARIANT",
    "GIT_ASKPASS",
    "GIT_SSL_CAINFO",
    "GIT_SSL_CAPATH",
    "GIT_SSL_CERT",
    "GIT_SSL_KEY",
    "GIT_PROXY_SSL_CAINFO",
    "GIT_HTTP_PROXY_AUTHMETHOD",
    "GIT_HTTP_USER_AGENT",
];

/// The operator's trust for TLS remotes (an internal forge's CA), which a push keeps from the
/// runner's environment as a fetch does; the rest of [`FETCH_ENV`] (other transports, askpass)
/// is the push's own to decide (`deliver::remote`).
pub const TLS_TRUST_ENV: &[&str] = &["GIT_SSL_CAINFO", "GIT_SSL_CAPATH", "GIT_PROXY_SSL_CAINFO"];

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
    #[error("git {args} did not finish within {}s (stopped)", limit.as_secs())]
    TimedOut {
        args: String,
        limit: std::time::Duration,
    },
}

/// A git binary and the repository (a git directory) it works on.
#[derive(Debug, Clone)]
pub struct Git {
    binary: PathBuf,
    git_dir: PathBuf,
    /// For a linked worktree: its common directory and its files.
    worktree: Option<Worktree>,
    operator_config: bool,
    /// Applied to each of its commands: entering the job's namespace, the only one where a
    /// checkout of a runner that is not root is mounted (`workspace::owned_mount`).
    hook: Option<Hook>,
}

/// A [`process::CommandHook`], shown by its presence only.
#[derive(Clone)]
struct Hook(process::CommandHook);

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hook")
    }
}

#[derive(Debug, Clone)]
struct Worktree {
    common_dir: PathBuf,
    work_tree: PathBuf,
}

impl Git {
    /// Git for local work: no system or global configuration at all.
    pub fn new(git_dir: &Path) -> Result<Git, GitError> {
        Ok(Git {
            binary: binaries::find(Tool::Git)?,
            git_dir: git_dir.to_path_buf(),
            worktree: None,
            operator_config: false,
            hook: None,
        })
    }

    /// Git on a linked worktree whose administrative directory `admin` a job may write: the
    /// common directory and the files are the runner's paths, not what `admin/commondir` or a
    /// `.git` file says.
    pub fn worktree(admin: &Path, common_dir: &Path, work_tree: &Path) -> Result<Git, GitError> {
        Ok(Git {
            worktree: Some(Worktree {
                common_dir: common_dir.to_path_buf(),
                work_tree: work_tree.to_path_buf(),
            }),
            ..Git::new(admin)?
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

    /// This git, `hook` applied to each of its commands.
    pub fn with_hook(self, hook: process::CommandHook) -> Git {
        Git {
            hook: Some(Hook(hook)),
            ..self
        }
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
        for (name, _) in std::env::vars_os() {
            let name_str = name.to_string_lossy();
            let keep = self.operator_config
                && (FETCH_ENV.contains(&name_str.as_ref()) || name_str.starts_with("GIT_TRACE"));
            if name_str.starts_with("GIT_") && !keep {
                cmd.env_remove(&name);
            }
        }
        cmd.env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_NO_REPLACE_OBJECTS", "1")
            .env("GIT_ATTR_NOSYSTEM", "1");
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
        if let Some(wt) = &self.worktree {
            cmd.env("GIT_COMMON_DIR", &wt.common_dir)
                .arg("--work-tree")
                .arg(&wt.work_tree);
        }
        cmd.args(args);
        if let Some(Hook(hook)) = &self.hook {
            hook(cmd.as_std_mut());
        }
        cmd
    }

    /// Runs git and returns its trimmed stdout, or its own error message.
    pub async fn output(&self, args: &[&str]) -> Result<String, GitError> {
        Ok(self.stdout(args).await?.trim().to_string())
    }

    /// [`Git::output`], stopped after `limit`: for git reading what a job wrote, where a FIFO in
    /// place of a ref or the index would block it for ever.
    pub async fn output_within(
        &self,
        args: &[&str],
        limit: std::time::Duration,
    ) -> Result<String, GitError> {
        Ok(self.stdout_within(args, limit).await?.trim().to_string())
    }

    /// [`Git::stdout`], stopped after `limit` (see [`Git::output_within`]).
    pub async fn stdout_within(
        &self,
        args: &[&str],
        limit: std::time::Duration,
    ) -> Result<String, GitError> {
        Ok(self.stdout_bounded(args, limit, u64::MAX).await?.0)
    }

    /// [`Git::stdout_within`], keeping at most `max_stdout` bytes: git is stopped when it writes
    /// more, and the flag says so (a listing of what a job wrote can be as long as the job
    /// likes, and the runner keeps it in memory).
    pub async fn stdout_bounded(
        &self,
        args: &[&str],
        limit: std::time::Duration,
        max_stdout: u64,
    ) -> Result<(String, bool), GitError> {
        tokio::time::timeout(limit, self.run(args, max_stdout))
            .await
            .unwrap_or_else(|_| {
                Err(GitError::TimedOut {
                    args: args.join(" "),
                    limit,
                })
            })
    }

    /// Runs git and returns its stdout as bytes, stopped after `limit`; `None` when git wrote
    /// more than `max_stdout` (a blob read as data, which may be anything the revision holds).
    pub async fn bytes_bounded(
        &self,
        args: &[&str],
        limit: std::time::Duration,
        max_stdout: u64,
    ) -> Result<Option<Vec<u8>>, GitError> {
        let joined = args.join(" ");
        let run = process::run_captured_upto(self.command(args), "git", max_stdout);
        let out = tokio::time::timeout(limit, run)
            .await
            .map_err(|_| GitError::TimedOut {
                args: joined.clone(),
                limit,
            })?
            .map_err(|source| GitError::Spawn {
                args: joined.clone(),
                source,
            })?;
        if out.stdout_truncated {
            return Ok(None);
        }
        if !out.status.success() {
            return Err(GitError::Failed {
                args: joined,
                message: out.error_message(),
            });
        }
        Ok(Some(out.stdout))
    }

    /// Runs git and returns its stdout as it is (porcelain formats start lines with spaces).
    pub async fn stdout(&self, args: &[&str]) -> Result<String, GitError> {
        Ok(self.run(args, u64::MAX).await?.0)
    }

    async fn run(&self, args: &[&str], max_stdout: u64) -> Result<(String, bool), GitError> {
        let joined = args.join(" ");
        let out = process::run_captured_upto(self.command(args), "git", max_stdout)
            .await
            .map_err(|source| GitError::Spawn {
                args: joined.clone(),
                source,
            })?;
        if !out.status.success() && !out.stdout_truncated {
            return Err(GitError::Failed {
                args: joined,
                message: out.error_message(),
            });
        }
        Ok((
            String::from_utf8_lossy(&out.stdout).into_owned(),
            out.stdout_truncated,
        ))
    }

    /// Runs git with `input` on its stdin (`update-ref --stdin`: many ref updates, one git),
    /// and returns its trimmed stdout. For the runner's own repositories and input only.
    pub async fn output_with_stdin(&self, args: &[&str], input: &[u8]) -> Result<String, GitError> {
        use tokio::io::AsyncWriteExt;
        let joined = args.join(" ");
        let spawn = |source| GitError::Spawn {
            args: joined.clone(),
            source,
        };
        let mut cmd = self.command(args);
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(spawn)?;
        let mut stdin = child
            .stdin
            .take()
            .ok_or_else(|| spawn(std::io::Error::other("no stdin")))?;
        let write = async move {
            // Closing stdin is what tells git the input ended.
            let written = stdin.write_all(input).await;
            drop(stdin);
            written
        };
        let (written, out) = tokio::join!(write, child.wait_with_output());
        let out = out.map_err(spawn)?;
        if !out.status.success() {
            let message = String::from_utf8_lossy(&out.stderr).trim().to_string();
            return Err(GitError::Failed {
                args: joined,
                message: if message.is_empty() {
                    format!("exited with {}", out.status)
                } else {
                    message
                },
            });
        }
        written.map_err(spawn)?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
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
