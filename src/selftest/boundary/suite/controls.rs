//! The unconfined controls, run before the job: each attempt's command must escape when
//! nothing confines it, or its refusal inside the sandbox proves nothing; and the controls
//! that run a job's own files on the host side (project config, shellHook, rotation).

use super::super::attempts::{self, Attempt, Targets};
use super::super::world::World;
use super::agent_binary;
use super::report::ControlReport;
use super::setup::control_checkout;
use super::verdicts::{detect, Seen};
use crate::job::AgentKind;
use crate::run::JobResult;
use crate::selftest::model_server::ModelServer;
use crate::selftest::npm_registry::NpmRegistry;
use crate::state::StateDir;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Each shell attempt, run unconfined from a worktree of the same bare clone, must escape;
/// then its effects are undone before the job runs.
/// What the unconfined controls run against: the attempts and what they target, and the
/// servers and environment the job will have.
#[derive(Clone, Copy)]
pub(super) struct ControlSetup<'a> {
    pub(super) world: &'a World,
    pub(super) targets: &'a Targets,
    pub(super) attempts: &'a [Attempt],
    pub(super) server: &'a ModelServer,
    pub(super) registry: Option<&'a NpmRegistry>,
    pub(super) env_source: &'a [(String, String)],
}

pub(super) fn run_controls(
    setup: ControlSetup<'_>,
    results: &mut [Option<bool>],
    controls: &mut Vec<ControlReport>,
) -> Result<(), String> {
    let ControlSetup {
        world,
        targets: t,
        attempts,
        server,
        registry,
        env_source,
    } = setup;
    let checkout = control_checkout(world);
    let git = crate::binaries::find(crate::binaries::Tool::Git).map_err(|e| e.to_string())?;
    let bare_lock = || {
        crate::workspace::lock_bare_blocking(&t.bare, crate::workspace::CLEANUP_LOCK_WAIT)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("the bare clone {} stayed locked", t.bare.display()))
    };
    let locked = bare_lock()?;
    let status = Command::new(&git)
        .args(["-c", "core.hooksPath=/dev/null", "--git-dir"])
        .arg(&t.bare)
        .args(["worktree", "add", "--detach", "--quiet"])
        .arg(&checkout)
        .arg(&world.rev)
        .status()
        .map_err(|e| e.to_string())?;
    drop(locked);
    if !status.success() {
        return Err("creating the control worktree failed".into());
    }
    let snapshots: Vec<(PathBuf, Option<Vec<u8>>)> = [
        t.bare.join("config"),
        t.bare.join("info/exclude"),
        world.operator_home.join(".bashrc"),
    ]
    .into_iter()
    .map(|p| {
        let data = std::fs::read(&p).ok();
        (p, data)
    })
    .collect();
    let dotgit = std::fs::read(checkout.join(".git")).map_err(|e| e.to_string())?;
    let git_undo = super::super::git_attacks::ControlUndo::capture(world, &t.bare, &checkout)?;
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    // What the attempts on opencode's executor aim at unconfined (the job's is not up yet).
    let _executor = match t.agent {
        AgentKind::Opencode => Some(super::super::shell_attacks::ControlExecutor::start(world)?),
        AgentKind::Claude => None,
    };
    let mut all_escaped = true;
    for (i, a) in attempts.iter().enumerate() {
        let Some(command) = &a.control else { continue };
        let before = server.exchanges().len();
        let registry_before = registry.map_or(0, |r| r.requests().len());
        let mut cmd = Command::new("/bin/bash");
        // Outside the sandbox, but in the scripted model's network namespace, where the
        // network attempts' target lives.
        server.confine(&mut cmd);
        let out = cmd
            .args(["-c", command])
            .current_dir(&checkout)
            .env_clear()
            .envs(env_source.iter().cloned())
            .env("HOME", &world.operator_home)
            .env("TMPDIR", tmp.path())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        if let Some(after) = &a.control_after {
            let out = Command::new("/bin/bash")
                .args(["-c", after])
                .current_dir(&checkout)
                .env_clear()
                .envs(env_source.iter().cloned())
                .env("HOME", &world.operator_home)
                .env("TMPDIR", tmp.path())
                .stdin(Stdio::null())
                .output()
                .map_err(|e| e.to_string())?;
            text.push_str(&String::from_utf8_lossy(&out.stdout));
        }
        let exchanges = server.exchanges();
        let registry_seen: Vec<String> = registry
            .map(|r| r.requests().split_off(registry_before))
            .unwrap_or_default();
        let escaped = detect(
            &a.detect,
            &text,
            Seen {
                exchanges: &exchanges[before..],
                registry: &registry_seen,
            },
            world,
        );
        results[i] = Some(escaped);
        all_escaped &= escaped;
        for p in a.detect.host_paths() {
            let _ = std::fs::remove_file(p);
        }
        // Undo what the control did before the next one runs: the files it may have
        // changed, then the checkout's tracked content.
        for (path, data) in &snapshots {
            if let Some(data) = data {
                let _ = std::fs::write(path, data);
            }
        }
        let _ = std::fs::write(checkout.join(".git"), &dotgit);
        git_undo.restore(world);
        let _ = Command::new(&git)
            .args(["-c", "core.hooksPath=/dev/null", "-C"])
            .arg(&checkout)
            .args(["checkout", "-q", "--force", "--detach", &world.rev])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    let _ = std::fs::remove_dir_all(&checkout);
    let _locked = bare_lock()?;
    let _ = Command::new(&git)
        .args(["--git-dir"])
        .arg(&t.bare)
        .args(["worktree", "prune"])
        .status();
    let failed: Vec<&str> = attempts
        .iter()
        .zip(results.iter())
        .filter(|(_, r)| **r == Some(false))
        .map(|(a, _)| a.id)
        .collect();
    controls.push(ControlReport {
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
    });
    Ok(())
}

