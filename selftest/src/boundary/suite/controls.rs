//! The unconfined controls, run before the job: each attempt's command must escape when
//! nothing confines it, or its refusal inside the sandbox proves nothing; and the controls
//! that run a job's own files on the host side (shellHook, rotation).

use super::setup::control_checkout;
use super::verdicts::{detect, Seen};
use crate::boundary::attempts::git_attacks::ControlUndo;
use crate::boundary::attempts::{Attempt, Targets};
use crate::boundary::fixture::Fixture;
use crate::boundary::report::ControlReport;
use crate::model_server::ModelServer;
use crate::npm_registry::NpmRegistry;
use quest_runner::job::AgentKind;
use quest_runner::lockfile::LockFile;
use quest_runner::run::JobResult;
use quest_runner::state::StateDir;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// What the unconfined controls run against: the attempts and what they target, and the
/// servers and environment the job will have.
#[derive(Clone, Copy)]
pub(super) struct ControlSetup<'a> {
    pub(super) fixture: &'a Fixture,
    pub(super) targets: &'a Targets,
    pub(super) attempts: &'a [Attempt],
    pub(super) server: &'a ModelServer,
    pub(super) registry: Option<&'a NpmRegistry>,
    pub(super) env_source: &'a [(String, String)],
}

/// Each shell attempt, run unconfined from a worktree of the same bare clone, must escape
/// (`results`: whether each did, by the attempt's index); then its effects are undone before
/// the next one, and before the job runs.
pub(super) fn run_controls(
    setup: ControlSetup<'_>,
    results: &mut [Option<bool>],
    controls: &mut Vec<ControlReport>,
) -> Result<(), String> {
    let worktree = ControlWorktree::open(setup)?;
    // What the attempts on opencode's executor aim at unconfined (the job's is not up yet).
    let _executor = match setup.targets.agent {
        AgentKind::Opencode => {
            Some(crate::boundary::attempts::shell_attacks::ControlExecutor::start(setup.fixture)?)
        }
        AgentKind::Claude => None,
    };
    let mut all_escaped = true;
    for (i, a) in setup.attempts.iter().enumerate() {
        let Some(command) = &a.control else { continue };
        let escaped = worktree.escapes(a, command)?;
        results[i] = Some(escaped);
        all_escaped &= escaped;
        worktree.undo(a);
    }
    // Held until the report is made, as the controls' worktree is pruned under it.
    let _locked = worktree.close()?;
    controls.push(escaped_control(setup.attempts, results, all_escaped));
    Ok(())
}

/// The control of all controls: every attempt with an unconfined form escaped unconfined.
fn escaped_control(
    attempts: &[Attempt],
    results: &[Option<bool>],
    all_escaped: bool,
) -> ControlReport {
    let failed: Vec<&str> = attempts
        .iter()
        .zip(results.iter())
        .filter(|(_, r)| **r == Some(false))
        .map(|(a, _)| a.id)
        .collect();
    ControlReport {
        name: "every attempt escapes unconfined".into(),
        passed: all_escaped,
        detail: if failed.is_empty() {
            format!(
                "{} shell attempts escaped when run outside the sandbox",
                results.iter().filter(|r| r.is_some()).count()
            )
        } else {
            format!("did not escape unconfined: {}", failed.join(", "))
        },
    }
}

/// The worktree the unconfined controls run in, and what undoes a control's effects: the
/// files it may change as they were, the checkout's `.git` file and the git state.
/// The fields drop in the order written, as the locals they replace did.
struct ControlWorktree<'a> {
    /// The controls' `TMPDIR`.
    tmp: tempfile::TempDir,
    git_undo: ControlUndo,
    dotgit: Vec<u8>,
    snapshots: Vec<(PathBuf, Option<Vec<u8>>)>,
    git: PathBuf,
    checkout: PathBuf,
    setup: ControlSetup<'a>,
}

