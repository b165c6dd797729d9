//! The agents' commands, run in one sandbox per job.
//!
//! Every command of an agent's shell tool runs through the runner's binary: opencode's shell
//! (opencode has no sandbox of its own), Claude Code's command prefix (its own sandbox, remade
//! for every command, is off: `crate::agent::claude`). Starting `srt` for each (Node, settings, the deny-path scan, bridges,
//! bubblewrap, srt's relays, its seccomp helper) cost ~0.4 s a command. Here the work srt does
//! once per job happens once per job, and a command costs what must happen per command:
//!
//! ```text
//!  runner ── starts ──> sandbox host (node, srt's library)          host.rs, sandbox-host.mjs
//!                         │ srt: settings, bridges, deny-path scan, bubblewrap
//!                         └─> bwrap ─> srt's relays; the executor   executor.rs
//!  opencode ─ runs ─> quest-shell -c <command>  (the runner's binary) client.rs
//!  claude ── runs ─> quest-command <command>   (the same, by another name)
//!                         │ the job's socket: command, workdir, stdin/stdout/stderr   wire.rs
//!                         └──────────────> executor ─> srt's apply-seccomp ─> bash -c <command>
//! ```
//!
//! The sandbox is srt's, made by srt's library from the same settings as before; the executor
//! sits where srt puts its seccomp helper (after the network relays, before the filter) and
//! starts that same helper for each command, which gives the command srt's AF_UNIX filter and
//! its own user, PID and mount namespaces. The executor's socket is bound by the runner in the
//! job's private directory, which no command can read, and the helper's filter refuses the
//! AF_UNIX socket a command would need to reach it anyway; the boundary suite tries
//! (`shell-socket`).

pub mod client;
pub mod executor;
pub mod fingerprint;
pub mod host;
pub mod wire;

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::ExitCode;

/// Names this binary's other modes, chosen before the command line is parsed: srt runs the
/// executor with `ARGV0` set, opencode runs its shell through a link named [`client::NAME`],
/// Claude Code its command prefix through one named [`client::PREFIX_NAME`].
pub fn dispatch() -> Option<ExitCode> {
    if std::env::var_os("ARGV0").as_deref() == Some(OsStr::new(executor::ARGV0)) {
        return Some(executor::main());
    }
    let mut args = std::env::args_os();
    let argv0 = PathBuf::from(args.next()?);
    let name = argv0.file_name();
    if name == Some(OsStr::new(client::NAME)) || name == Some(OsStr::new(client::PREFIX_NAME)) {
        return Some(client::main(&argv0, args.collect()));
    }
    None
}

/// The variable naming the runner's binary for the agents' shell and the executor, for
/// programs that embed the runner (its tests); others need not set it.
pub const SELF_VAR: &str = "QUEST_RUNNER_SELF";

/// The runner's own binary: the agents' shell and the executor are modes of it.
pub fn runner_binary() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(SELF_VAR).filter(|v| !v.is_empty()) {
        let path = PathBuf::from(path);
        return std::fs::canonicalize(&path)
            .map_err(|e| format!("{SELF_VAR} is set to {}: {e}", path.display()));
    }
    let exe = std::env::current_exe().map_err(|e| format!("finding the runner's binary: {e}"))?;
    let exe = replaced(exe);
    // A program that embeds the runner as a library (a test) has modes of its own, not these.
    let is_runner = exe
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.contains("quest-runner"));
    if !is_runner {
        return Err(format!(
            "the agents' commands go through quest-runner's own binary, and {} is not it: set {SELF_VAR}",
            exe.display()
        ));
    }
    Ok(exe)
}

/// A `serve` whose binary was replaced while it runs (a package upgrade, a rebuild) finds
/// itself at `<path> (deleted)`, where nothing can be started: every job's bridges and
/// the agents' shell would fail until a restart. The binary now at `<path>` is the one to
/// start; its modes are the runner's (an upgrade is applied to jobs as they start).
fn replaced(exe: PathBuf) -> PathBuf {
    if exe.exists() {
        return exe;
    }
    let text = exe.to_string_lossy();
    match text.strip_suffix(" (deleted)").map(PathBuf::from) {
        Some(path) if path.exists() => path,
        _ => exe,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_binary_is_found_at_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("quest-runner");
        std::fs::write(&path, "").unwrap();
        let deleted = PathBuf::from(format!("{} (deleted)", path.display()));
        assert_eq!(replaced(deleted), path);
        assert_eq!(replaced(path.clone()), path);
        let gone = dir.path().join("gone (deleted)");
        assert_eq!(replaced(gone.clone()), gone);
    }
}
