//! Claude Code's seccomp stage, moved onto srt's helper.
//!
//! Claude Code's native build is its own seccomp helper: the script its bwrap runs ends in
//! `ARGV0=apply-seccomp /proc/self/fd/3 <shell> -c <command>`, descriptor 3 being Claude Code's
//! own executable, which then makes the command's user, PID and mount namespaces and loads
//! the filter. Under AppArmor's user-namespace restriction (Ubuntu 24.04+) only a profile may
//! grant that, and only by the executable's path — which is also the agent's, executed from
//! the same labels (a command that runs Claude Code looks the same to AppArmor as the stage
//! does). Granting the stage would grant every command a user namespace through Claude Code.
//! srt's helper is the same program with a path of its own, which the profile grants
//! (nix/apparmor/quest-runner-bwrap.in), so the stage runs that instead:
//!
//! ```text
//!  claude ─> <job dir>/claude-bin/bwrap (first on its PATH)   a script: the runner's binary, [`FLAG`]
//!              └ puts the runner's binary on descriptor 3 where Claude Code's was, sets
//!                [`HELPER_VAR`] ─> bwrap ─> Claude's script ─> ARGV0=apply-seccomp /proc/self/fd/3
//!                    └ the runner's binary ([`stage`]): drops ARGV0 and HELPER_VAR ─> srt's
//!                      apply-seccomp <shell> -c <command>
//! ```
//!
//! On the way, the bwrap mode drops the mounts of Claude Code's line that a later one repeats
//! (`bwrap_args`): the same view, built with fewer mounts.
//!
//! Both helpers take the same arguments and make the same namespaces and filters; srt's keeps
//! `ARGV0` in the command's environment (Claude Code's drops it), and zsh would take it as the
//! name of every program it runs, so the stage drops it first.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::util::shell::quote;

/// The runner's bwrap mode: `<runner> --quest-bwrap <bwrap> <agent> <helper> <bwrap args>...`.
pub const FLAG: &str = "--quest-bwrap";

/// The `ARGV0` Claude Code sets for its seccomp stage.
pub const ARGV0: &str = "apply-seccomp";

/// srt's helper, for the stage: set by the bwrap mode, removed by the stage (the variable
/// that names it to the runner, too).
pub const HELPER_VAR: &str = crate::binaries::APPLY_SECCOMP_VAR;

/// The descriptor Claude Code runs its stage from.
const STAGE_FD: i32 = 3;

/// Exit status when neither mode can start its program (as a shell's "cannot execute").
const CANNOT_EXECUTE: u8 = 126;

/// What the job's bwrap script names, all absolute.
#[derive(Debug, Clone, PartialEq)]
pub struct BwrapShim {
    /// The runner's binary: the bwrap mode, and the stage it puts on descriptor 3.
    pub runner: PathBuf,
    /// The bwrap Claude Code would have run.
    pub bwrap: PathBuf,
    /// srt's seccomp helper.
    pub helper: PathBuf,
}

impl BwrapShim {
    /// The shim for this installation: the runner's binary, bwrap (`QUEST_RUNNER_BWRAP`, else
    /// `PATH`) and srt's helper ([`crate::binaries::apply_seccomp`]).
    pub fn resolve() -> Result<BwrapShim, String> {
        use crate::binaries::{self, Tool};
        let helper = binaries::apply_seccomp().map_err(|e| {
            format!("Claude Code jobs start each command through srt's seccomp helper: {e}")
        })?;
        Ok(BwrapShim {
            runner: super::runner_binary()?,
            bwrap: binaries::find(Tool::Bwrap).map_err(|e| e.to_string())?,
            helper,
        })
    }

