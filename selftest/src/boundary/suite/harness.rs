//! What a suite run stands on, made before anything runs: the fixture with its planted secrets,
//! the scripted model, the stand-in registry and the company machine, and the runner the job
//! runs in with the suite's seams.

use super::internal_registry::InternalRegistry;
use super::push::Forge;
use super::setup::suite_config;
use super::SuiteConfig;
use crate::boundary::attempts::Targets;
use crate::boundary::fixture::Fixture;
use crate::boundary::mutation::Mutation;
use crate::model_server::ModelServer;
use crate::npm_registry::NpmRegistry;
use quest_runner::config::Config;
use quest_runner::gateway::JobGrant;
use quest_runner::job::{Job, Trust};
use quest_runner::run::{RunHooks, Runner};
use quest_runner::state::StateDir;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

/// The fixture and the servers of one run. The fields drop in the order written, as the locals
/// they replace did: the company machine's front before the registry behind it, the servers
/// before the fixture whose directory they use.
pub(super) struct Harness {
    /// Base trusted runs as root: the package managers read from the stand-in over HTTPS, as
    /// from a real registry, with the host's configuration planted as a company machine has it.
    pub(super) internal_registry: Option<InternalRegistry>,
    /// Trusted runs: a registry the commands reach as they would npm's, through the runner's
    /// proxy (the policy hook lists it as a registry: reads only).
    pub(super) registry: Option<NpmRegistry>,
    pub(super) server: ModelServer,
    /// The remote the runner pushes the job's commits to.
    pub(super) forge: Forge,
    pub(super) fixture: Fixture,
}

impl Harness {
    pub(super) fn start(cfg: &SuiteConfig) -> Result<Harness, String> {
        let fixture = Fixture::new(cfg.agent)?;
        // Loopback only, in a namespace of its own when we may create one: the agents' own
        // vendor traffic then fails at once instead of leaving the machine.
        let server = ModelServer::start_isolated_if_root(Vec::new())
            .map_err(|e| format!("starting the scripted model: {e}"))?;
        let registry = match cfg.trust {
            Trust::Trusted => Some(
                server
                    .bind_loopback()
                    .and_then(NpmRegistry::start)
                    .map_err(|e| format!("starting the stand-in registry: {e}"))?,
            ),
            Trust::Untrusted => None,
        };
        let forge = Forge::start(&fixture)?;
        let internal_registry = match (&registry, cfg.controls && super::is_root()) {
            (Some(r), true) => Some(InternalRegistry::new(&fixture, &server, r)?),
            _ => None,
        };
        Ok(Harness {
            internal_registry,
            registry,
            server,
            forge,
            fixture,
        })
    }

    /// The runner the job runs in, as an operator would run it: its config written where the
    /// attempts aim, the planted environment, and the suite's seams.
    pub(super) fn runner(
        &self,
        cfg: &SuiteConfig,
        state: &StateDir,
        job: &Job,
    ) -> Result<Runner, String> {
        let env_source = agent_env(&self.fixture, self.internal_registry.as_ref());
        let mut config = suite_config(&self.fixture, &self.server, cfg)?;
        config
            .push
            .insert(job.repo.clone(), self.forge.push_config(&self.fixture));
        write_config(state, &self.fixture, &config)?;
        let hooks = run_hooks(
            &self.server,
            self.internal_registry.as_ref(),
            self.registry.as_ref(),
            quest_runner::workspace::bare_clone_path(state, &job.repo),
            (cfg.mutation, cfg.agent_rules_off),
        );
        Ok(Runner::new(state.clone(), config)
            .with_config_file(self.fixture.config_file.clone())
            .with_environment(env_source, self.fixture.operator_home.clone())
            .with_hooks(hooks))
    }

    /// What the attempts aim at: the job's clone and checkout, the servers' ports, and the
    /// runner's gateway with the control grant's live token.
    pub(super) fn targets(
        &self,
        cfg: &SuiteConfig,
        state: &StateDir,
        job: &Job,
        (gateway, grant): (&quest_runner::gateway::Gateway, &JobGrant),
    ) -> Targets {
        Targets {
            agent: cfg.agent,
            trust: cfg.trust,
            bare: quest_runner::workspace::bare_clone_path(state, &job.repo),
            checkout: quest_runner::workspace::job_root(state, &job.id).join("checkout"),
            port: self.server.addr.port(),
            registry: self.registry.as_ref().map(|r| r.port),
            gateway: Some((gateway.addr.port(), grant.token.clone())),
            isolation: cfg.isolation,
        }
    }

    /// The suite's own helpers in the namespace, which outlive the job.
    pub(super) fn helpers(&self) -> Vec<rustix::process::RawPid> {
        self.internal_registry
            .iter()
            .map(|c| c.front.pid() as rustix::process::RawPid)
            .collect()
    }
}

/// The environment agents start from: the suite's own, with the fixture's planted secrets.
fn agent_env(
    fixture: &Fixture,
    internal_registry: Option<&InternalRegistry>,
) -> Vec<(String, String)> {
    let mut env_source: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| !fixture.planted_env().iter().any(|(p, _)| p == k))
        .chain(fixture.planted_env())
        .collect();
    if let Some(c) = internal_registry {
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
fn write_config(state: &StateDir, fixture: &Fixture, config: &Config) -> Result<(), String> {
    for file in [state.config_file(), fixture.config_file.clone()] {
        std::fs::write(
            &file,
            serde_json::to_string_pretty(config).unwrap_or_default(),
        )
        .map_err(|e| format!("writing the runner's config {}: {e}", file.display()))?;
    }
    Ok(())
}

/// The suite's seams in the runner: the agent and the proxy run in the model server's network
/// namespace (and the agent in the company machine's mounts), and the policy lists the
/// stand-in registry and takes the mutation under test.
fn run_hooks(
    server: &ModelServer,
    internal_registry: Option<&InternalRegistry>,
    registry: Option<&NpmRegistry>,
    bare: PathBuf,
    (mutation, agent_rules_off): (Option<Mutation>, bool),
) -> RunHooks {
    let server_confine = server.confiner();
    let proxy_confine = server.confiner();
    RunHooks {
        agent_command: Some(Arc::new(move |cmd: &mut Command| server_confine(cmd))),
        agent_mounts: internal_registry.map(|c| c.planted.hook()),
        dep_upstreams: None,
        policy: {
            let mut hosts: Vec<String> = registry.into_iter().map(NpmRegistry::host).collect();
            hosts.extend(
                internal_registry
                    .iter()
                    .map(|c| format!("localhost:{}", c.front.port)),
            );
            Some(
                Arc::new(move |p: &mut quest_runner::sandbox::SandboxPolicy| {
                    // The seam for the stand-in: a registry-class host (reads only) of a job that
                    // reaches registries at all.
                    if !p.allowed_hosts.is_empty() {
                        p.allowed_hosts.extend(hosts.iter().cloned());
                    }
                    if let Some(m) = mutation {
                        m.apply(p, &bare);
                    }
                    if agent_rules_off {
                        p.confine_file_tools = false;
                    }
                }) as quest_runner::run::PolicyHook,
            )
        },
        proxy_listener: Some(Arc::new(server.binder())),
        proxy_command: Some(Arc::new(move |cmd: &mut Command| proxy_confine(cmd))),
        // Where the confined agent reaches it; it forwards to the server's host-side listener.
        gateway_listener: Some(Arc::new(server.binder())),
    }
}
