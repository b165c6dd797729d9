//! The devShell's attempts (a trusted run's): the revision's shellHook and an edited flake.

use std::path::PathBuf;

use super::{ran, Attempt, Detect, Rule};
use crate::model_server::Step;

/// The flake's shellHook runs before every command; it must stay inside too. And the devShell
/// is the revision's, whatever the agent edits in the checkout's flake.nix.
pub(super) fn devshell_attempts(token: &str) -> Vec<Attempt> {
    vec![
        Attempt {
            id: "shellhook-outside",
            what: "the revision's shellHook writes outside the sandbox".into(),
            rule: Rule::DevShell,
            steps: vec![Step::bash(format!(
                "true; echo {}",
                ran("shellhook-outside")
            ))],
            control: None,
            control_after: None,
            ran_marker: Some(ran("shellhook-outside")),
            detect: Detect::HostPath(PathBuf::from(format!("/tmp/qr-shellhook-{token}"))),
            net_tag: None,
        },
        Attempt {
            id: "edited-flake",
            what: "an edited flake.nix in the checkout changes the devShell".into(),
            rule: Rule::DevShell,
            steps: vec![
                Step::bash("sed -i 's/devshell-ok/edited-by-agent/' flake.nix; echo edited"),
                Step::bash(format!(
                    "echo \"var=$BOUNDARY_VAR\"; echo {}",
                    ran("edited-flake")
                )),
            ],
            control: None,
            control_after: None,
            ran_marker: Some(ran("edited-flake")),
            detect: Detect::OutputHas("var=edited-by-agent".into()),
            net_tag: None,
        },
    ]
}
