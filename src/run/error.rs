//! Why a job's agent could not run to its end: each error names the step, and the file or
//! program it failed on. The job ends as an error with this text as its message.

use std::path::PathBuf;

use crate::gateway::{AccountError, CredentialError, GatewayError};
use crate::jobshell::host::SandboxError;
use crate::netproxy::proxy::ProxyError;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The agent's transcript or log file.
    #[error("creating {}: {source}", path.display())]
    Output {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The sandbox of the agent's commands (the launch's companion), at its start or later.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The agent's network bridge (its loopback ports, outside its namespace).
    #[error("{0}")]
    Bridge(String),
    /// The agent's binary exists, but the setup between fork and exec (cgroup placement,
    /// limits, parent-death signal) failed: that can only return an errno, which would
    /// otherwise read as if the binary were missing.
    #[error("starting {}: preparing its process (job cgroup, limits) failed: {source}", program.display())]
    Prepare {
        program: PathBuf,
        source: std::io::Error,
    },
    #[error("starting {}: {source}", program.display())]
    Start {
        program: PathBuf,
        source: std::io::Error,
    },
    #[error("waiting for the agent: {0}")]
    Wait(#[source] std::io::Error),
    /// The job's network proxy never served, or stopped serving.
    #[error("the job's network proxy: {0}")]
    Proxy(#[source] ProxyError),
}

/// Why a job gets no way to its model.
#[derive(Debug, thiserror::Error)]
pub enum ModelAccessError {
    #[error(transparent)]
    Account(#[from] AccountError),
    #[error(transparent)]
    Gateway(#[from] GatewayError),
    #[error("account {account}: {source}")]
    Credential {
        account: String,
        source: CredentialError,
    },
}
