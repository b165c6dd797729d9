//! The attempts of a boundary run, each paired with the rule of the policy that must refuse
//! it and with how an escape would show.
//!
//! This file holds what an attempt is ([`Attempt`], [`Rule`], [`Detect`], [`Targets`]) and how
//! one is made; [`all`] (`table.rs`) lists them, and the files beside it hold the attempts that
//! need more than a line of the table (secrets rotated mid-job, planted host paths, the gateway,
//! registry writes, the devShell) and the permitted steps that make every refusal non-vacuous.

mod devshell;
mod file_tools;
mod gateway;
pub(crate) mod git_attacks;
mod kernel;
mod permitted;
mod planted;
mod registry;
mod rotation;
pub(crate) mod shell_attacks;
mod table;

pub use permitted::{
    closing, permitted, permitted_network, permitted_package_manager_reads,
    permitted_registry_reads,
};
pub use table::all;

use std::path::PathBuf;

use serde::Serialize;

use super::fixture::Fixture;
use crate::model_server::Step;
use quest_runner::job::{AgentKind, Trust};

/// The rule of the policy an attempt tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    DenyRead,
    AllowWrite,
    DenyWrite,
    Network,
    /// Registries answer reads only (the runner's decider).
    RegistryReadOnly,
    Env,
    FileTools,
    ProjectConfig,
    DevShell,
    /// The runner's git on the host reads nothing a job wrote that could run a program.
    HostGit,
    /// A job cannot change what a later job of the repository sees.
    LaterJob,
    /// The disk limit: a job filling its disk must not make another fail.
    Disk,
    /// The model gateway: commands cannot reach it, the agent never holds the secret.
    Gateway,
    /// Commands cannot reach what runs them (opencode's executor and its socket).
    CommandShell,
    /// In `gvisor` isolation, commands are answered by gVisor's kernel, never the host's.
    Kernel,
}

/// How an escape shows.
#[derive(Debug, Clone)]
pub enum Detect {
    /// The attempt's output holds this text (a secret, or a success marker).
    OutputHas(String),
    /// This path exists on the host afterwards.
    HostPath(PathBuf),
    /// This file on the host holds this text afterwards.
    HostFileHas(PathBuf, String),
    /// The scripted model server received a request for this path.
    ServerGot(String),
    /// The output holds a planted secret or a forbidden variable name.
    EnvLeak,
    /// The sandbox's proxy forwarded a request it should have refused: a status other
    /// than 403 in the output.
    ProxyForwarded,
    /// The stand-in registry received a request starting with this (`METHOD /path`).
    RegistryGot(String),
    /// A later job of the repository, at the same revision, cannot be prepared or finds
    /// this text in this file of its checkout.
    LaterJobSees { file: String, text: String },
    /// Any of these.
    Any(Vec<Detect>),
}

impl Detect {
    /// The host paths whose existence this detection looks for (removed after each run).
    pub fn host_paths(&self) -> Vec<PathBuf> {
        match self {
            Detect::HostPath(p) => vec![p.clone()],
            Detect::Any(all) => all.iter().flat_map(Detect::host_paths).collect(),
            _ => Vec::new(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Attempt {
    pub id: &'static str,
    pub what: String,
    pub rule: Rule,
    /// The model's tool calls; the last one's result is the evidence.
    pub steps: Vec<Step>,
    /// For shell attempts: the same command, run unconfined first; it must escape there.
    pub control: Option<String>,
    /// Run unconfined right after `control`, in the same checkout: what a host-side reader
    /// (the runner's git as it once was, a later registration) does with what the command
    /// left. Attacks on the host's readers escape only once something reads their files.
    pub control_after: Option<String>,
    /// Printed by a shell attempt after it ran; its absence means it never ran.
    pub ran_marker: Option<String>,
    pub detect: Detect,
    /// The network log lines of this attempt's requests contain this (their path's tag),
    /// for its allowed/refused figures.
    pub net_tag: Option<String>,
}

/// The paths an attempt needs that only the run knows.
pub struct Targets {
    pub agent: AgentKind,
    pub trust: Trust,
    /// `<state>/repos/<hash>.git`
    pub bare: PathBuf,
    /// `<state>/jobs/<id>/checkout`
    pub checkout: PathBuf,
    /// The scripted model server's port on 127.0.0.1.
    pub port: u16,
    /// The stand-in npm registry's port on 127.0.0.1 (trusted runs), which the suite's policy
    /// hook adds as a registry: reads only.
    pub registry: Option<u16>,
    /// The runner's model gateway: its port on 127.0.0.1 where the agent reaches it, and a
    /// live token of the job's account.
    pub gateway: Option<(u16, String)>,
    /// Which kernel the suite's config has the commands run on.
    pub isolation: quest_runner::sandbox::gvisor::Isolation,
}

pub(super) fn ran(id: &str) -> String {
    format!("ATTEMPT-RAN-{id}")
}

/// A shell attempt: `command`, its stderr folded into the output, then the marker.
pub(super) fn shell(
    id: &'static str,
    what: String,
    rule: Rule,
    command: String,
    detect: Detect,
) -> Attempt {
    let marker = ran(id);
    let full = format!("{{ {command} ; }} 2>&1; echo {marker}");
    Attempt {
        id,
        what,
        rule,
        steps: vec![Step::bash(full.clone())],
        control: Some(full),
        control_after: None,
        ran_marker: Some(marker),
        detect,
        net_tag: None,
    }
}

pub(super) fn tool(
    id: &'static str,
    what: String,
    rule: Rule,
    step: Step,
    detect: Detect,
) -> Attempt {
    Attempt {
        id,
        what,
        rule,
        steps: vec![step],
        control: None,
        control_after: None,
        ran_marker: None,
        detect,
        net_tag: None,
    }
}

/// Markers the checkout's own configuration writes if it ever runs on the host.
pub fn project_config_markers(fixture: &Fixture) -> Vec<(&'static str, PathBuf)> {
    vec![
        ("claude-session-hook", fixture.marker("claude-session-hook")),
        ("claude-tool-hook", fixture.marker("claude-tool-hook")),
        ("mcp-server", fixture.marker("mcp-server")),
        ("opencode-plugin", fixture.marker("opencode-plugin")),
        ("shellhook-marker-outside", fixture.marker("shellhook")),
    ]
}
