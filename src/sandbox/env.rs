//! The environment of the agent and its commands: built from scratch, with only a few of the
//! runner's variables passed through. A step of [`super::policy::plan`].

use std::collections::BTreeMap;

use serde::Serialize;

use super::network::{CaFiles, RETRY_VARS, TRUST_VARS};
use crate::workspace::WorkspacePaths;

/// Environment rules. Commands start from the agent's environment, which the runner builds
/// from scratch: only `pass` names (exact, or prefixes ending in `*`) survive from the
/// runner's own environment, and `set` is added on top.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct EnvPolicy {
    pub pass: Vec<String>,
    pub set: BTreeMap<String, String>,
}

/// Variables a command may inherit from the runner: locale, the search path, and the
/// proxy and CA settings a package manager needs to reach a registry.
pub const PASSED_ENV: &[&str] = &[
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "TERM",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "all_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NIX_SSL_CERT_FILE",
    "CURL_CA_BUNDLE",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
];

/// Whether `name` passes `patterns` (exact names, or prefixes written `PREFIX*`).
pub fn env_passes(patterns: &[String], name: &str) -> bool {
    patterns.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => p == name,
    })
}

/// The environment rules of a job in `ws`: the private temp dir as HOME and TMPDIR, git
/// without the operator's configuration and with an identity of its own, and, when some host
/// is reachable, every client pointed at the job's CA.
pub(super) fn planned_env(ws: &WorkspacePaths, ca: Option<&CaFiles>) -> EnvPolicy {
    let mut set = BTreeMap::new();
    let temp = ws.temp_dir.to_string_lossy().into_owned();
    set.insert("HOME".to_string(), temp.clone());
    set.insert("TMPDIR".to_string(), temp.clone());
    set.insert("SHELL".to_string(), "/bin/bash".to_string());
    // Git inside the sandbox must not read a global config from the operator.
    set.insert("GIT_CONFIG_NOSYSTEM".to_string(), "1".to_string());
    set.insert("GIT_TERMINAL_PROMPT".to_string(), "0".to_string());
    // An identity for the agent's commits: HOME is empty, so git would have none.
    for (k, v) in [
        ("GIT_AUTHOR_NAME", "quest-runner agent"),
        ("GIT_AUTHOR_EMAIL", "agent@quest-runner.invalid"),
        ("GIT_COMMITTER_NAME", "quest-runner agent"),
        ("GIT_COMMITTER_EMAIL", "agent@quest-runner.invalid"),
    ] {
        set.insert(k.to_string(), v.to_string());
    }

    if let Some(ca) = ca {
        for var in TRUST_VARS {
            set.insert(var.name.to_string(), var.value(ca));
        }
        for (var, value) in RETRY_VARS {
            set.insert(var.to_string(), value.to_string());
        }
    }
    EnvPolicy {
        pass: PASSED_ENV.iter().map(|s| s.to_string()).collect(),
        set,
    }
}
