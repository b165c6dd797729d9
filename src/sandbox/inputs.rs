//! What a job's policy is computed from besides its workspace: the platform, the job's trust,
//! the operator's hosts and the runner's private places. Apart from [`super::policy`], which
//! combines the steps, so that each step reads its inputs without importing the whole.

use std::path::PathBuf;

use serde::Serialize;

use super::private::HiddenFile;
use crate::job::Trust;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Platform {
    Linux,
    Macos,
}

impl Platform {
    pub fn current() -> Platform {
        if cfg!(target_os = "macos") {
            Platform::Macos
        } else {
            Platform::Linux
        }
    }
}

/// What the policy is computed from besides the workspace.
#[derive(Debug, Clone)]
pub struct PolicyInputs {
    pub platform: Platform,
    pub trust: Trust,
    /// Hosts the operator adds for trusted revisions (reads only, like the registries).
    pub extra_hosts: Vec<String>,
    /// Hosts the operator adds for trusted revisions with every method.
    pub full_access_hosts: Vec<String>,
    /// The hosts of the revision's locked dependencies, which the runner answers itself from
    /// its cache (`crate::deps`): all an untrusted revision reaches (empty: none).
    pub dependency_hosts: Vec<String>,
    /// The runner's state directory (logins, tokens, other jobs).
    pub state_dir: PathBuf,
    /// The home directory of the user the runner runs as.
    pub operator_home: Option<PathBuf>,
    /// Files of the runner's that may live anywhere (account secrets, the config file), each
    /// with the directories that hide it ([`super::private::hide`]).
    pub private: Vec<HiddenFile>,
}
