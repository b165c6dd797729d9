//! The control of the project-config attempts: the checkout's own agent configuration is
//! real. Run plainly, the agent loads it and its hook or plugin fires; without this, "never
//! ran" would prove nothing.

use super::agent_binary;
use crate::boundary::attempts;
use crate::boundary::fixture::Fixture;
use crate::boundary::report::ControlReport;
use crate::model_server::ModelServer;
use quest_runner::job::AgentKind;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs the agent plainly on a copy of the repository, with a home of its own and the scripted
/// model, and reports which of the checkout's hooks or plugins fired.
pub(super) async fn project_config_control(fixture: &Fixture, agent: AgentKind) -> ControlReport {
    let name = "the checkout's own agent config fires when loaded".to_string();
    let failed = |detail: String| ControlReport {
        name: name.clone(),
        passed: false,
        detail,
    };
    let Some(program) = agent_binary(agent) else {
        return failed("agent binary not found".into());
    };
    let server = match ModelServer::start_isolated_if_root(Vec::new()) {
        Ok(s) => s,
        Err(e) => return failed(e.to_string()),
    };
    let Some(plain) = PlainRun::prepare(fixture) else {
        return failed("copying the repository failed".into());
    };
    let (marker_names, mut cmd) = plain.command(agent, &program, &server);
    let log = std::fs::File::create(fixture.path().join("config-control.log"));
    cmd.current_dir(&plain.work)
        .env("HOME", &plain.home)
        .env("TMPDIR", &plain.home)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log.map(Stdio::from).unwrap_or_else(|_| Stdio::null()));
    server.confiner()(&mut cmd);
    let outcome = tokio::task::spawn_blocking(move || run_for_a_minute(cmd)).await;
    server.kill_confined();
    let fired: Vec<&str> = marker_names
        .iter()
        .copied()
        .filter(|m| fixture.marker(m).exists())
        .collect();
    plain.remove(fixture, marker_names);
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

/// Runs `cmd` until it exits, or kills it after a minute.
fn run_for_a_minute(mut cmd: Command) -> std::io::Result<()> {
    let mut child = cmd.spawn()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait()?.is_some() || Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Where the agent runs plainly: a copy of the repository, and a home of its own.
struct PlainRun {
    work: PathBuf,
    home: PathBuf,
}

impl PlainRun {
    /// The copy (`None`: copying failed) and the home, ready for either agent to load the
    /// checkout's configuration offline.
    fn prepare(fixture: &Fixture) -> Option<PlainRun> {
        let work = fixture.path().join("config-control");
        let _ = std::fs::remove_dir_all(&work);
        let copy = Command::new("cp")
            .arg("-a")
            .arg(&fixture.repo)
            .arg(&work)
            .status();
        if !copy.is_ok_and(|s| s.success()) {
            return None;
        }
        let home = fixture.path().join("config-control-home");
        let _ = std::fs::create_dir_all(home.join(".config/opencode"));
        // opencode installs `@opencode-ai/plugin` next to any plugin before loading it;
        // offline, an empty install lets it go on to load the checkout's plugin.
        for dir in [home.join(".config/opencode"), work.join(".opencode")] {
            let _ = std::fs::create_dir_all(dir.join("node_modules"));
            let _ = std::fs::write(
                dir.join("package-lock.json"),
                r#"{"lockfileVersion":3,"packages":{"":{"dependencies":{"@opencode-ai/plugin":"*"}}}}"#,
            );
        }
        Some(PlainRun { work, home })
    }

    /// The agent's headless command against the scripted model, and the markers its
    /// checkout's hooks or plugins leave when they fire.
    fn command(
        &self,
        agent: AgentKind,
        program: &Path,
        server: &ModelServer,
    ) -> (&'static [&'static str], Command) {
        match agent {
            AgentKind::Claude => {
                let mut c = Command::new(program);
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
                    self.home.join(".config/opencode/opencode.json"),
                    provider.to_string(),
                );
                let mut c = Command::new(program);
                c.args(["run", "hello"])
                    .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
                    .env("OPENCODE_DISABLE_AUTOUPDATE", "1");
                (&["opencode-plugin"], c)
            }
        }
    }

    /// Removes the copy, the home and every marker the run may have left.
    fn remove(&self, fixture: &Fixture, marker_names: &[&str]) {
        for m in marker_names {
            let _ = std::fs::remove_file(fixture.marker(m));
        }
        for (_, p) in attempts::project_config_markers(fixture) {
            let _ = std::fs::remove_file(p);
        }
        let _ = std::fs::remove_dir_all(&self.work);
        let _ = std::fs::remove_dir_all(&self.home);
    }
}
