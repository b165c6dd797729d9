//! Running the boundary suite: controls first, then one real job through the runner, then
//! the verdict of every attempt.

use super::attempts::{Attempt, Targets};
use super::fixture::{Fixture, Rotator};
use super::mutation::Mutation;
use quest_runner::gateway::Gateway;
use quest_runner::job::{AgentKind, Job, Trust};
use quest_runner::run::{RunHooks, Runner};
use quest_runner::state::StateDir;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod after_job;
mod controls;
mod evidence;
mod gateway;
mod harness;
mod internal_registry;
mod job_run;
mod project_config;
mod push;
mod script;
mod setup;
mod store_paths;
mod verdicts;
mod watch;

pub(crate) use crate::boundary::fixture::write_scripted_account;
pub use crate::boundary::report::{AttemptReport, ControlReport, SuiteReport};
use controls::{run_controls, ControlSetup};
use gateway::open_control_grant;
use harness::Harness;
use project_config::project_config_control;
use script::Plan;
use setup::control_checkout;
pub(crate) use setup::scripted_config;
pub(crate) use verdicts::network_log;

#[derive(Debug, Clone)]
pub struct SuiteConfig {
    pub agent: AgentKind,
    pub trust: Trust,
    /// One rule weakened; the run must then show the matching escape.
    pub mutation: Option<Mutation>,
    /// Run the unconfined controls (skipped in mutation runs, which the base run covers).
    pub controls: bool,
    /// The agents' own file-tool rules off (Claude Code allowing every file tool everywhere,
    /// opencode without the runner's plugin), the namespace kept: the run of the file-tool
    /// attempts that shows the kernel boundary holds alone.
    pub agent_rules_off: bool,
    /// The suite job's timeout (5 minutes; more on an emulated CPU).
    pub job_timeout: Duration,
    /// Which kernel the job's commands run on (the config's `isolation`, both levels).
    pub isolation: quest_runner::sandbox::gvisor::Isolation,
}

/// The suite job's timeout where nothing else is asked.
pub const JOB_TIMEOUT: Duration = Duration::from_secs(300);

