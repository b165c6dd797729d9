//! `quest-runner systemd-unit` and `quest-runner apparmor-profile`: the deployment files of
//! [`crate::deploy`], printed, and its errors as exit codes.

use std::path::PathBuf;

use super::Failure;
use crate::deploy::DeployError;
use crate::exit::Exit;

impl From<DeployError> for Failure {
    fn from(e: DeployError) -> Failure {
        let code = match &e {
            // What the operator passed, or chose through QUEST_RUNNER_BWRAP.
            DeployError::UnitValue { .. } | DeployError::ProfilePath { .. } => Exit::BadInput,
            // The host lacks something: bwrap, or a readable path to ourselves.
            DeployError::CurrentExe(_)
            | DeployError::Bwrap(_)
            | DeployError::Canonicalize { .. } => Exit::HostNotReady,
            DeployError::Settings(_) => Exit::Failed,
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
    #[arg(long, default_value = crate::deploy::systemd::DEFAULT_USER)]
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
        None => crate::deploy::systemd::default_exec()?,
    };
    let unit = crate::deploy::systemd::render(&crate::deploy::systemd::UnitParams {
        exec,
        user: args.user.clone(),
        group: args.group.clone().unwrap_or_else(|| args.user.clone()),
        environment_file: args.environment_file.clone(),
    })?;
    super::out_raw(&unit)?;
    Ok(())
}

/// Prints the AppArmor profile for the bwrap this installation resolves.
pub fn apparmor_profile_command() -> Result<(), Failure> {
    let programs = crate::deploy::apparmor::Programs::resolved()?;
    super::out_raw(crate::deploy::apparmor::render(&programs)?)?;
    Ok(())
}
