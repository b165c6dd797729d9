//! What a subcommand handled outside this crate needs of the CLI. `selftest` lives in its
//! own crate (selftest/, `quest-runner-selftest`), which depends on this one to drive real
//! jobs, so this crate cannot call it: the binary (src/main.rs) hands its handler to
//! [`super::main`], and the handler prints, fails and waits through what is here, as every
//! other subcommand does.

pub use super::env::{print_shell, shell_json};
pub use super::runtime::runtime;
pub use super::{block_on_interruptible, out, Context, Failure, Format};
use crate::sandbox::gvisor::Isolation;

/// What `selftest` runs, as parsed from its arguments.
#[derive(Debug, Clone)]
pub struct SelftestOptions {
    /// The agents to run the boundary suite with.
    pub agents: Vec<crate::job::AgentKind>,
    /// Also run the suite on an untrusted revision (no network, no devShell).
    pub untrusted: bool,
    /// Also run the mutation checks: each weakens one rule and must be caught.
    pub mutations: bool,
    /// Only the real-registry reads, instead of everything else.
    pub registries: bool,
    /// How long each suite job may run.
    pub job_timeout: std::time::Duration,
    /// The kernel the suite's commands run on.
    pub isolation: crate::sandbox::gvisor::Isolation,
}

/// The `selftest` subcommand's handler: `quest_runner_selftest::command::run`.
pub type Selftest = fn(&Context, &SelftestOptions) -> Result<(), Failure>;

#[derive(Debug, clap::Args)]
pub struct SelftestArgs {
    /// Only this agent (claude or opencode) [default: both].
    #[arg(long)]
    agent: Option<String>,
    /// Also run the suite on an untrusted revision.
    #[arg(long)]
    untrusted: bool,
    /// Also run the mutation checks (each weakens one rule; all must be caught).
    #[arg(long)]
    mutations: bool,
    /// Instead of the above: read small packages from the real npm registry, PyPI and
    /// crates.io with the host's clients, in a trusted job, through the network decider (reads
    /// only; skipped when the host has no route to them).
    #[arg(long, conflicts_with_all = ["untrusted", "mutations"])]
    registries: bool,
    /// How long each suite job may run: more on a slow host (an emulated CPU).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = humantime::parse_duration)]
    job_timeout: std::time::Duration,
    /// The kernel the suite's commands run on (config `isolation`): `gvisor` runs the suite on
    /// both a trusted and an untrusted revision, with the attempts only another kernel holds.
    #[arg(long, value_name = "ISOLATION", default_value = "namespace", value_parser = Isolation::parse)]
    isolation: Isolation,
}

impl SelftestArgs {
    /// The options the suite's handler reads, or why the flags are wrong.
    pub(super) fn options(&self) -> Result<SelftestOptions, Failure> {
        use crate::job::AgentKind;
        let agents = match self.agent.as_deref() {
            None => vec![AgentKind::Claude, AgentKind::Opencode],
            Some("claude") => vec![AgentKind::Claude],
            Some("opencode") => vec![AgentKind::Opencode],
            Some(other) => {
                return Err(Failure::new(
                    crate::exit::Exit::BadInput,
                    format!("--agent {other:?}: expected claude or opencode"),
                ))
            }
        };
        Ok(SelftestOptions {
            agents,
            untrusted: self.untrusted || self.isolation == Isolation::Gvisor,
            mutations: self.mutations,
            registries: self.registries,
            job_timeout: self.job_timeout,
            isolation: self.isolation,
        })
    }
}
