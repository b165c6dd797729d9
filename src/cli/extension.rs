//! What a subcommand handled outside this crate needs of the CLI. `selftest` lives in its
//! own crate (selftest/, `quest-runner-selftest`), which depends on this one to drive real
//! jobs, so this crate cannot call it: the binary (src/main.rs) hands its handler to
//! [`super::main`], and the handler prints, fails and waits through what is here, as every
//! other subcommand does.

pub use super::env::{print_shell, shell_json};
pub use super::runtime::runtime;
pub use super::{block_on_interruptible, out, Context, Failure, Format};

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