/// The host replaced the private files while the job's command waited (the attempt's marker
/// says the command saw it done): without that, `rotate-secrets` refused nothing.
pub(super) fn rotation_control(
    rotator: &super::super::world::Rotator,
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

/// The checkout's own agent configuration is real: run plainly, the agent loads it and its
/// hook or plugin fires. Without this, "never ran" would prove nothing.
pub(super) async fn project_config_control(
    world: &World,
    t: &Targets,
    agent: AgentKind,
) -> ControlReport {
    let name = "the checkout's own agent config fires when loaded".to_string();
    let Some(program) = agent_binary(agent) else {
        return ControlReport {
            name,
            passed: false,
            detail: "agent binary not found".into(),
        };
    };
    let server = match ModelServer::start_isolated_if_root(Vec::new()) {
        Ok(s) => s,
        Err(e) => {
            return ControlReport {
                name,
                passed: false,
                detail: e.to_string(),
            }
        }
    };
    let work = world.path().join("config-control");
    let _ = std::fs::remove_dir_all(&work);
    let copy = Command::new("cp")
        .arg("-a")
        .arg(&world.repo)
        .arg(&work)
        .status();
    if !copy.is_ok_and(|s| s.success()) {
        return ControlReport {
            name,
            passed: false,
            detail: "copying the repository failed".into(),
        };
    }
    let home = world.path().join("config-control-home");
    let _ = std::fs::create_dir_all(home.join(".config/opencode"));
    // opencode installs `@opencode-ai/plugin` next to any plugin before loading it; offline,
    // an empty install lets it go on to load the checkout's plugin.
    for dir in [home.join(".config/opencode"), work.join(".opencode")] {
        let _ = std::fs::create_dir_all(dir.join("node_modules"));
        let _ = std::fs::write(
            dir.join("package-lock.json"),
            r#"{"lockfileVersion":3,"packages":{"":{"dependencies":{"@opencode-ai/plugin":"*"}}}}"#,
        );
    }
    let (marker_names, mut cmd): (&[&str], Command) = match agent {
        AgentKind::Claude => {
            let mut c = Command::new(&program);
            c.args(["-p", "hello", "--permission-mode", "dontAsk"])
                .env("ANTHROPIC_BASE_URL", server.base_url())
                .env("ANTHROPIC_API_KEY", "sk-control")
                .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
            (&["claude-session-hook"], c)
        }
        AgentKind::Opencode => {
            let provider = serde_json::json!({
                "provider": {"scripted": {"npm": "@ai-sdk/openai-compatible", "options": {"baseURL": format!("{}/v1", server.base_url()), "apiKey": "sk-control"}, "models": {"scripted": {"tool_call": true}}}},
                "model": "scripted/scripted",
            });
            let _ = std::fs::write(
                home.join(".config/opencode/opencode.json"),
                provider.to_string(),
            );
            let mut c = Command::new(&program);
            c.args(["run", "hello"])
                .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
                .env("OPENCODE_DISABLE_AUTOUPDATE", "1");
            (&["opencode-plugin"], c)
        }
    };
    let log = std::fs::File::create(world.path().join("config-control.log"));
    cmd.current_dir(&work)
        .env("HOME", &home)
        .env("TMPDIR", &home)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log.map(Stdio::from).unwrap_or_else(|_| Stdio::null()));
    server.confiner()(&mut cmd);
    let _ = t;
    let outcome = tokio::task::spawn_blocking(move || {
        let mut child = cmd.spawn()?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if child.try_wait()?.is_some() || Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Ok::<_, std::io::Error>(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await;
    server.kill_confined();
    let fired: Vec<&str> = marker_names
        .iter()
        .copied()
        .filter(|m| world.marker(m).exists())
        .collect();
    for m in marker_names {
        let _ = std::fs::remove_file(world.marker(m));
    }
    for (_, p) in attempts::project_config_markers(world) {
        let _ = std::fs::remove_file(p);
    }
    let _ = std::fs::remove_dir_all(&work);
    let _ = std::fs::remove_dir_all(&home);
    let passed = outcome.is_ok() && fired.len() == marker_names.len();
    ControlReport {
        name,
        passed,
        detail: format!(
            "fired when run without the runner: {}",
            if fired.is_empty() {
                "nothing".into()
            } else {
                fired.join(", ")
            }
        ),
    }
}

/// The cached devShell script, sourced unconfined, does write outside: so the shellHook
/// attempt's refusal inside the sandbox is real.
pub(super) fn shellhook_control(
    world: &World,
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
    let script = crate::devshell::entry::Layout::new(state.root())
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
    let marker = PathBuf::from(format!("/tmp/qr-shellhook-{}", world.token));
    let _ = Command::new("/bin/bash")
        .args([
            "--noprofile",
            "--norc",
            "-c",
            &format!(". {}", crate::util::shell::quote(&script.to_string_lossy())),
        ])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", home.path())
        .status();
    let passed = marker.exists();
    let _ = std::fs::remove_file(&marker);
    let _ = std::fs::remove_file(world.marker("shellhook"));
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