    /// The script Claude Code runs as bwrap; `agent`: Claude Code's executable, whose
    /// descriptor the runner's replaces.
    pub fn script(&self, agent: &Path) -> String {
        let q = |p: &Path| quote(&p.to_string_lossy());
        format!(
            "#!/bin/sh\n# Claude Code's bwrap (first on its PATH): src/jobshell/seccomp_stage.rs\nexec {} {FLAG} {} {} {} \"$@\"\n",
            q(&self.runner),
            q(&self.bwrap),
            q(agent),
            q(&self.helper)
        )
    }
}

/// Runs the bwrap mode or the stage if this process was started as one.
pub fn dispatch() -> Option<ExitCode> {
    if std::env::var_os("ARGV0").as_deref() == Some(OsStr::new(ARGV0)) {
        let helper = std::env::var_os(HELPER_VAR)?;
        return Some(stage(Path::new(&helper)));
    }
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some(OsStr::new(FLAG)) {
        return None;
    }
    let (Some(bwrap), Some(agent), Some(helper)) = (args.next(), args.next(), args.next()) else {
        eprintln!("quest-runner: {FLAG} <bwrap> <agent> <helper> <bwrap arguments>...");
        return Some(ExitCode::from(CANNOT_EXECUTE));
    };
    Some(bwrap_mode(
        (Path::new(&bwrap), Path::new(&agent), Path::new(&helper)),
        args.collect(),
    ))
}

/// Puts this binary where Claude Code's executable is on descriptor 3 (when it is: Claude
/// Code also runs bwrap for probes and `--version`), then becomes bwrap.
fn bwrap_mode((bwrap, agent, helper): (&Path, &Path, &Path), args: Vec<OsString>) -> ExitCode {
    if let Err(e) = replace_stage_fd(agent) {
        eprintln!("quest-runner: Claude Code's seccomp stage: {e}");
        return ExitCode::from(CANNOT_EXECUTE);
    }
    // The same view with fewer mounts: each costs every command (`bwrap_args`).
    let e = std::process::Command::new(bwrap)
        .args(super::bwrap_args::without_repeats(args))
        .env(HELPER_VAR, helper)
        .exec();
    eprintln!("quest-runner: starting {}: {e}", bwrap.display());
    ExitCode::from(CANNOT_EXECUTE)
}

/// Descriptor 3, when it is `agent`'s executable, becomes this binary's (still without
/// close-on-exec: bwrap and the script pass it on; the script closes it before the command).
fn replace_stage_fd(agent: &Path) -> Result<(), String> {
    let held = Path::new("/proc/self/fd").join(STAGE_FD.to_string());
    let Ok(held) = std::fs::metadata(held) else {
        return Ok(()); // not open
    };
    let agent = std::fs::metadata(agent).map_err(|e| format!("{}: {e}", agent.display()))?;
    if (held.dev(), held.ino()) != (agent.dev(), agent.ino()) {
        return Ok(());
    }
    let own = rustix::fs::open(
        "/proc/self/exe",
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| format!("opening the runner's binary: {e}"))?;
    // SAFETY: descriptor 3 is open (its file was just read through /proc/self/fd) and this
    // mode is single-threaded; it is replaced, never closed (`forget`): it is Claude Code's.
    let mut target = unsafe { OwnedFd::from_raw_fd(STAGE_FD) };
    let replaced = rustix::io::dup2(own.as_fd(), &mut target);
    std::mem::forget(target);
    replaced.map_err(|e| format!("putting the runner's binary on descriptor {STAGE_FD}: {e}"))
}

/// The stage: srt's helper with the same arguments, without the two variables.
fn stage(helper: &Path) -> ExitCode {
    let e = std::process::Command::new(helper)
        .arg0(ARGV0)
        .args(std::env::args_os().skip(1))
        .env_remove("ARGV0")
        .env_remove(HELPER_VAR)
        .exec();
    eprintln!("quest-runner: starting {}: {e}", helper.display());
    ExitCode::from(CANNOT_EXECUTE)
}

#[cfg(test)]
#[path = "seccomp_stage_tests.rs"]
mod tests;
