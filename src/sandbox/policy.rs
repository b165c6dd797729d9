//! The sandbox policy of one job: what its commands may read, write and reach, and which
//! environment they get. One value, computed from the job and its workspace before anything
//! runs, printed by `quest-runner policy` for audit, and rendered into the job's sandbox's
//! settings (srt's) and each agent's own rules. A rule that is not in this value is not enforced anywhere.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::env::planned_env;
use super::files::{allowed_reads, allowed_writes, denied_reads, denied_writes};
use super::network::{plan_network, JAVA_PROXY_PRELUDE};
use super::private::HiddenFile;
use crate::job::Trust;
use crate::workspace::WorkspacePaths;

// The rules' parts, each in the file of its step; here too, where the policy is read.
pub use super::env::{env_passes, EnvPolicy, PASSED_ENV};
pub use super::files::{system_denied_reads, SRT_SHARED_TMP};
pub use super::inputs::{Platform, PolicyInputs};
pub use super::network::{
    CaFiles, TrustFile, TrustVar, PROXY_VARS, READ_ONLY_METHODS, REGISTRIES, RETRY_VARS, TRUST_VARS,
};

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SandboxPolicy {
    pub platform: Platform,
    pub trust: Trust,
    /// Denied to every command...
    pub deny_read: Vec<PathBuf>,
    /// ...except these, which are read back inside the denied trees.
    pub allow_read: Vec<PathBuf>,
    /// The only places a command may write.
    pub allow_write: Vec<PathBuf>,
    /// Never writable, even inside `allow_write`.
    pub deny_write: Vec<PathBuf>,
    /// The runner's private files and the directories of `deny_read` that hide each, for
    /// audit: why a directory outside the system's is denied.
    pub private: Vec<HiddenFile>,
    /// Hosts commands may reach through the runner's proxy; empty means none.
    pub allowed_hosts: Vec<String>,
    /// Of `allowed_hosts`, the ones every method may be used on (the operator's
    /// `network.full_access_hosts`).
    pub full_access_hosts: Vec<String>,
    /// The methods every other allowed host answers (the registries): reads only, so a
    /// command can install but not publish, unpublish or mint a token.
    pub read_only_methods: Vec<String>,
    /// The job's CA, which the commands trust: the runner's proxy terminates their TLS to
    /// decide each request. Set whenever some host is reachable.
    pub ca: Option<CaFiles>,
    /// The port of the runner's proxy, once it runs (chosen at run time; `None` in
    /// `quest-runner policy`). Both agents' sandboxes send HTTP and SOCKS traffic there.
    pub proxy_port: Option<u16>,
    /// The agent's own file tools (read, edit, write, ...) run in the agent's process, outside
    /// the OS sandbox; when set, the adapter confines them to what `may_read`/`may_write`
    /// allow (Claude Code: permission rules; opencode: the runner's plugin).
    pub confine_file_tools: bool,
    /// Everything that acts for the job outside the commands' sandboxes (the agent's process
    /// and its file tools, the sandbox host of its commands) runs inside this policy rendered as a
    /// namespace ([`super::boundary`]). Linux only; off only in the suite's mutation check
    /// that proves the suite notices.
    pub confine_agent: bool,
    /// The environment of the agent and its commands.
    pub env: EnvPolicy,
    pub home: PathBuf,
    pub tmpdir: PathBuf,
    pub checkout: PathBuf,
    pub devshell_script: Option<PathBuf>,
    /// The store paths the job's namespace shows, the rest of the store absent
    /// ([`super::store`]); `None`: the whole store, which every user may read.
    pub store_view: Option<super::store::StoreView>,
    /// Which kernel answers the commands (config `isolation`, by trust level): the host's,
    /// behind srt's namespaces, or gVisor's inside them ([`super::gvisor`]).
    pub isolation: super::gvisor::Isolation,
}

