//! Running the boundary suite: controls first, then one real job through the runner, then
//! the verdict of every attempt.

use super::attempts::{self, Attempt, Rule, Targets};
use super::mutation::Mutation;
use super::world::World;
use crate::config::Config;
use crate::job::{AgentKind, Job, Trust};
use crate::run::{Cancel, RunHooks, Runner};
use crate::selftest::model_server::ModelServer;
use crate::selftest::npm_registry::NpmRegistry;
use crate::state::StateDir;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod after_job;
mod company;
mod controls;
mod gateway;
mod report;
mod setup;
mod verdicts;
mod watch;

use after_job::{after_job_controls, registry_controls, JobEvidence};
use company::{package_manager_controls, Company};
use controls::{
    project_config_control, rotation_control, run_controls, shellhook_control, ControlSetup,
};
use gateway::{gateway_controls, open_control_grant};
pub use report::{AttemptReport, ControlReport, SuiteReport};
use setup::{control_checkout, suite_config};
pub(crate) use setup::{scripted_config, write_scripted_account};
pub(crate) use verdicts::network_log;
use verdicts::{clip, decided, detect, refused_by_runner, tool_outputs, Seen};
use watch::{secret_search_report, watch_agent};

#[derive(Debug, Clone)]
pub struct SuiteConfig {
    pub agent: AgentKind,
    pub trust: Trust,
    /// One rule weakened; the run must then show the matching escape.
    pub mutation: Option<Mutation>,
    /// Run the unconfined controls (skipped in mutation runs, which the base run covers).
    pub controls: bool,
}

fn agent_binary(agent: AgentKind) -> Option<PathBuf> {
    crate::binaries::find(match agent {
        AgentKind::Claude => crate::binaries::Tool::Claude,
        AgentKind::Opencode => crate::binaries::Tool::Opencode,
    })
    .ok()
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The one job of a suite run: the world's repository at its revision, with the suite's prompt.
fn suite_job(cfg: &SuiteConfig, world: &World) -> Job {
    Job {
        id: format!("boundary-{}-{}", cfg.agent.name(), world.token),
        repo: world.repo.display().to_string(),
        rev: world.rev.clone(),
        git_ref: Some("main".into()),
        trust: cfg.trust,
        agent: cfg.agent,
        account: "main".into(),
        prompt: "Carry out the boundary suite's steps.".into(),
        timeout: Duration::from_secs(300),
    }
}

/// The environment agents start from: the suite's own, with the world's planted secrets.
fn agent_env(world: &World, company: Option<&Company>) -> Vec<(String, String)> {
    let mut env_source: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| !world.planted_env().iter().any(|(p, _)| p == k))
        .chain(world.planted_env())
        .collect();
    if let Some(c) = company {
        // The proxy verifies the stand-in's HTTPS front as it would a registry's certificate.
        env_source.retain(|(k, _)| k != "NODE_EXTRA_CA_CERTS");
        env_source.push((
            "NODE_EXTRA_CA_CERTS".into(),
            c.front.cert.display().to_string(),
        ));
    }
    env_source
}

/// Writes the runner's config in the state dir (which `read-runner-state` reads), and where
/// the runner is told its config is, outside it (which `rotate-secrets` replaces).
fn write_config(state: &StateDir, world: &World, config: &Config) -> Result<(), String> {
    for file in [state.config_file(), world.config_file.clone()] {
        std::fs::write(
            &file,
            serde_json::to_string_pretty(config).unwrap_or_default(),
        )
        .map_err(|e| format!("writing the runner's config {}: {e}", file.display()))?;
    }
    Ok(())
}

/// Whatever escaped is removed, so a failed run does not leave planted files behind.
fn remove_escaped(attempts: &[Attempt], world: &World) {
    for a in attempts {
        for p in a.detect.host_paths() {
            let _ = std::fs::remove_file(p);
        }
    }
    let _ = std::fs::remove_file(format!("/tmp/qr-shellhook-{}", world.token));
}

