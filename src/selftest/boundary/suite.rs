//! Running the boundary suite: controls first, then one real job through the runner, then
//! the verdict of every attempt.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::attempts::{self, Attempt, Detect, Rule, Targets};
use super::mutation::Mutation;
use super::world::World;
use crate::config::{Account, ClaudeAccount, Config, OpencodeAccount};
use crate::job::{AgentKind, Job, Trust};
use crate::run::{Cancel, JobResult, Outcome, RunHooks, Runner};
use crate::selftest::model_server::ModelServer;
use crate::selftest::npm_registry::NpmRegistry;
use crate::state::StateDir;

#[derive(Debug, Clone)]
pub struct SuiteConfig {
    pub agent: AgentKind,
    pub trust: Trust,
    /// One rule weakened; the run must then show the matching escape.
    pub mutation: Option<Mutation>,
    /// Run the unconfined controls (skipped in mutation runs, which the base run covers).
    pub controls: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct AttemptReport {
    pub id: &'static str,
    pub what: String,
    pub rule: Rule,
    /// The same command escaped when run unconfined (`None`: no unconfined form).
    pub control_escaped: Option<bool>,
    /// The attempt reached the sandbox (its marker, or a tool result, came back).
    pub ran: bool,
    pub escaped: bool,
    /// For file tools: the refusal came from the runner's rules.
    pub refused_by_runner: Option<bool>,
    pub evidence: String,
    /// For network attempts: the requests the runner's decider allowed and refused, from
    /// the job's network log (none: the request never reached the decider).
    pub network: Option<(usize, usize)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ControlReport {
    pub name: String,
    pub passed: bool,
    pub detail: String,
}

impl ControlReport {
    pub(super) fn new(name: &str, passed: bool, detail: String) -> ControlReport {
        ControlReport {
            name: name.into(),
            passed,
            detail,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SuiteReport {
    pub agent: AgentKind,
    pub trust: Trust,
    pub mutation: Option<Mutation>,
    pub attempts: Vec<AttemptReport>,
    pub controls: Vec<ControlReport>,
    pub job: Option<JobResult>,
    /// `METHOD path` of every request the scripted model's server received.
    pub requests: Vec<String>,
    pub seconds: f64,
}

impl SuiteReport {
    pub fn escaped(&self) -> Vec<&AttemptReport> {
        self.attempts.iter().filter(|a| a.escaped).collect()
    }

    pub fn failed_controls(&self) -> Vec<&ControlReport> {
        self.controls.iter().filter(|c| !c.passed).collect()
    }

    /// The boundary held and the run proves it: nothing escaped and every control passed.
    pub fn holds(&self) -> bool {
        self.escaped().is_empty() && self.failed_controls().is_empty()
    }

    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for a in &self.attempts {
            let verdict = if a.escaped { "ESCAPED" } else { "refused" };
            let net = match a.network {
                Some((allowed, refused)) => {
                    format!(" [decider: {allowed} allowed, {refused} refused]")
                }
                None => String::new(),
            };
            // The suite's own search says how far it looked.
            let searched = match a.id {
                "agent-holds-secret" => format!(" [{}]", a.evidence),
                _ => String::new(),
            };
            out.push(format!(
                "{verdict:<8} {:<24} {}{net}{searched}",
                a.id, a.what
            ));
        }
        for c in &self.controls {
            let verdict = if c.passed { "ok" } else { "FAILED" };
            out.push(format!("control {verdict:<6} {:<32} {}", c.name, c.detail));
        }
        out
    }

    pub fn summary(&self) -> String {
        format!(
            "{} ({:?}): {} attempts, {} refused, {} escaped; {}/{} controls passed; {:.1}s",
            self.agent.name(),
            self.trust,
            self.attempts.len(),
            self.attempts.iter().filter(|a| !a.escaped).count(),
            self.escaped().len(),
            self.controls.iter().filter(|c| c.passed).count(),
            self.controls.len(),
            self.seconds,
        )
    }
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
    let job = Job {
        id: format!("boundary-{}-{}", cfg.agent.name(), world.token),
        repo: world.repo.display().to_string(),
        rev: world.rev.clone(),
        git_ref: Some("main".into()),
        trust: cfg.trust,
        agent: cfg.agent,
        account: "main".into(),
        prompt: "Carry out the boundary suite's steps.".into(),
        timeout: Duration::from_secs(300),
    };
    let mut env_source: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| !world.planted_env().iter().any(|(p, _)| p == k))
        .chain(world.planted_env())
        .collect();
    if let Some(c) = &company {
        // The proxy verifies the stand-in's HTTPS front as it would a registry's certificate.
        env_source.retain(|(k, _)| k != "NODE_EXTRA_CA_CERTS");
        env_source.push((
            "NODE_EXTRA_CA_CERTS".into(),
            c.front.cert.display().to_string(),
        ));
    }
    let config = suite_config(&world, &server, cfg)?;
    // In the state dir (which `read-runner-state` reads), and where the runner is told its
    // config is, outside it (which `rotate-secrets` replaces).
    for file in [state.config_file(), world.config_file.clone()] {
        std::fs::write(
            &file,
            serde_json::to_string_pretty(&config).unwrap_or_default(),
        )
        .map_err(|e| format!("writing the runner's config {}: {e}", file.display()))?;
    }

    // The runner the job runs in, as an operator would run it; its model gateway is started
    // now, so the gateway attempts can name its port and a live token (the control grant's,
    // open all through the job: the strongest case, an attacker holding a valid token).
    let mut runner = Runner::new(state.clone(), config.clone());
    runner.config_file = Some(world.config_file.clone());
    runner.env_source = env_source.clone();
    runner.operator_home = Some(world.operator_home.clone());
    let server_confine = server.confiner();
    let proxy_confine = server.confiner();
    let enter_company = company.as_ref().map(|c| c.planted.enterer());
    runner.hooks = RunHooks {
        agent_command: Some(Arc::new(move |cmd: &mut Command| {
            server_confine(cmd);
            if let Some(enter) = &enter_company {
                enter(cmd);
            }
        })),
        policy: {
            let bare = crate::workspace::bare_clone_path(&state, &job.repo);
            let mutation = cfg.mutation;
            let mut hosts: Vec<String> = registry.iter().map(NpmRegistry::host).collect();
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
    };
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
        run_controls(
            &world,
            &targets,
            &attempts,
            &server,
            registry.as_ref(),
            &env_source,
            &mut control_results,
            &mut controls,
        )?;
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
    after_job_controls(
        &world,
        &server,
        &result,
        &outputs,
        &reports,
        cfg,
        &helpers,
        &mut controls,
    );
    gateway_controls(
        &world,
        &server,
        &exchanges[served_before.min(exchanges.len())..],
        &result,
        &job_root,
        (gateway, control_grant),
        &mut controls,
    );
    if attempts.iter().any(|a| a.id == "rotate-secrets") {
        controls.push(rotation_control(&rotator, &targets.checkout));
    }
    drop(rotator);
    if let Some(r) = &registry {
        registry_controls(
            r,
            &registry_seen,
            &result,
            &net_log,
            &outputs,
            &world,
            cfg,
            &mut controls,
        );
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
    // Whatever escaped is removed, so a failed run does not leave planted files behind.
    for a in &attempts {
        for p in a.detect.host_paths() {
            let _ = std::fs::remove_file(p);
        }
    }
    let _ = std::fs::remove_file(format!("/tmp/qr-shellhook-{}", world.token));
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

/// The stand-in's HTTPS front and the host configuration a company machine has, planted for
/// the job's agent only.
struct Company {
    front: crate::selftest::tls_front::TlsFront,
    planted: super::host_config::Planted,
    /// npm's global config file, as planted.
    npmrc: PathBuf,
}

impl Company {
    fn new(world: &World, server: &ModelServer, registry: &NpmRegistry) -> Result<Company, String> {
        let listener = server
            .bind_loopback()
            .map_err(|e| format!("binding the stand-in's HTTPS front: {e}"))?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let mut listeners = vec![listener];
        listeners.extend(server.bind_loopback_v6(port));
        let front = crate::selftest::tls_front::TlsFront::start(
            listeners,
            registry.port,
            &world.path(),
            |cmd| server.confine(cmd),
        )
        .map_err(|e| format!("starting the stand-in's HTTPS front: {e}"))?;
        registry.set_tls_port(front.port);
        let npmrc = super::host_config::npm_globalconfig()
            .unwrap_or_else(|| PathBuf::from("/usr/etc/npmrc"));
        let staging = world.path().join("planted");
        std::fs::create_dir_all(&staging).map_err(|e| e.to_string())?;
        let planted = super::host_config::Planted::new(
            super::host_config::files(&npmrc, &world.token),
            &staging,
        )
        .map_err(|e| format!("planting the host's package-manager config: {e}"))?;
        Ok(Company {
            front,
            planted,
            npmrc,
        })
    }
}

/// The package managers' reads over HTTPS with the company configuration planted (the output
/// of [`attempts::permitted_package_manager_reads`]): the sandbox reads the planted files, npm
/// and pip fail on them without the runner's variables, and with them every client the host
/// has reads through the decider.
fn package_manager_controls(
    company: &Company,
    output: &str,
    log: &[String],
    controls: &mut Vec<ControlReport>,
) {
    let mut add = |name: &str, passed: bool, detail: String| {
        controls.push(ControlReport::new(name, passed, detail));
    };
    let planted: Vec<String> = company
        .planted
        .files
        .iter()
        .map(|(p, _)| p.display().to_string())
        .collect();
    add(
        "the sandbox reads the planted host config",
        output.contains("PLANTED-NPMRC") && output.contains("PLANTED-PIPCONF"),
        format!("{} (cafile, cert, a company proxy)", planted.join(", ")),
    );
    let without = |client: &str| {
        output
            .lines()
            .find_map(|l| l.strip_prefix(&format!("WITHOUT {client}: ")))
            .unwrap_or("")
            .to_string()
    };
    let (npm, pip) = (without("npm"), without("pip"));
    add(
        "without the runner's variables, npm and pip fail on it",
        npm.contains("CERT") && pip.to_ascii_lowercase().contains("certificate"),
        format!("npm: {npm:?}; pip: {pip:?}"),
    );
    let reads: Vec<&str> = output
        .lines()
        .filter_map(|l| l.strip_prefix("READ "))
        .collect();
    let ok: Vec<&str> = reads
        .iter()
        .filter(|l| l.split(' ').nth(1) == Some("ok"))
        .filter_map(|l| l.split(' ').next())
        .collect();
    let failed: Vec<&&str> = reads
        .iter()
        .filter(|l| l.split(' ').nth(1) == Some("FAILED"))
        .collect();
    let skipped: Vec<&str> = reads
        .iter()
        .filter(|l| l.split(' ').nth(1) == Some("skipped:"))
        .filter_map(|l| l.split(' ').next())
        .collect();
    let host = format!("localhost:{}", company.front.port);
    let wheel = crate::selftest::wheel::file_name(
        crate::selftest::npm_registry::PACKAGE,
        crate::selftest::npm_registry::VERSION,
    );
    let logged = |path: &str| {
        log.iter()
            .any(|l| l.contains(&format!("GET {host} {path}")) && l.ends_with(" allowed"))
    };
    let pkg = crate::selftest::npm_registry::PACKAGE;
    let unlogged: Vec<String> = [
        format!("/{pkg}"),
        format!("/{pkg}/-/{pkg}-"),
        format!("/simple/{pkg}"),
        format!("/files/{wheel}"),
    ]
    .into_iter()
    .filter(|p| !logged(p))
    .collect();
    let through_decider = unlogged.is_empty();
    add(
        "package managers read over HTTPS through the decider despite it",
        output.contains("PM-READS-RAN")
            && ["npm", "npm-install", "pip"].iter().all(|c| ok.contains(c))
            && failed.is_empty()
            && through_decider,
        if failed.is_empty() {
            format!(
                "ok: {}; skipped (not on this host): {}; decider logged the packument, tarball, index and wheel: {}",
                ok.join(", "),
                if skipped.is_empty() { "none".into() } else { skipped.join(", ") },
                if through_decider {
                    "yes".to_string()
                } else {
                    format!("no allowed GET {host} of {}", unlogged.join(", "))
                }
            )
        } else {
            failed
                .iter()
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
                .join(" | ")
        },
    );
    if std::env::var_os("QR_BOUNDARY_DEBUG").is_some() {
        eprintln!("--- package manager reads ---\n{output}");
        eprintln!("--- network log ---\n{}", log.join("\n"));
        eprintln!("--- not logged as allowed GETs of {host}: {unlogged:?}");
    }
}

fn suite_config(world: &World, server: &ModelServer, cfg: &SuiteConfig) -> Result<Config, String> {
    Ok(scripted_config(
        cfg.agent,
        &world.account_file,
        server,
        cfg.trust == Trust::Untrusted,
    ))
}

/// A runner config with one account, `main`, for `agent`, whose model is the scripted one
/// and whose credential is `account_file` (see [`write_scripted_account`]).
pub(crate) fn scripted_config(
    agent: AgentKind,
    account_file: &std::path::Path,
    server: &ModelServer,
    allow_untrusted: bool,
) -> Config {
    let mut config = Config::default();
    config
        .nix
        .options
        .insert("substituters".into(), String::new());
    config.allow_untrusted = allow_untrusted;
    let account = match agent {
        AgentKind::Claude => Account::Claude(ClaudeAccount {
            api_key_file: Some(account_file.to_path_buf()),
            // The runner's gateway forwards there, from the host's namespace.
            base_url: Some(server.upstream_url()),
            ..Default::default()
        }),
        AgentKind::Opencode => Account::Opencode(OpencodeAccount {
            auth_file: Some(account_file.to_path_buf()),
            config: Some(serde_json::json!({
                "provider": {"scripted": {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "scripted",
                    "options": {"baseURL": format!("{}/v1", server.upstream_url())},
                    "models": {"scripted": {"name": "scripted", "tool_call": true}},
                }},
            })),
            model: Some("scripted/scripted".into()),
            budget: None,
        }),
    };
    config.accounts.insert("main".into(), account);
    config
}

/// Writes the scripted model's credential for `agent` at `path`: Claude Code's key file, or
/// opencode's `auth.json`.
pub(crate) fn write_scripted_account(
    agent: AgentKind,
    path: &std::path::Path,
    key: &str,
) -> std::io::Result<()> {
    let text = match agent {
        AgentKind::Claude => key.to_string(),
        AgentKind::Opencode => {
            serde_json::json!({"scripted": {"type": "api", "key": key}}).to_string()
        }
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, text)
}

/// Where the unconfined controls run: a worktree of the same bare clone.
fn control_checkout(world: &World) -> PathBuf {
    world.path().join("control-checkout")
}

/// Each shell attempt, run unconfined from a worktree of the same bare clone, must escape;
/// then its effects are undone before the job runs.
#[allow(clippy::too_many_arguments)]
fn run_controls(
    world: &World,
    t: &Targets,
    attempts: &[Attempt],
    server: &ModelServer,
    registry: Option<&NpmRegistry>,
    env_source: &[(String, String)],
    results: &mut [Option<bool>],
    controls: &mut Vec<ControlReport>,
) -> Result<(), String> {
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
    let git_undo = super::git_attacks::ControlUndo::capture(world, &t.bare, &checkout)?;
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    // What the attempts on opencode's executor aim at unconfined (the job's is not up yet).
    let _executor = match t.agent {
        AgentKind::Opencode => Some(super::shell_attacks::ControlExecutor::start(world)?),
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
fn rotation_control(rotator: &super::world::Rotator, checkout: &std::path::Path) -> ControlReport {
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
async fn project_config_control(world: &World, t: &Targets, agent: AgentKind) -> ControlReport {
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
fn shellhook_control(world: &World, result: &JobResult, state: &StateDir) -> ControlReport {
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

#[allow(clippy::too_many_arguments)]
fn after_job_controls(
    world: &World,
    server: &ModelServer,
    result: &JobResult,
    outputs: &std::collections::BTreeMap<usize, String>,
    reports: &[AttemptReport],
    cfg: &SuiteConfig,
    helpers: &[libc::pid_t],
    controls: &mut Vec<ControlReport>,
) {
    let mut add = |name: &str, passed: bool, detail: String| {
        controls.push(ControlReport::new(name, passed, detail));
    };
    add(
        "the job ran to the end",
        result.outcome == Outcome::Succeeded,
        format!(
            "{:?} {}",
            result.outcome,
            result.message.clone().unwrap_or_default()
        ),
    );
    let permitted = outputs.get(&0).cloned().unwrap_or_default();
    let devshell_ok = cfg.trust == Trust::Untrusted
        || (permitted.contains("devshell=devshell-ok") && permitted.contains("ran"));
    add(
        "a permitted command writes the checkout and $TMPDIR",
        permitted.contains("PERMITTED-RAN") && devshell_ok,
        clip(&permitted, 200),
    );
    if cfg.trust == Trust::Trusted {
        let net = outputs.get(&1).cloned().unwrap_or_default();
        add(
            "a registry request goes through the sandbox's proxy",
            net.contains("NET-RAN")
                && detect(&Detect::ProxyForwarded, &net, Seen::default(), world)
                && https_forwarded(&net),
            clip(&net, 200),
        );
    }
    let not_ran: Vec<&str> = reports.iter().filter(|r| !r.ran).map(|r| r.id).collect();
    add(
        "every attempt ran (its marker came back)",
        not_ran.is_empty(),
        if not_ran.is_empty() {
            format!("{} attempts", reports.len())
        } else {
            format!("no marker: {}", not_ran.join(", "))
        },
    );
    let not_runner: Vec<&str> = reports
        .iter()
        .filter(|r| r.refused_by_runner == Some(false) && !r.escaped)
        .map(|r| r.id)
        .collect();
    add(
        "file-tool refusals come from the runner's rules",
        not_runner.is_empty(),
        if not_runner.is_empty() {
            "all".into()
        } else {
            format!("not the runner's refusal: {}", not_runner.join(", "))
        },
    );
    let offered = offered_tools(server);
    let wanted: &[&str] = match cfg.agent {
        AgentKind::Claude => &["Bash", "Read", "Write"],
        AgentKind::Opencode => &["bash", "read", "write"],
    };
    let missing: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|t| !offered.contains(*t))
        .collect();
    add(
        "the agent offers every tool the script calls",
        missing.is_empty(),
        if missing.is_empty() {
            wanted.join(", ")
        } else {
            format!("missing: {}", missing.join(", "))
        },
    );
    let closing = outputs
        .iter()
        .next_back()
        .map(|(_, o)| o.clone())
        .unwrap_or_default();
    let committing = outputs
        .iter()
        .rev()
        .nth(1)
        .map(|(_, o)| o.clone())
        .unwrap_or_default();
    add(
        "nothing left uncommitted in the checkout",
        result.uncommitted.is_empty(),
        if result.uncommitted.is_empty() {
            "git status --ignored is clean".into()
        } else {
            format!(
                "{} (closing commit said: {}; last command: {})",
                result.uncommitted.join(", "),
                clip(&committing, 300),
                clip(&closing, 100)
            )
        },
    );
    // The job's own temp dirs, as its rendered settings name them: other jobs on this machine
    // may come and go meanwhile.
    let job_root = crate::workspace::job_root(&StateDir::at(&world.state), &result.job_id);
    let own = job_temp_dirs(&job_root);
    let leaked: Vec<&PathBuf> = own.iter().filter(|p| p.exists()).collect();
    add(
        "no temp dir left",
        !own.is_empty() && leaked.is_empty(),
        if own.is_empty() {
            "the job's temp dirs are unknown".into()
        } else {
            format!(
                "{} checked{}",
                own.len(),
                leaked
                    .iter()
                    .map(|p| format!(", left: {}", p.display()))
                    .collect::<String>()
            )
        },
    );
    let mut left = server.confined_processes();
    left.retain(|pid| !helpers.contains(pid));
    add(
        "no process left",
        left.is_empty(),
        format!("{} in the job's network namespace", left.len()),
    );
    let fired: Vec<&str> = attempts::project_config_markers(world)
        .into_iter()
        .filter(|(_, p)| p.exists())
        .map(|(n, _)| n)
        .collect();
    add(
        "the checkout's config never ran on the host",
        fired.is_empty(),
        if fired.is_empty() {
            "no hook, MCP server or plugin fired".into()
        } else {
            format!("fired: {}", fired.join(", "))
        },
    );
    let secrets = world.secrets.all();
    let bodies: Vec<String> = server.requests().iter().map(|b| b.to_string()).collect();
    // The escapes above put secrets into tool results on purpose when a rule is weakened;
    // the prompt (the first request) must hold none in any run.
    let first = bodies.first().cloned().unwrap_or_default();
    let in_prompt: Vec<&String> = secrets
        .iter()
        .copied()
        .filter(|x| first.contains(x.as_str()))
        .collect();
    add(
        "no secret in the prompt (instruction files are links to secrets)",
        in_prompt.is_empty() && !first.is_empty(),
        if in_prompt.is_empty() {
            "none".into()
        } else {
            "a secret reached the prompt".into()
        },
    );
    if cfg.mutation.is_none() {
        let anywhere = secrets
            .iter()
            .any(|x| bodies.iter().any(|b| b.contains(x.as_str())));
        add(
            "no secret reaches the model in any request",
            !anywhere,
            format!("{} requests scanned", bodies.len()),
        );
    }
}

fn offered_tools(server: &ModelServer) -> BTreeSet<String> {
    server
        .requests()
        .iter()
        .filter_map(|b| b.get("tools").and_then(|t| t.as_array()).cloned())
        .flatten()
        .filter_map(|t| {
            t.get("name")
                .or_else(|| t.get("function").and_then(|f| f.get("name")))
                .and_then(|n| n.as_str())
                .map(str::to_string)
        })
        .collect()
}

/// Tool results by the script step they answer (`toolu_scripted_N`, `call_scripted_N`).
fn tool_outputs(server: &ModelServer) -> std::collections::BTreeMap<usize, String> {
    server
        .tool_results()
        .into_iter()
        .filter_map(|r| {
            let n = r.id.rsplit('_').next()?.parse::<usize>().ok()?;
            Some((n, r.text))
        })
        .collect()
}

/// What the servers received while an attempt ran.
#[derive(Default, Clone, Copy)]
struct Seen<'a> {
    exchanges: &'a [crate::selftest::model_server::Exchange],
    /// `METHOD path` of the stand-in registry's requests.
    registry: &'a [String],
}

fn detect(d: &Detect, output: &str, seen: Seen<'_>, world: &World) -> bool {
    let exchanges = seen.exchanges;
    match d {
        Detect::RegistryGot(prefix) => seen.registry.iter().any(|r| r.starts_with(prefix.as_str())),
        Detect::OutputHas(text) => output.contains(text.as_str()),
        Detect::LaterJobSees { file, text } => {
            match super::git_attacks::later_job_view(world, file) {
                Ok(content) => content.contains(text.as_str()),
                Err(e) => {
                    tracing::warn!("{e}");
                    true
                }
            }
        }
        Detect::Any(all) => all.iter().any(|d| detect(d, output, seen, world)),
        Detect::HostPath(p) => p.exists() || p.symlink_metadata().is_ok(),
        Detect::HostFileHas(p, text) => {
            std::fs::read_to_string(p).is_ok_and(|c| c.contains(text.as_str()))
        }
        Detect::ServerGot(path) => exchanges.iter().any(|e| e.path == *path),
        Detect::EnvLeak => {
            world
                .planted_env()
                .iter()
                .any(|(_, v)| output.contains(v.as_str()))
                || output.lines().any(|l| {
                    [
                        "OPENCODE_",
                        "XDG_DATA_HOME=",
                        "SSH_AUTH_SOCK=",
                        "ANTHROPIC_API_KEY=",
                        "AWS_",
                        "GH_TOKEN=",
                        "GITHUB_TOKEN=",
                        "OPENAI_API_KEY=",
                    ]
                    .iter()
                    .any(|bad| l.starts_with(bad))
                        // The policy's own: the job CA's bundle for the AWS CLI.
                        && !l.starts_with("AWS_CA_BUNDLE=")
                })
        }
        // 403: the proxy refused; 000: nothing answered at all (no proxy, no route).
        Detect::ProxyForwarded => {
            output.contains("status=")
                && !output.contains("status=403")
                && !output.contains("status=000")
        }
    }
}

/// The HTTPS request of the permitted network step went through: terminated with the job's CA
/// (trusted by the command), decided, forwarded (5xx offline). `000`: TLS failed.
fn https_forwarded(output: &str) -> bool {
    output.contains("https-status=")
        && !output.contains("https-status=000")
        && !output.contains("https-status=403")
}

/// The job's network log, one line per decided request (empty without one).
pub(crate) fn network_log(result: &JobResult) -> Vec<String> {
    result
        .network
        .as_ref()
        .and_then(|n| std::fs::read_to_string(&n.log).ok())
        .map(|t| t.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Allowed and refused lines of `log` whose path holds `tag`.
fn decided(log: &[String], tag: &str) -> (usize, usize) {
    let mine = log.iter().filter(|l| l.contains(tag));
    mine.fold((0, 0), |(a, r), l| {
        if l.contains(" allowed") {
            (a + 1, r)
        } else {
            (a, r + 1)
        }
    })
}

/// Registry reads went through the decider and the network log shows each decision.
#[allow(clippy::too_many_arguments)]
fn registry_controls(
    registry: &NpmRegistry,
    seen: &[String],
    result: &JobResult,
    log: &[String],
    outputs: &std::collections::BTreeMap<usize, String>,
    world: &World,
    cfg: &SuiteConfig,
    controls: &mut Vec<ControlReport>,
) {
    use crate::selftest::npm_registry::{PACKAGE, VERSION};
    let mut add = |name: &str, passed: bool, detail: String| {
        controls.push(ControlReport::new(name, passed, detail));
    };
    let reads = outputs.get(&2).cloned().unwrap_or_default();
    let tarball = format!("GET /{PACKAGE}/-/{PACKAGE}-{VERSION}.tgz");
    let got = |r: &str| seen.iter().any(|s| s == r);
    let read_ok = reads.contains("READS-RAN")
        && reads.contains(&format!("VIEW={VERSION}"))
        && reads.contains("INSTALL-OK")
        && reads.contains("get-status=200")
        && got(&format!("GET /{PACKAGE}"))
        && got(&tarball);
    let (allowed, refused) = decided(log, &format!("127.0.0.1:{} /", registry.port));
    add(
        "registry reads go through the decider (npm view, npm install, GET)",
        read_ok,
        format!(
            "{}; the registry got {} requests; decider: {allowed} allowed, {refused} refused",
            clip(&reads, 160),
            seen.len()
        ),
    );
    let host = registry.host();
    let token = &world.token;
    let mut wanted = vec![
        format!("GET {host} /{PACKAGE} allowed"),
        format!("GET {host} /qr-get-{token} allowed"),
        "GET registry.npmjs.org:443 / allowed".to_string(),
    ];
    let publish_refused = format!("PUT {host} /qr-publish-{token} refused 403 read_only");
    match cfg.mutation {
        None => {
            wanted.push(publish_refused);
            wanted.push(format!(
                "POST {host} /qr-post-{token} refused 403 read_only"
            ));
        }
        // Weakened: the same publish is now allowed, and logged so.
        Some(super::Mutation::RegistryWrites) => {
            wanted.push(format!("PUT {host} /qr-publish-{token} allowed"))
        }
        Some(_) => {}
    }
    let missing: Vec<&String> = wanted
        .iter()
        .filter(|w| !log.iter().any(|l| l.contains(w.as_str())))
        .collect();
    let summary = result
        .network
        .as_ref()
        .map(|n| format!("{} allowed, {} refused", n.allowed, n.refused))
        .unwrap_or_else(|| "no network summary in the result".into());
    add(
        "the network log shows each request with its decision",
        result.network.is_some() && missing.is_empty(),
        if missing.is_empty() {
            format!("{} lines; {summary}", log.len())
        } else {
            format!(
                "missing: {}",
                missing
                    .iter()
                    .map(|m| m.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        },
    );
}

fn refused_by_runner(agent: AgentKind, output: &str) -> bool {
    match agent {
        // dontAsk mode: "Permission to use Read has been denied ..."
        AgentKind::Claude => output.contains("denied") || output.contains("Permission"),
        AgentKind::Opencode => output.contains("quest-runner"),
    }
}

/// The private temp dirs of the job at `job_root`, read back from the sandbox settings the
/// runner rendered for it (Claude Code's settings or srt's).
fn job_temp_dirs(job_root: &std::path::Path) -> Vec<PathBuf> {
    let runner = job_root.join("runner");
    let files = [runner.join("claude/settings.json"), runner.join("srt.json")];
    let mut dirs = Vec::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        let fs = v
            .get("sandbox")
            .and_then(|s| s.get("filesystem"))
            .or_else(|| v.get("filesystem"));
        let writes = fs
            .and_then(|f| f.get("allowWrite"))
            .and_then(|w| w.as_array());
        for w in writes.into_iter().flatten().filter_map(|w| w.as_str()) {
            let name = std::path::Path::new(w)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned());
            if name.is_some_and(|n| n.starts_with(crate::workspace::TEMP_PREFIX)) {
                dirs.push(PathBuf::from(w));
            }
        }
    }
    dirs
}

fn clip(s: &str, max: usize) -> String {
    let flat = s.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &flat[..i]),
        None => flat,
    }
}

/// A grant of the runner's gateway for the account the job runs under, held by the suite:
/// its live token is what the gateway attempts use, and what their unconfined controls spend.
fn open_control_grant(
    gateway: &crate::gateway::Gateway,
    config: &Config,
    world: &World,
) -> Result<crate::gateway::JobGrant, String> {
    use crate::gateway::{account::route, JobSpec, Route};
    let account = config.accounts.get("main").ok_or("no account main")?;
    let auth_json = std::fs::read_to_string(&world.account_file)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let Route::Gateway {
        upstream, secret, ..
    } = route("main", account, auth_json.as_ref())?
    else {
        return Err("the suite's account is not served by the gateway".into());
    };
    gateway.open(JobSpec {
        job_id: format!("boundary-control-{}", world.token),
        account: "main".into(),
        upstream,
        credential: gateway.credential(&secret)?,
        token_limit: None,
        budget: None,
        log: world.path().join("control-model.log"),
    })
}

/// Searches the job's agent for the account's secret until `stop`: the environment,
/// arguments and open files of every process of the job (those whose environment names the
/// job's directory or a directory its agent was given), and the directories the agent was
/// given (see [`super::secret_search`]).
fn watch_agent(
    secret: &str,
    job_root: &std::path::Path,
    stop: &std::sync::atomic::AtomicBool,
) -> (super::secret_search::Findings, usize) {
    use super::secret_search::{is_agent, own_dirs, search_process, search_tree, Findings};
    let mut findings = Findings::default();
    let mut agents = BTreeSet::new();
    let mut markers = vec![job_root.to_string_lossy().into_owned()];
    let mut last_tree = None::<Instant>;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        let pids: Vec<u32> = crate::procfs::pids()
            .into_iter()
            .filter(|p| crate::procfs::environ_mentions(*p, &markers))
            .collect();
        let mut dirs = BTreeSet::new();
        for pid in &pids {
            search_process(*pid, secret, &mut findings);
            if is_agent(*pid) {
                agents.insert(*pid);
                dirs.extend(own_dirs(*pid));
            }
        }
        for dir in &dirs {
            let dir = dir.to_string_lossy().into_owned();
            if !markers.contains(&dir) {
                markers.push(dir);
            }
        }
        let due = match last_tree {
            Some(t) => t.elapsed() > Duration::from_secs(2),
            None => true,
        };
        if !agents.is_empty() && due {
            dirs.insert(job_root.join("runner"));
            for dir in &dirs {
                search_tree(dir, secret, &mut findings);
            }
            last_tree = Some(Instant::now());
        }
    }
    (findings, agents.len())
}

/// The secret search as an attempt: found anywhere is an escape. Its control runs the same
/// search on what the agents held before the gateway — a process with the key in its
/// environment, and a private config dir with a link to the account's file — and must find it.
fn secret_search_report(
    (findings, agents): &(super::secret_search::Findings, usize),
    world: &World,
    controls: bool,
) -> AttemptReport {
    use super::secret_search::{search_process, search_tree, Findings};
    let control_escaped = controls.then(|| {
        let mut f = Findings::default();
        let tree = world.path().join("secret-search-control");
        let _ = std::fs::create_dir_all(tree.join("claude"));
        let _ =
            std::os::unix::fs::symlink(&world.account_file, tree.join("claude/.credentials.json"));
        search_tree(&tree, &world.secrets.account, &mut f);
        let in_tree = !f.found.is_empty();
        let _ = std::fs::remove_dir_all(&tree);
        let mut f = Findings::default();
        if let Ok(mut child) = Command::new("sleep")
            .arg("30")
            .env("ANTHROPIC_API_KEY", &world.secrets.account)
            .spawn()
        {
            super::secret_search::wait_for_exec(child.id());
            search_process(child.id(), &world.secrets.account, &mut f);
            let _ = child.kill();
            let _ = child.wait();
        }
        let in_env = !f.found.is_empty();
        if !(in_tree && in_env) {
            tracing::warn!(
                in_tree,
                in_env,
                "the secret search's control missed the secret"
            );
        }
        in_tree && in_env
    });
    AttemptReport {
        id: "agent-holds-secret",
        what: "find the account's secret in the agent's environment (/proc/<agent>/environ), arguments, open files and private dirs, from outside".into(),
        rule: attempts::Rule::Gateway,
        control_escaped,
        ran: *agents > 0,
        escaped: !findings.found.is_empty(),
        refused_by_runner: None,
        evidence: if findings.found.is_empty() {
            format!(
                "not found: {} agent process(es), {} processes and {} files searched",
                agents, findings.processes, findings.files
            )
        } else {
            format!("found in {}", findings.found.join(", "))
        },
        network: None,
    }
}

/// One raw request to the gateway from where the confined agent is; its status code.
fn gateway_status(server: &ModelServer, port: u16, token: &str, tag: &str) -> Result<u16, String> {
    use std::io::{Read, Write};
    let mut stream = server
        .connect_loopback(port)
        .map_err(|e| format!("connecting to the gateway: {e}"))?;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let body = r#"{"model":"scripted","max_tokens":1,"messages":[]}"#;
    let request = format!(
        "POST /v1/messages?qr={tag} HTTP/1.1\r\nhost: 127.0.0.1\r\nx-api-key: {token}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).map_err(|e| e.to_string())?;
    String::from_utf8_lossy(&head[9..12])
        .parse()
        .map_err(|_| "no status line".to_string())
}

/// The job's gateway token, as the runner rendered it into the agent's private files.
fn job_token(job_root: &std::path::Path) -> Option<String> {
    let runner = job_root.join("runner");
    if let Ok(t) = std::fs::read_to_string(crate::agent::claude::token_file(&runner)) {
        return Some(t.trim().to_string());
    }
    let config = std::fs::read_to_string(runner.join("opencode/config/opencode/opencode.json"));
    let v: serde_json::Value = serde_json::from_str(&config.ok()?).ok()?;
    v["provider"]["scripted"]["options"]["apiKey"]
        .as_str()
        .map(str::to_string)
}

/// The gateway's own claims: every model request the scripted model got during the job
/// carried the account's real key and came in through the gateway; the job's use is in its
/// result and its model log (which holds no secret); a job's token is worthless once the job
/// ended, while a live one (the control grant's) is not.
fn gateway_controls(
    world: &World,
    server: &ModelServer,
    during_job: &[crate::selftest::model_server::Exchange],
    result: &JobResult,
    job_root: &std::path::Path,
    (gateway, control_grant): (&crate::gateway::Gateway, Option<crate::gateway::JobGrant>),
    controls: &mut Vec<ControlReport>,
) {
    let mut add = |name: &str, passed: bool, detail: String| {
        controls.push(ControlReport::new(name, passed, detail));
    };
    let secret = &world.secrets.account;
    // Attempts' own requests are judged by their attempts.
    let model: Vec<_> = during_job
        .iter()
        .filter(|e| !e.path.starts_with("/probe/") && !e.path.contains("qr=gw-"))
        .collect();
    let bad: Vec<String> = model
        .iter()
        .filter(|e| {
            e.key.as_deref() != Some(secret.as_str()) || (server.host_addr.is_some() && !e.via_host)
        })
        .map(|e| format!("{} {} (via host: {})", e.method, e.path, e.via_host))
        .collect();
    add(
        "every model request carried the real key, through the gateway",
        !model.is_empty() && bad.is_empty(),
        if bad.is_empty() {
            format!("{} requests", model.len())
        } else {
            format!("not: {}", bad.join("; "))
        },
    );
    // Model lists are logged but not metered.
    let metered = model
        .iter()
        .filter(|e| {
            let path = e.path.split('?').next().unwrap_or_default();
            !path.ends_with("/models") && !path.contains("/models/")
        })
        .count();
    let log = std::fs::read_to_string(job_root.join("model.log")).unwrap_or_default();
    let logged = log.lines().filter(|l| l.contains(" 200 model=")).count();
    let usage = result.usage.clone().unwrap_or_default();
    let token = job_token(job_root);
    let clean =
        !log.contains(secret.as_str()) && token.as_ref().is_some_and(|t| !log.contains(t.as_str()));
    add(
        "the job's model use is in its result and model.log, without secrets",
        result.usage.is_some()
            && usage.requests as usize == metered
            && logged == model.len()
            && clean,
        format!(
            "usage: {} requests, {} tokens; model.log: {logged} answered lines; {} requests seen; secret or token in the log: {}",
            usage.requests,
            usage.tokens(),
            model.len(),
            !clean
        ),
    );
    let port = gateway.addr.port();
    let tag = format!("gw-after-{}", world.token);
    let before = server.exchanges().len();
    let ended = token
        .as_deref()
        .map(|t| gateway_status(server, port, t, &tag));
    let live = control_grant
        .as_ref()
        .map(|g| gateway_status(server, port, &g.token, &format!("{tag}-live")));
    let revoked_token = control_grant.as_ref().map(|g| g.token.clone());
    drop(control_grant);
    let revoked =
        revoked_token.map(|t| gateway_status(server, port, &t, &format!("{tag}-revoked")));
    let reached: Vec<String> = server.exchanges()[before..]
        .iter()
        .map(|e| e.path.clone())
        .collect();
    let passed = matches!(ended, Some(Ok(401)))
        && matches!(live, Some(Ok(200)))
        && matches!(revoked, Some(Ok(401)))
        && reached == vec![format!("/v1/messages?qr={tag}-live")];
    add(
        "a job's token is worthless after the job ends (a live one is not)",
        passed,
        format!("ended job's token: {ended:?}; live token: {live:?}; after revoking it: {revoked:?}; the model got {reached:?}"),
    );
}
