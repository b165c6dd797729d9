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

use crate::cli::Failure;

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
    #[error("bwrap's path {path} cannot be an AppArmor attachment: {reason}")]
    ProfilePath { path: PathBuf, reason: &'static str },
}

impl From<DeployError> for Failure {
    fn from(e: DeployError) -> Failure {
        let code = match &e {
            // What the operator passed, or chose through QUEST_RUNNER_BWRAP.
            DeployError::UnitValue { .. } | DeployError::ProfilePath { .. } => 2,
            // The host lacks something: bwrap, or a readable path to ourselves.
            DeployError::CurrentExe(_)
            | DeployError::Bwrap(_)
            | DeployError::Canonicalize { .. } => 3,
            DeployError::Settings(_) => 1,
        };
        Failure::new(code, e)
    }
}

/// `quest-runner systemd-unit`.
#[derive(Debug, clap::Args)]
pub struct SystemdUnitArgs {
    /// The quest-runner the unit starts [default: $QUEST_RUNNER_EXE, which the Nix package
    /// sets to its wrapper, else this program]. Give a path that survives upgrades and
    /// garbage collection, e.g. /nix/var/nix/profiles/quest-runner/bin/quest-runner.
    #[arg(long, value_name = "PATH")]
    pub exec: Option<PathBuf>,
    /// The system user the service runs as.
    #[arg(long, default_value = systemd::DEFAULT_USER)]
    pub user: String,
    /// Its group [default: the user's name].
    #[arg(long)]
    pub group: Option<String>,
    /// A file of KEY=VALUE lines for the service's environment (e.g. RUST_LOG).
    #[arg(long, value_name = "FILE")]
    pub environment_file: Option<PathBuf>,
}

/// Prints the unit for `args` on stdout.
pub fn systemd_unit_command(args: &SystemdUnitArgs) -> Result<(), Failure> {
    let exec = match &args.exec {
        Some(path) => path.clone(),
        None => systemd::default_exec()?,
    };
    let unit = systemd::render(&systemd::UnitParams {
        exec,
        user: args.user.clone(),
        group: args.group.clone().unwrap_or_else(|| args.user.clone()),
        environment_file: args.environment_file.clone(),
    })?;
    crate::cli::out_raw(&unit)?;
    Ok(())
}

/// Prints the AppArmor profile for the bwrap this installation resolves.
pub fn apparmor_profile_command() -> Result<(), Failure> {
    let bwrap = apparmor::resolved_bwrap()?;
    crate::cli::out_raw(apparmor::render(&bwrap)?)?;
    Ok(())
}
