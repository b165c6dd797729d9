//! Deployment files for hosts that run quest-runner as a service: the systemd unit
//! (`quest-runner systemd-unit`) and the AppArmor profile for bubblewrap
//! (`quest-runner apparmor-profile`).
//!
//! Both are rendered from files under `nix/` that the NixOS module reads too
//! (`nix/service-hardening.json`, `nix/apparmor/quest-runner-bwrap.in`), so a host without
//! NixOS gets the same unit and profile as one with it.

pub mod apparmor;
pub mod systemd;

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    /// A bug in the shipped file, caught by the unit tests; never the operator's input.
    #[error("the unit settings shipped in nix/service-hardening.json are invalid: {0}")]
    Settings(#[source] serde_json::Error),
    #[error("{what} {value:?} cannot be written into a systemd unit: {reason}")]
    UnitValue {
        what: &'static str,
        value: String,
        reason: &'static str,
    },
    #[error("cannot find this program's own path (give --exec): {0}")]
    CurrentExe(#[source] std::io::Error),
    #[error(transparent)]
    Bwrap(#[from] crate::binaries::BinaryError),
    #[error("cannot resolve bwrap at {path}: {source}")]
    Canonicalize {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} cannot be named in an AppArmor profile: {reason}")]
    ProfilePath { path: PathBuf, reason: &'static str },
}
