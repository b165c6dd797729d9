//! What the agent is told about where it runs: the system prompt every job's agent gets,
//! with the revision's own instructions after it.

use crate::job::{Job, Trust};
use crate::sandbox::SandboxPolicy;

/// The system prompt of `job`'s agent: its checkout, temp dir, sandbox, network and devShell,
/// as the policy has them, then the revision's instructions.
pub(super) fn system_prompt(
    job: &Job,
    policy: &SandboxPolicy,
    devshell_attr: Option<&str>,
    instructions: &crate::instructions::Instructions,
) -> String {
    let devshell = match devshell_attr {
        Some(attr) => format!("The revision's devShell ({attr}) is loaded in every command."),
        None if job.trust == Trust::Untrusted => {
            "This revision is untrusted and its devShell is not built here (no job boundary for Nix on this system), so commands get only the base system.".into()
        }
        None => "This revision has no flake.nix, so commands get only the base system.".into(),
    };
    format!(
        "You are running as a quest-runner job on revision {rev}.\n\
         - Work in the checkout at {checkout} and commit your changes there with git: the \
         job's result is the commits you make.\n\
         - HOME and TMPDIR are {tmp}, private to this job and deleted when it ends.\n\
         - Every command runs in a sandbox: it reads the checkout, its git data, its temp \
         directory and the system, and writes only the checkout and the temp directory.\n\
         - Network: {network}\n\
         - {devshell} There is no Nix daemon in the sandbox: `nix build` and `nix flake \
         check` do not work in jobs; CI runs them.\n{instructions}",
        rev = job.rev,
        checkout = policy.checkout.display(),
        tmp = policy.tmpdir.display(),
        network = policy.network_summary(),
        instructions = instructions.prompt_section(),
    )
}