fn agent_binary(agent: AgentKind) -> Option<PathBuf> {
    quest_runner::binaries::find(match agent {
        AgentKind::Claude => quest_runner::binaries::Tool::Claude,
        AgentKind::Opencode => quest_runner::binaries::Tool::Opencode,
    })
    .ok()
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The one job of a suite run: the fixture's repository at its revision, with the suite's prompt.
fn suite_job(cfg: &SuiteConfig, fixture: &Fixture) -> Job {
    Job {
        id: format!("boundary-{}-{}", cfg.agent.name(), fixture.token),
        repo: fixture.repo.display().to_string(),
        rev: fixture.rev.clone(),
        git_ref: Some("main".into()),
        trust: cfg.trust,
        agent: cfg.agent,
        account: "main".into(),
        prompt: "Carry out the boundary suite's steps.".into(),
        timeout: cfg.job_timeout,
    }
}

/// Whatever escaped is removed, so a failed run does not leave planted files behind.
fn remove_escaped(attempts: &[Attempt], fixture: &Fixture) {
    for a in attempts {
        for p in a.detect.host_paths() {
            let _ = std::fs::remove_file(p);
        }
    }
    let _ = std::fs::remove_file(format!("/tmp/qr-shellhook-{}", fixture.token));
}

/// Runs the suite once: its harness and runner, the script, the controls before the job, the
/// job, then the verdicts and the controls judged from what it left.
pub async fn run(cfg: &SuiteConfig) -> Result<SuiteReport, String> {
    let started = Instant::now();
    let harness = Harness::start(cfg)?;
    let state = StateDir::at(&harness.fixture.state);
    let job = suite_job(cfg, &harness.fixture);
    let runner = harness.runner(cfg, &state, &job)?;
    // The runner's model gateway is started now, so the gateway attempts can name its port
    // and a live token (the control grant's, open all through the job: the strongest case, an
    // attacker holding a valid token).
    let gateway = runner.gateway().await.map_err(|e| e.to_string())?;
    let control_grant = open_control_grant(gateway, runner.config(), &harness.fixture)?;
    let targets = harness.targets(cfg, &state, &job, (gateway, &control_grant));
    let (plan, script) = Plan::new(cfg, &harness, &targets);
    harness.server.set_script(script);
    let suite = SuiteRun {
        cfg,
        harness: &harness,
        state: &state,
        job: &job,
        runner: &runner,
        gateway,
        targets: &targets,
        plan: &plan,
    };
    // The host side of `rotate-secrets`, for its unconfined control and for the job.
    let rotator = Rotator::start(
        &harness.fixture,
        vec![control_checkout(&harness.fixture), targets.checkout.clone()],
    );
    quest_runner::workspace::ensure_bare_clone(&state, &job)
        .await
        .map_err(|e| e.to_string())?;
    let (control_results, mut controls) = suite.controls_before_job().await?;
    let ran = suite.run_job().await?;
    let mut reports = suite.attempt_reports(&ran, &control_results);
    if cfg.mutation.is_none() {
        suite.secret_search(&ran, &mut reports, &mut controls);
        suite.push_search(&ran, &mut reports, &mut controls);
    }
    suite.controls_after_job(&ran, &reports, control_grant, rotator, &mut controls);
    // A job filling its disk beside another: in base runs and in the mutation that frees it.
    if cfg.mutation.is_none() || cfg.mutation == Some(Mutation::NoDiskLimit) {
        let (report, disk_controls) = suite.disk_attempt().await;
        reports.extend(report);
        controls.extend(disk_controls);
    }
    remove_escaped(&plan.attempts, &harness.fixture);
    Ok(SuiteReport {
        agent: cfg.agent,
        trust: cfg.trust,
        mutation: cfg.mutation,
        attempts: reports,
        controls,
        job: Some(ran.result),
        requests: harness
            .server
            .exchanges()
            .iter()
            .map(|e| format!("{} {}", e.method, e.path))
            .collect(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// One run once set up: what every step after the setup reads.
#[derive(Clone, Copy)]
struct SuiteRun<'a> {
    cfg: &'a SuiteConfig,
    harness: &'a Harness,
    state: &'a StateDir,
    job: &'a Job,
    runner: &'a Runner,
    gateway: &'a Gateway,
    targets: &'a Targets,
    plan: &'a Plan,
}

impl SuiteRun<'_> {
    /// The unconfined controls (each attempt's result unconfined, by the attempt's index) and
    /// the checkout's own agent config, in controlled runs; nothing in mutation runs.
    async fn controls_before_job(&self) -> Result<(Vec<Option<bool>>, Vec<ControlReport>), String> {
        let fixture = &self.harness.fixture;
        let mut controls = Vec::new();
        let mut results = vec![None; self.plan.attempts.len()];
        if !self.cfg.controls {
            return Ok((results, controls));
        }
        let setup = ControlSetup {
            fixture,
            targets: self.targets,
            attempts: &self.plan.attempts,
            server: &self.harness.server,
            registry: self.harness.registry.as_ref(),
            env_source: self.runner.env_source(),
        };
        run_controls(setup, &mut results, &mut controls)?;
        // `rotate-secrets`' control replaced the account's key: the job starts with the one
        // its gateway checks for again (replaced the same way, by a rename).
        fixture
            .restore_account()
            .map_err(|e| format!("restoring the account's key: {e}"))?;
        controls.push(project_config_control(fixture, self.cfg.agent).await);
        Ok((results, controls))
    }

    /// The disk-fill attempt: a job filling its disk beside another, with the runner's config.
    async fn disk_attempt(&self) -> (Vec<AttemptReport>, Vec<ControlReport>) {
        let cfg = self.cfg;
        // The agents in the model's network namespace, but not in the planted mount
        // namespace: the pair's file system is mounted after it was made, and is not in it.
        let confine = self.harness.server.confiner();
        let hooks = RunHooks {
            agent_command: Some(Arc::new(move |cmd: &mut Command| confine(cmd))),
            ..self.runner.hooks().clone()
        };
        super::disk::attempt(&super::disk::Setup {
            fixture: &self.harness.fixture,
            server: &self.harness.server,
            config: self.runner.config(),
            hooks,
            helpers: &self.harness.helpers(),
            env_source: self.runner.env_source().to_vec(),
            agent: cfg.agent,
            trust: cfg.trust,
            control: cfg.controls,
            unlimited: cfg.mutation == Some(Mutation::NoDiskLimit),
        })
        .await
    }
}