/// The suite's seams in the runner: the agent and the proxy run in the model server's network
/// namespace (and the agent in the company machine's mounts), and the policy lists the
/// stand-in registry and takes the mutation under test.
fn run_hooks(
    server: &ModelServer,
    company: Option<&Company>,
    registry: Option<&NpmRegistry>,
    bare: PathBuf,
    mutation: Option<Mutation>,
) -> RunHooks {
    let server_confine = server.confiner();
    let proxy_confine = server.confiner();
    let enter_company = company.map(|c| c.planted.enterer());
    RunHooks {
        agent_command: Some(Arc::new(move |cmd: &mut Command| {
            server_confine(cmd);
            if let Some(enter) = &enter_company {
                enter(cmd);
            }
        })),
        policy: {
            let mut hosts: Vec<String> = registry.into_iter().map(NpmRegistry::host).collect();
            hosts.extend(
                company
                    .iter()
                    .map(|c| format!("localhost:{}", c.front.port)),
            );
            Some(Arc::new(move |p: &mut crate::sandbox::SandboxPolicy| {
                // The seam for the stand-in: a registry-class host (reads only) of a job that
                // reaches registries at all.
                if !p.allowed_hosts.is_empty() {
                    p.allowed_hosts.extend(hosts.iter().cloned());
                }
                if let Some(m) = mutation {
                    m.apply(p, &bare);
                }
            }) as crate::run::PolicyHook)
        },
        proxy_listener: Some(Arc::new(server.binder())),
        proxy_command: Some(Arc::new(move |cmd: &mut Command| proxy_confine(cmd))),
        // Where the confined agent reaches it; it forwards to the server's host-side listener.
        gateway_listener: Some(Arc::new(server.binder())),
    }
}

