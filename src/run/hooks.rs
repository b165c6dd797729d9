//! The seams a [`super::Runner`] offers its callers: `serve`'s per-job cgroups and limits, and
//! the boundary suite's confinement and mutations. Empty in a plain `quest-runner run`.

use std::sync::Arc;

use crate::sandbox::SandboxPolicy;

/// Adjusts the agent's command before it starts.
pub use crate::process::CommandHook;
/// Called with a job's id just before its agent starts: adjusts the commands (the agent's, and
/// the companion's that runs its commands, opencode's sandbox host), and returns
/// what is kept until the agent's whole process tree has been stopped and then dropped
/// (`serve` places the agent in the job's cgroup, and the dropped value kills and removes
/// that group). An error fails the job before the agent starts.
pub type JobAgentHook = Arc<
    dyn Fn(&str, &mut [&mut std::process::Command]) -> Result<Box<dyn std::any::Any + Send>, String>
        + Send
        + Sync,
>;
/// Changes a job's policy before it is rendered.
pub type PolicyHook = Arc<dyn Fn(&mut SandboxPolicy) + Send + Sync>;

/// Seams for the boundary suite (`selftest` and its tests); empty in normal runs, and not
/// reachable from the command line or the config file.
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
}
