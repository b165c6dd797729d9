//! Agent adapters: each renders the job's one [`SandboxPolicy`] into its agent's own terms
//! (Claude Code settings and flags; srt settings and a shell wrapper for opencode).
//!
//! Planning is pure: [`plan`] returns a [`Launch`] — the program, arguments, complete
//! environment and every file to write — so tests can inspect exactly what an agent would be
//! started with. [`Launch::write_files`] then carries the plan out.

pub mod claude;
pub mod commands;
pub mod opencode;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::config::Account;
use crate::job::Job;
use crate::sandbox::SandboxPolicy;
use crate::util::io::{IoContext, IoError};
use crate::workspace::WorkspacePaths;

/// Everything needed to start one agent run.
#[derive(Debug, Clone, Serialize)]
pub struct Launch {
    pub program: PathBuf,
    pub args: Vec<String>,
    /// The complete environment: the agent starts from nothing else.
    pub env: BTreeMap<String, String>,
    pub cwd: PathBuf,
    /// Written to the agent's stdin, then closed: the prompt, kept off the command line.
    pub stdin: String,
    pub files: Vec<PlannedFile>,
    /// Where the agent's own stdout (its event stream) is kept.
    pub transcript: PathBuf,
    /// A process started beside the agent, once it is up, and stopped after it: the sandbox
    /// host, which runs its commands (`commands`, `crate::jobshell`).
    pub companion: Option<crate::jobshell::host::HostPlan>,
    /// The agent's own files besides what the policy gives its commands: what the job's
    /// namespace binds for it ([`crate::sandbox::boundary`]).
    pub own: OwnFiles,
    /// How the agent is started inside the job's namespace; set by the runner after planning
    /// (`None`: not confined, on macOS or in the suite's mutation check).
    pub confined: Option<crate::sandbox::boundary::Confined>,
    /// The runner's side of the bridges into the job's network namespace, when it has one.
    pub net_bridge: Option<crate::sandbox::boundary::NetBridge>,
}

pub use crate::sandbox::boundary::OwnFiles;

#[derive(Debug, Clone, Serialize)]
pub struct PlannedFile {
    pub path: PathBuf,
    pub contents: Contents,
}

#[derive(Debug, Clone, Serialize)]
pub enum Contents {
    Dir,
    /// Bytes and permission bits.
    File(String, u32),
    /// A link to a secret the agent reads at run time, so no copy of it is ever made.
    Symlink(PathBuf),
}

/// What an adapter needs besides the policy.
pub struct AgentInputs<'a> {
    pub job: &'a Job,
    pub account: &'a Account,
    pub policy: &'a SandboxPolicy,
    pub workspace: &'a WorkspacePaths,
    /// The runner's text for the agent: environment, network, instruction files.
    pub system_prompt: &'a str,
    /// The agent binary.
    pub program: &'a Path,
    /// srt, whose sandbox runs the agent's commands (`commands`).
    pub srt: Option<&'a Path>,
    /// node, which runs the commands' sandbox host with srt's library.
    pub node: Option<&'a Path>,
    /// The runner's own binary: the agent's shell and the sandbox's executor.
    pub runner: Option<&'a Path>,
    /// The programs srt runs itself, as the runner resolved them
    /// ([`commands::SrtPrograms::find`]).
    pub srt_programs: commands::SrtPrograms,
    /// The runner's own environment, filtered by the policy.
    pub host_env: Vec<(String, String)>,
    /// The job's way to its model through the runner's gateway; `None`: the agent holds the
    /// account's login itself (opencode OAuth entries).
    pub gateway: Option<&'a GatewayAccess>,
}

/// What an agent needs to reach its model through the gateway: never the account's secret.
#[derive(Debug, Clone)]
pub struct GatewayAccess {
    /// The gateway's address and the upstream's base path.
    pub base_url: String,
    /// The job's token, sent where the API key would be.
    pub token: String,
    /// The gateway's port on loopback: bridged into the job's network namespace.
    pub port: u16,
    /// opencode: the provider pointed at the gateway.
    pub provider: Option<String>,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum AgentError {
    #[error("account {account} is a {actual} account, but the job asks for {wanted}")]
    WrongAgent {
        account: String,
        actual: &'static str,
        wanted: &'static str,
    },
    #[error("account {0} has no credentials configured")]
    NoCredentials(String),
    #[error("{0}")]
    Unsupported(&'static str),
    #[error("an agent's commands run in srt's sandbox, and srt was not found: set QUEST_RUNNER_SRT or put srt on PATH")]
    NoSrt,
    #[error("an agent's commands run in srt's sandbox, made with srt's library by node, which was not found: set QUEST_RUNNER_NODE or put node on PATH")]
    NoNode,
    #[error("an agent's commands run through quest-runner's own binary, which was not found: set QUEST_RUNNER_SELF")]
    NoRunner,
    #[error("srt's package (its package.json) was not found from {0}: point QUEST_RUNNER_SRT at the srt of an installed @anthropic-ai/sandbox-runtime")]
    NoSrtPackage(PathBuf),
    #[error("the job's commands run on gVisor (config isolation), and runsc was not found: set QUEST_RUNNER_RUNSC or put runsc on PATH")]
    NoRunsc,
    #[error(transparent)]
    Io(#[from] IoError),
}

pub fn plan(inputs: &AgentInputs<'_>) -> Result<Launch, AgentError> {
    match inputs.account {
        Account::Claude(a) if inputs.job.agent == crate::job::AgentKind::Claude => {
            claude::plan(inputs, a)
        }
        Account::Opencode(a) if inputs.job.agent == crate::job::AgentKind::Opencode => {
            opencode::plan(inputs, a)
        }
        other => Err(AgentError::WrongAgent {
            account: inputs.job.account.clone(),
            actual: other.agent().name(),
            wanted: inputs.job.agent.name(),
        }),
    }
}

impl Launch {
    /// Creates the planned files, owner-only unless the plan says otherwise.
    pub fn write_files(&self) -> Result<(), AgentError> {
        use std::os::unix::fs::PermissionsExt;
        for f in &self.files {
            if let Some(parent) = f.path.parent() {
                std::fs::create_dir_all(parent).at("creating", &f.path)?;
            }
            match &f.contents {
                Contents::Dir => std::fs::create_dir_all(&f.path).at("creating", &f.path)?,
                Contents::File(text, mode) => {
                    std::fs::write(&f.path, text).at("writing", &f.path)?;
                    std::fs::set_permissions(&f.path, std::fs::Permissions::from_mode(*mode))
                        .at("setting permissions of", &f.path)?;
                }
                Contents::Symlink(target) => {
                    let _ = std::fs::remove_file(&f.path);
                    std::os::unix::fs::symlink(target, &f.path).at("linking", &f.path)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "agent_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "plugin_tests.rs"]
mod plugin_tests;
