//! The seams a [`super::Runner`] offers its callers: the [`AgentEnclosure`] a caller puts
//! around each job's agent (`serve`'s limits and per-job cgroups), and the boundary suite's
//! [`RunHooks`]. A plain `quest-runner run` has neither.

use std::process::Command;
use std::sync::Arc;

use crate::sandbox::SandboxPolicy;

/// Adjusts the agent's command before it starts.
pub use crate::process::CommandHook;

/// What a caller puts around each job: set up before its devShell is built, ended once every
/// process of the job is stopped, with what it counted returned through the run
/// ([`super::Runner::run_enclosed`]). `serve`'s: a parent-death signal and rlimits on every
/// process started for the job, and the job's cgroup, whose counters name the limit that
/// fired.
pub trait AgentEnclosure: Send + Sync {
    /// Held while the job's processes run. Dropped without [`AgentEnclosure::finish`] (a
    /// cancelled job) it must still release what it holds.
    type Guard: Send;
    /// What [`AgentEnclosure::finish`] says of the job's run.
    type Report: Send;
    /// Why [`AgentEnclosure::enter`] refused the agent; the job's message says it.
    type Error: std::fmt::Display;

    /// Applied to every process the runner starts for the job from its devShell on: nix and
    /// the daemon that builds it, the agent, the companion that runs its commands, the
    /// network bridges.
    fn adjust(&self) -> Option<CommandHook>;

    /// Once job `job_id`'s workspace is ready, before its devShell is built: the guard, and
    /// the hook that places every process [`AgentEnclosure::adjust`] applies to (`serve`: in
    /// the job's cgroup, so its builds count against its limits as its agent does). An error
    /// fails the job before anything of it runs.
    fn enter(&self, job_id: &str) -> Result<(Self::Guard, Option<CommandHook>), Self::Error>;

    /// Once every process of the job is stopped (its agent's tree, its devShell's daemon).
    fn finish(&self, guard: Self::Guard) -> Self::Report;
}

/// `first`, then `then`, on each command.
pub(super) fn chain(first: Option<CommandHook>, then: Option<CommandHook>) -> Option<CommandHook> {
    match (first, then) {
        (Some(first), Some(then)) => Some(Arc::new(move |cmd: &mut Command| {
            first(cmd);
            then(cmd);
        })),
        (first, then) => first.or(then),
    }
}

/// No enclosure: `quest-runner run`, the boundary suite.
pub struct Unenclosed;

impl AgentEnclosure for Unenclosed {
    type Guard = ();
    type Report = ();
    type Error = std::convert::Infallible;

    fn adjust(&self) -> Option<CommandHook> {
        None
    }

    fn enter(&self, _: &str) -> Result<((), Option<CommandHook>), Self::Error> {
        Ok(((), None))
    }

    fn finish(&self, (): ()) {}
}

/// Changes a job's policy before it is rendered.
pub type PolicyHook = Arc<dyn Fn(&mut SandboxPolicy) + Send + Sync>;

/// Seams for the boundary suite (`selftest` and its tests); empty in normal runs, and not
/// reachable from the command line or the config file. What production callers put around a
/// job is an [`AgentEnclosure`].
#[derive(Clone, Default)]
pub struct RunHooks {
    /// Adjusts the agent's command before it starts: the suite confines the agent to the
    /// scripted model's network namespace.
    pub agent_command: Option<CommandHook>,
    /// Changes the policy before it is rendered: each mutation check weakens one rule to
    /// prove the suite notices.
    pub policy: Option<PolicyHook>,
    /// Binds the network proxy's listening socket (default: `127.0.0.1:0`); the suite binds
    /// it in the scripted model's network namespace.
    pub proxy_listener: Option<Arc<crate::netproxy::job::BindListener>>,
    /// Adjusts the network proxy's command before it starts: the suite runs it in the scripted
    /// model's network namespace (its upstream is a stand-in there), while `selftest
    /// --registries` leaves it on the host's network, to reach the real registries, with its
    /// listening socket in the namespace.
    pub proxy_command: Option<CommandHook>,
    /// Binds the model gateway's listening socket (default: `127.0.0.1:0`): the suite binds
    /// it where its confined agents reach it.
    pub gateway_listener: Option<Arc<crate::netproxy::job::BindListener>>,
    /// Runs in the agent's mount namespace as it is made (`workspace::namespace`): the suite
    /// plants the company machine's package-manager configuration there.
    pub agent_mounts: Option<crate::workspace::namespace::PlantHook>,
    /// Where the runner's dependency fetcher reaches the fixed registries' names (a
    /// stand-in on loopback) and the CA it trusts there: the tests' registries that serve a
    /// wrong hash or an endless file.
    pub dep_upstreams: Option<crate::deps::Upstreams>,
}