/// Builds the policy. Pure: the private files' directories were resolved before.
pub fn plan(ws: &WorkspacePaths, inputs: &PolicyInputs) -> SandboxPolicy {
    let network = plan_network(ws, inputs);
    let mut allow_read = allowed_reads(ws);
    if let Some(ca) = &network.ca {
        allow_read.push(ca.cert.clone());
        allow_read.push(ca.bundle.clone());
        allow_read.push(ca.java_trust_store.clone());
    }
    SandboxPolicy {
        platform: inputs.platform,
        trust: inputs.trust,
        deny_read: denied_reads(ws, inputs),
        allow_read,
        allow_write: allowed_writes(ws),
        deny_write: denied_writes(ws),
        private: inputs.private.clone(),
        read_only_methods: READ_ONLY_METHODS.iter().map(|m| m.to_string()).collect(),
        env: planned_env(ws, network.ca.as_ref()),
        allowed_hosts: network.allowed_hosts,
        full_access_hosts: network.full_access_hosts,
        ca: network.ca,
        proxy_port: None,
        confine_file_tools: true,
        confine_agent: inputs.platform == Platform::Linux,
        home: ws.temp_dir.clone(),
        tmpdir: ws.temp_dir.clone(),
        checkout: ws.checkout.clone(),
        devshell_script: ws.devshell_script.clone(),
        store_view: None,
        isolation: super::gvisor::Isolation::Namespace,
    }
}

impl SandboxPolicy {
    /// The environment for the agent process (and so its commands), built from `source`
    /// (normally the runner's own environment) by the pass list, then `set`.
    pub fn environment<I>(&self, source: I) -> BTreeMap<String, String>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        let mut env: BTreeMap<String, String> = source
            .into_iter()
            .filter(|(k, _)| env_passes(&self.env.pass, k))
            .collect();
        env.extend(self.env.set.clone());
        env
    }

    /// Shell lines every command runs first, inside the sandbox and before the devShell: the
    /// package managers' proxy settings of [`PROXY_VARS`]. Empty when no host is reachable.
    pub fn command_prelude(&self) -> String {
        if self.ca.is_none() {
            return String::new();
        }
        let mut out = String::from(
            "# quest-runner: package managers use this sandbox's proxy, whatever their config files name\n",
        );
        for (var, from) in PROXY_VARS {
            out.push_str(&format!(
                "[ -z \"${{{from}:-}}\" ] || export {var}=\"${from}\"\n"
            ));
        }
        // The JVM reads no proxy variable, only properties: srt's own JVM agent sets them where
        // it is loaded; these are for a JVM started without it. Properties given here come
        // first; the agent's, later, win.
        out.push_str(JAVA_PROXY_PRELUDE);
        out
    }

    /// The text the agent's prompt carries about its network.
    pub fn network_summary(&self) -> String {
        if self.allowed_hosts.is_empty() {
            "Commands have no network access: no host can be reached.".to_string()
        } else if self.trust == Trust::Untrusted {
            format!(
                "Commands have no network access, but the dependencies the revision's lockfiles \
                 pin are served by the runner through a proxy, at their registries' addresses \
                 ({}): install them from the locks (npm ci, pip install --require-hashes -r, uv \
                 sync --frozen, cargo fetch --locked). Anything the locks do not pin is refused.",
                self.allowed_hosts.join(", ")
            )
        } else {
            let reads = self
                .allowed_hosts
                .iter()
                .filter(|h| !self.full_access_hosts.contains(h))
                .cloned()
                .collect::<Vec<_>>();
            let mut text = format!(
                "Commands reach only these hosts, through a proxy: {}. Every other host is refused.",
                self.allowed_hosts.join(", ")
            );
            if !reads.is_empty() {
                text.push_str(&format!(
                    " {} answer only {} (no publishing).",
                    reads.join(", "),
                    self.read_only_methods.join(" and ")
                ));
            }
            text
        }
    }

    /// Whether `path` is readable under the policy (deny with allow-backs), for tests and
    /// for the adapters' own checks of file-tool paths.
    pub fn may_read(&self, path: &Path) -> bool {
        let denied = self.deny_read.iter().any(|d| path.starts_with(d));
        !denied
            || self
                .allow_read
                .iter()
                .chain(&self.allow_write)
                .any(|a| path.starts_with(a))
    }

    /// Whether `path` is writable under the policy.
    pub fn may_write(&self, path: &Path) -> bool {
        self.allow_write.iter().any(|a| path.starts_with(a))
            && !self.deny_write.iter().any(|d| path.starts_with(d))
    }
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