impl<'a> ControlWorktree<'a> {
    /// Adds the worktree (under the bare clone's lock) at the fixture's revision, and captures
    /// what each control's undo restores.
    fn open(setup: ControlSetup<'a>) -> Result<ControlWorktree<'a>, String> {
        let (fixture, t) = (setup.fixture, setup.targets);
        let checkout = control_checkout(fixture);
        let git = quest_runner::binaries::find(quest_runner::binaries::Tool::Git)
            .map_err(|e| e.to_string())?;
        let locked = lock_bare(&t.bare)?;
        let status = Command::new(&git)
            .args(["-c", "core.hooksPath=/dev/null", "--git-dir"])
            .arg(&t.bare)
            .args(["worktree", "add", "--detach", "--quiet"])
            .arg(&checkout)
            .arg(&fixture.rev)
            .status()
            .map_err(|e| e.to_string())?;
        drop(locked);
        if !status.success() {
            return Err("creating the control worktree failed".into());
        }
        let snapshots: Vec<(PathBuf, Option<Vec<u8>>)> = [
            t.bare.join("config"),
            t.bare.join("info/exclude"),
            fixture.operator_home.join(".bashrc"),
        ]
        .into_iter()
        .map(|p| {
            let data = std::fs::read(&p).ok();
            (p, data)
        })
        .collect();
        let dotgit = std::fs::read(checkout.join(".git")).map_err(|e| e.to_string())?;
        let git_undo = ControlUndo::capture(fixture, &t.bare, &checkout)?;
        let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
        Ok(ControlWorktree {
            tmp,
            git_undo,
            dotgit,
            snapshots,
            git,
            checkout,
            setup,
        })
    }

    /// Runs the attempt's `command` unconfined, then its host-side reader: whether what the
    /// attempt detects shows.
    fn escapes(&self, a: &Attempt, command: &str) -> Result<bool, String> {
        let ControlSetup {
            fixture,
            server,
            registry,
            ..
        } = self.setup;
        let before = server.exchanges().len();
        let registry_before = registry.map_or(0, |r| r.requests().len());
        // Outside the sandbox, but in the scripted model's network namespace, where the
        // network attempts' target lives.
        let mut text = self.bash(command, true)?;
        if let Some(after) = &a.control_after {
            text.push_str(&self.bash(after, false)?);
        }
        let exchanges = server.exchanges();
        let registry_seen: Vec<String> = registry
            .map(|r| r.requests().split_off(registry_before))
            .unwrap_or_default();
        let seen = Seen {
            exchanges: &exchanges[before..],
            registry: &registry_seen,
        };
        Ok(detect(&a.detect, &text, seen, fixture))
    }

    /// `script`'s output, run by bash in the worktree with the job's environment and the
    /// operator's home; `in_model_netns`: in the scripted model's network namespace.
    fn bash(&self, script: &str, in_model_netns: bool) -> Result<String, String> {
        let mut cmd = Command::new("/bin/bash");
        if in_model_netns {
            self.setup.server.confine(&mut cmd);
        }
        let out = cmd
            .args(["-c", script])
            .current_dir(&self.checkout)
            .env_clear()
            .envs(self.setup.env_source.iter().cloned())
            .env("HOME", &self.setup.fixture.operator_home)
            .env("TMPDIR", self.tmp.path())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Undoes what the control did before the next one runs: its host paths, the files it
    /// may have changed, then the checkout's tracked content.
    fn undo(&self, a: &Attempt) {
        for p in a.detect.host_paths() {
            let _ = std::fs::remove_file(p);
        }
        for (path, data) in &self.snapshots {
            if let Some(data) = data {
                let _ = std::fs::write(path, data);
            }
        }
        let _ = std::fs::write(self.checkout.join(".git"), &self.dotgit);
        self.git_undo.restore(self.setup.fixture);
        let _ = Command::new(&self.git)
            .args(["-c", "core.hooksPath=/dev/null", "-C"])
            .arg(&self.checkout)
            .args([
                "checkout",
                "-q",
                "--force",
                "--detach",
                &self.setup.fixture.rev,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }

    /// Removes the worktree and prunes it from the bare clone, under the clone's lock, which
    /// is returned.
    fn close(&self) -> Result<LockFile, String> {
        let _ = std::fs::remove_dir_all(&self.checkout);
        let locked = lock_bare(&self.setup.targets.bare)?;
        let _ = Command::new(&self.git)
            .args(["--git-dir"])
            .arg(&self.setup.targets.bare)
            .args(["worktree", "prune"])
            .status();
        Ok(locked)
    }
}

/// The bare clone's lock, as the runner takes it.
fn lock_bare(bare: &Path) -> Result<LockFile, String> {
    quest_runner::workspace::lock_bare_blocking(bare, quest_runner::workspace::CLEANUP_LOCK_WAIT)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("the bare clone {} stayed locked", bare.display()))
}

/// The host replaced the private files while the job's command waited (the attempt's marker
/// says the command saw it done): without that, `rotate-secrets` refused nothing.
pub(super) fn rotation_control(
    rotator: &crate::boundary::fixture::Rotator,
    checkout: &std::path::Path,
) -> ControlReport {
    let answered = rotator.answered();
    let in_job: Vec<&Result<(), String>> = answered
        .iter()
        .filter(|(dir, _)| dir == checkout)
        .map(|(_, done)| done)
        .collect();
    let failed: Vec<&String> = in_job.iter().filter_map(|d| d.as_ref().err()).collect();
    ControlReport::new(
        "the account's key and the config were replaced while the job ran",
        !in_job.is_empty() && failed.is_empty(),
        match (in_job.len(), failed.first()) {
            (0, _) => "no rotation was asked for from the job's checkout".into(),
            (n, None) => format!("{n} rotation(s): key renamed over, config link switched"),
            (_, Some(e)) => format!("rotating failed: {e}"),
        },
    )
}

/// The cached devShell script, sourced unconfined, does write outside: so the shellHook
/// attempt's refusal inside the sandbox is real.
pub(super) fn shellhook_control(
    fixture: &Fixture,
    result: &JobResult,
    state: &StateDir,
) -> ControlReport {
    let name = "the shellHook writes outside when sourced unconfined".to_string();
    let Some(key) = result.devshell.as_ref().map(|d| d.key.clone()) else {
        return ControlReport {
            name,
            passed: false,
            detail: "the job built no devShell".into(),
        };
    };
    let script = quest_runner::devshell::entry::Layout::new(state.root())
        .entry(&key)
        .join("env.sh");
    let home = tempfile::tempdir();
    let Ok(home) = home else {
        return ControlReport {
            name,
            passed: false,
            detail: "no temp dir".into(),
        };
    };
    let marker = PathBuf::from(format!("/tmp/qr-shellhook-{}", fixture.token));
    let _ = Command::new("/bin/bash")
        .args([
            "--noprofile",
            "--norc",
            "-c",
            &format!(
                ". {}",
                quest_runner::util::shell::quote(&script.to_string_lossy())
            ),
        ])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", home.path())
        .status();
    let passed = marker.exists();
    let _ = std::fs::remove_file(&marker);
    let _ = std::fs::remove_file(fixture.marker("shellhook"));
    ControlReport {
        name,
        passed,
        detail: if passed {
            "it did".into()
        } else {
            "it did not".into()
        },
    }
}