/// Runs the suite once.
pub async fn run(cfg: &SuiteConfig) -> Result<SuiteReport, String> {
    let started = Instant::now();
    let world = World::new(cfg.agent)?;
    // Loopback only, in a namespace of its own when we may create one: the agents' own
    // vendor traffic then fails at once instead of leaving the machine.
    let server = ModelServer::start_isolated_if_root(Vec::new())
        .map_err(|e| format!("starting the scripted model: {e}"))?;
    // Trusted runs: a registry the commands reach as they would npm's, through the runner's
    // proxy (the policy hook below lists it as a registry: reads only).
    let registry = match cfg.trust {
        Trust::Trusted => Some(
            server
                .bind_loopback()
                .and_then(NpmRegistry::start)
                .map_err(|e| format!("starting the stand-in registry: {e}"))?,
        ),
        Trust::Untrusted => None,
    };
    // Base trusted runs (root): the package managers read from the stand-in over HTTPS, as from
    // a real registry, with the host's configuration planted as a company machine has it.
    let company = match (&registry, cfg.controls && is_root()) {
        (Some(r), true) => Some(Company::new(&world, &server, r)?),
        _ => None,
    };
    let state = StateDir::at(&world.state);
    let job = suite_job(cfg, &world);
    let env_source = agent_env(&world, company.as_ref());
    let config = suite_config(&world, &server, cfg)?;
    write_config(&state, &world, &config)?;

    // The runner the job runs in, as an operator would run it; its model gateway is started
    // now, so the gateway attempts can name its port and a live token (the control grant's,
    // open all through the job: the strongest case, an attacker holding a valid token).
    let mut runner = Runner::new(state.clone(), config.clone());
    runner.config_file = Some(world.config_file.clone());
    runner.env_source = env_source.clone();
    runner.operator_home = Some(world.operator_home.clone());
    runner.hooks = run_hooks(
        &server,
        company.as_ref(),
        registry.as_ref(),
        crate::workspace::bare_clone_path(&state, &job.repo),
        cfg.mutation,
    );
    let gateway = runner.gateway().await?;
    let control_grant = Some(open_control_grant(gateway, &config, &world)?);
    let targets = Targets {
        agent: cfg.agent,
        trust: cfg.trust,
        bare: crate::workspace::bare_clone_path(&state, &job.repo),
        checkout: crate::workspace::job_root(&state, &job.id).join("checkout"),
        port: server.addr.port(),
        registry: registry.as_ref().map(|r| r.port),
        gateway: control_grant
            .as_ref()
            .map(|g| (gateway.addr.port(), g.token.clone())),
    };
    let mut attempts = attempts::all(&world, &targets);
    if let Some(m) = cfg.mutation {
        // A mutation run needs only the attempt its weakened rule must free (the base run has
        // shown the others refused); this keeps the mutation runs per agent short.
        attempts.retain(|a| a.id == m.caught_by());
    }
    let mut script = vec![attempts::permitted(&targets)];
    if cfg.trust == Trust::Trusted {
        script.push(attempts::permitted_network());
    }
    if let Some(r) = &registry {
        script.push(attempts::permitted_registry_reads(r.port, &world.token));
    }
    // Its index in the script, when it runs.
    let pm_step = company.as_ref().map(|c| {
        script.push(attempts::permitted_package_manager_reads(
            c.front.port,
            &c.npmrc,
            &world.token,
        ));
        script.len() - 1
    });
    let mut last_step = Vec::new();
    for a in &attempts {
        script.extend(a.steps.iter().cloned());
        last_step.push(script.len() - 1);
    }
    script.extend(attempts::closing());
    server.set_script(script);

    let mut controls = Vec::new();
    let mut control_results = vec![None; attempts.len()];
    // The host side of `rotate-secrets`, for its unconfined control and for the job.
    let rotator = super::world::Rotator::start(
        &world,
        vec![control_checkout(&world), targets.checkout.clone()],
    );
    crate::workspace::ensure_bare_clone(&state, &job)
        .await
        .map_err(|e| e.to_string())?;
    if cfg.controls {
        let setup = ControlSetup {
            world: &world,
            targets: &targets,
            attempts: &attempts,
            server: &server,
            registry: registry.as_ref(),
            env_source: &env_source,
        };
        run_controls(setup, &mut control_results, &mut controls)?;
        // `rotate-secrets`' control replaced the account's key: the job starts with the one
        // its gateway checks for again (replaced the same way, by a rename).
        world
            .restore_account()
            .map_err(|e| format!("restoring the account's key: {e}"))?;
        controls.push(project_config_control(&world, &targets, cfg.agent).await);
    }

    let served_before = server.exchanges().len();
    let registry_before = registry.as_ref().map_or(0, |r| r.requests().len());
    let job_root = crate::workspace::job_root(&state, &job.id);
    // While the job runs, the suite searches the agent for the account's secret from outside,
    // on a thread of its own.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (secret, root, stop) = (
            world.secrets.account.clone(),
            job_root.clone(),
            stop.clone(),
        );
        tokio::task::spawn_blocking(move || watch_agent(&secret, &root, &stop))
    };
    let result = runner.run(&job, std::future::pending::<Cancel>()).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let findings = watcher.await.unwrap_or_default();
    // The job's `rotate-secrets` replaced the account's key: what follows (the secret search's
    // control links the account's file and looks for the key) needs the one the world names.
    world
        .restore_account()
        .map_err(|e| format!("restoring the account's key after the job: {e}"))?;
    let exchanges = server.exchanges();
    let registry_seen: Vec<String> = registry
        .as_ref()
        .map(|r| r.requests().split_off(registry_before))
        .unwrap_or_default();
    let net_log = network_log(&result);

    // Verdicts.
    let outputs = tool_outputs(&server);
    let mut reports = Vec::new();
    for (i, a) in attempts.iter().enumerate() {
        let step = last_step[i];
        let output = outputs.get(&step).cloned();
        let ran = match (&a.ran_marker, &output) {
            (Some(marker), Some(out)) => out.contains(marker.as_str()),
            (None, Some(_)) => true,
            (_, None) => false,
        };
        let text = output.clone().unwrap_or_default();
        let escaped = detect(
            &a.detect,
            &text,
            Seen {
                exchanges: &exchanges[served_before.min(exchanges.len())..],
                registry: &registry_seen,
            },
            &world,
        );
        let refused_by_runner =
            (a.rule == Rule::FileTools).then(|| refused_by_runner(cfg.agent, &text));
        reports.push(AttemptReport {
            id: a.id,
            what: a.what.clone(),
            rule: a.rule,
            control_escaped: control_results[i],
            ran,
            escaped,
            refused_by_runner,
            evidence: clip(&text, 600),
            network: a.net_tag.as_deref().map(|tag| decided(&net_log, tag)),
        });
    }
    // The suite's own helpers in the namespace, which outlive the job.
    let helpers: Vec<libc::pid_t> = company
        .iter()
        .map(|c| c.front.pid() as libc::pid_t)
        .collect();
    if cfg.mutation.is_none() {
        let report = secret_search_report(&findings, &world, cfg.controls);
        if let Some(found) = report.control_escaped {
            controls.push(ControlReport::new(
                "the secret search finds a key held the pre-gateway way",
                found,
                "a process with it in its environment, a private dir linking the account's file"
                    .into(),
            ));
        }
        reports.push(report);
    }
    let ev = JobEvidence {
        world: &world,
        server: &server,
        cfg,
        result: &result,
        outputs: &outputs,
        net_log: &net_log,
    };
    after_job_controls(ev, &reports, &helpers, &mut controls);
    gateway_controls(
        ev,
        &exchanges[served_before.min(exchanges.len())..],
        &job_root,
        (gateway, control_grant),
        &mut controls,
    );
    if attempts.iter().any(|a| a.id == "rotate-secrets") {
        controls.push(rotation_control(&rotator, &targets.checkout));
    }
    drop(rotator);
    if let Some(r) = &registry {
        registry_controls(r, &registry_seen, ev, &mut controls);
    }
    if let (Some(c), Some(step)) = (&company, pm_step) {
        let output = outputs.get(&step).cloned().unwrap_or_default();
        package_manager_controls(c, &output, &net_log, &mut controls);
    }
    if cfg.controls && cfg.trust == Trust::Trusted {
        controls.push(shellhook_control(&world, &result, &state));
    }
    // A job filling its disk beside another: in base runs and in the mutation that frees it.
    if cfg.mutation.is_none() || cfg.mutation == Some(Mutation::NoDiskLimit) {
        // The agents in the model's network namespace, but not in the planted mount
        // namespace: the pair's file system is mounted after it was made, and is not in it.
        let confine = server.confiner();
        let hooks = RunHooks {
            agent_command: Some(Arc::new(move |cmd: &mut Command| confine(cmd))),
            ..runner.hooks.clone()
        };
        let (report, disk_controls) = super::disk::attempt(&super::disk::Setup {
            world: &world,
            server: &server,
            config: &runner.config,
            hooks,
            helpers: &helpers,
            env_source: env_source.clone(),
            agent: cfg.agent,
            trust: cfg.trust,
            control: cfg.controls,
            unlimited: cfg.mutation == Some(Mutation::NoDiskLimit),
        })
        .await;
        reports.extend(report);
        controls.extend(disk_controls);
    }
    remove_escaped(&attempts, &world);
    Ok(SuiteReport {
        agent: cfg.agent,
        trust: cfg.trust,
        mutation: cfg.mutation,
        attempts: reports,
        controls,
        job: Some(result),
        requests: server
            .exchanges()
            .iter()
            .map(|e| format!("{} {}", e.method, e.path))
            .collect(),
        seconds: started.elapsed().as_secs_f64(),
    })
}
