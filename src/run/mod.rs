//! One job, end to end: preflight → workspace → devShell → policy → agent → result.
//!
//! Every exit path — success, failure, timeout, cancellation — ends with the agent's whole
//! process tree stopped, the worktree and temp dir removed (the [`Workspace`] drop), and a
//! result written to `<state>/jobs/<id>/result.json`.
//!
//! The steps, one file each: [`admit`] (what refuses a job), the workspace's own
//! [`Workspace::prepare_in`], [`in_workspace`] (devShell, policy, network, the agent's plan),
//! [`agent_process`] (the agent as a process, its limits and what ends it early), [`tree`]
//! (stopping its process tree), [`outcome`] (how its end becomes the [`JobResult`] of
//! [`result`]).

mod admit;
mod agent_process;
pub mod confine;
mod error;
mod hooks;
mod in_workspace;
mod model;
mod outcome;
mod prompt;
pub mod result;
mod tree;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use crate::config::Config;
use crate::devshell::DevShells;
use crate::disk::DiskLimits;
use crate::job::{Job, Trust};
use crate::sandbox::{self, PolicyInputs, SandboxPolicy};
use crate::state::StateDir;
use crate::workspace::{self, Workspace, WorkspacePaths};
pub use error::{AgentError, ModelAccessError};
pub use hooks::{AgentEnclosure, CommandHook, PolicyHook, RunHooks, Unenclosed};
use in_workspace::JobRun;
use outcome::{timed_out_while, Stop};
pub use result::{Cancel, DevShellSummary, JobResult, Outcome};

/// The runner's side of a job, shared by `run`, `serve` and the boundary suite: made by
/// [`Runner::new`] from a state directory and a config, and adjusted by its `with_` methods.
pub struct Runner {
    state: StateDir,
    config: Config,
    devshells: Arc<DevShells>,
    hooks: RunHooks,
    /// The environment agents are started from (after the policy's filter): the runner's
    /// own, unless the boundary suite plants secrets in it.
    env_source: Vec<(String, String)>,
    /// The operator's home directory, which commands must not read.
    operator_home: Option<PathBuf>,
    /// The config file, when it lives outside the state directory; denied to commands.
    config_file: Option<PathBuf>,
    /// The host checks its caller (`run`) passed just before the job: admit does not spawn
    /// them again (~20 ms: the nested bwrap probe) while they are this fresh.
    host_checked: Option<admit::HostChecked>,
    /// Where jobs' private temp dirs are made ([`workspace::temp_parent`]).
    temp_parent: workspace::TempParent,
    /// Every job's disk limit and the reserve (config `limits.disk`, `limits.disk_reserve`).
    disk: DiskLimits,
    /// This runner's running jobs' disk use: which one the reserve stops.
    disk_jobs: Arc<crate::disk::watch::Registry>,
    /// The model gateway, started with the first job that needs it; one per process, kept
    /// by a runner reloaded from it ([`Runner::reloaded`]).
    gateway: Arc<tokio::sync::OnceCell<crate::gateway::Gateway>>,
    /// How the gateway is started.
    gateway_options: crate::gateway::GatewayOptions,
    /// The dependency cache and the runner's client to the registries, made for the first
    /// job that reads its locks (`None` where the cache could not be opened: jobs then get
    /// no locked dependencies, and the log says why).
    deps: Arc<std::sync::OnceLock<Option<Arc<crate::deps::Deps>>>>,
    /// Whether runsc runs here, asked at the first job a `gvisor` level runs and kept.
    gvisor: Arc<tokio::sync::OnceCell<crate::sandbox::gvisor::Probe>>,
}

impl Runner {
    pub fn new(state: StateDir, config: Config) -> Runner {
        let devshells = Arc::new(DevShells::new(&state, &config));
        let temp_parent = workspace::temp_parent();
        if let Some(why) = &temp_parent.why_not_tmpdir {
            tracing::warn!(
                "jobs' temp dirs go in {}: {why}",
                temp_parent.path.display()
            );
        }
        let disk = config.limits.disk;
        let gateway_options = crate::gateway::GatewayOptions::new(state.root());
        Runner {
            state,
            config,
            devshells,
            hooks: RunHooks::default(),
            env_source: std::env::vars().collect(),
            operator_home: std::env::var_os("HOME").map(PathBuf::from),
            config_file: None,
            host_checked: None,
            temp_parent,
            disk,
            disk_jobs: Arc::default(),
            gateway: Arc::new(tokio::sync::OnceCell::new()),
            gateway_options,
            deps: Arc::default(),
            gvisor: Arc::default(),
        }
    }

    /// Whether runsc runs here (probed once, at the first call).
    pub async fn gvisor(&self) -> &crate::sandbox::gvisor::Probe {
        self.gvisor.get_or_init(crate::sandbox::gvisor::probe).await
    }

    /// Denies `path`, the config file the runner was started with, to commands (one inside
    /// the state directory is denied with it).
    pub fn with_config_file(mut self, path: PathBuf) -> Runner {
        self.config_file = Some(path);
        self
    }

    /// Says the host checks for `agent`'s jobs (`nix`: with Nix's) passed now, so that the
    /// job started next does not repeat them; `run` checks before the runner exists.
    pub fn with_host_checked(mut self, agent: crate::job::AgentKind, nix: bool) -> Runner {
        self.host_checked = Some(admit::HostChecked {
            agent,
            nix,
            at: Instant::now(),
        });
        self
    }

    /// Every job's disk limit per job (`serve --limit-disk`), over the config's.
    pub fn with_disk_limit(mut self, limit: Option<u64>) -> Runner {
        self.disk.limit = limit;
        self
    }

    /// The boundary suite's seams (quest-runner-selftest, and the tests): empty in every run
    /// the CLI and `serve` make.
    pub fn with_hooks(mut self, hooks: RunHooks) -> Runner {
        self.hooks = hooks;
        self.deps = Arc::default();
        self
    }

    /// The dependency cache and fetcher, made at the first call; `None` if they cannot be.
    pub fn deps(&self) -> Option<&Arc<crate::deps::Deps>> {
        self.deps
            .get_or_init(|| {
                let upstreams = self.hooks.dep_upstreams.clone().unwrap_or_default();
                open_deps(&self.state, &self.config, &upstreams)
            })
            .as_ref()
    }

    /// Agents start from `env` (after the policy's filter) and commands must not read
    /// `operator_home`, rather than the process's own environment and `HOME`: the boundary
    /// suite plants secrets in both.
    pub fn with_environment(
        mut self,
        env: Vec<(String, String)>,
        operator_home: PathBuf,
    ) -> Runner {
        self.env_source = env;
        self.operator_home = Some(operator_home);
        self
    }

    pub fn state(&self) -> &StateDir {
        &self.state
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn devshells(&self) -> &Arc<DevShells> {
        &self.devshells
    }

    /// Where jobs' private temp dirs are made.
    pub fn temp_parent(&self) -> &std::path::Path {
        &self.temp_parent.path
    }

    pub fn disk(&self) -> &DiskLimits {
        &self.disk
    }

    pub fn hooks(&self) -> &RunHooks {
        &self.hooks
    }

    pub fn env_source(&self) -> &[(String, String)] {
        &self.env_source
    }

    /// This runner with another config and devShell engine (SIGHUP), and the same gateway.
    pub fn reloaded(&self, config: Config, devshells: Arc<DevShells>) -> Runner {
        Runner {
            state: self.state.clone(),
            config,
            devshells,
            hooks: self.hooks.clone(),
            env_source: self.env_source.clone(),
            operator_home: self.operator_home.clone(),
            config_file: self.config_file.clone(),
            host_checked: None,
            temp_parent: self.temp_parent.clone(),
            // Limits are read at start, like the cgroup ones; the running jobs stay registered.
            disk: self.disk,
            disk_jobs: self.disk_jobs.clone(),
            gateway: self.gateway.clone(),
            gateway_options: self.gateway_options.clone(),
            deps: self.deps.clone(),
            // Asked again: a reload is how an operator who installed runsc says so.
            gvisor: Arc::default(),
        }
    }

    /// Runs `job` until it ends or `cancel` resolves. Always returns a result; the result is
    /// also written to the job's directory.
    pub async fn run(
        &self,
        job: &Job,
        cancel: impl std::future::Future<Output = Cancel>,
    ) -> JobResult {
        let mut result = self.run_unsaved(job, cancel).await;
        self.deliver(&mut result).await;
        self.save_result(&result);
        result
    }

    /// Pushes the job's commits where its repository's `push` settings say, after the job
    /// (its workspace gone, its commits in the shared clone), recording how it went in
    /// `result`: bounded by the push's own git limit, and never failing the job.
    pub async fn deliver(&self, result: &mut JobResult) {
        if result.commits.is_empty() {
            return;
        }
        let (Some(repo), Some(head), Some(trust)) = (&result.repo, &result.head, result.trust)
        else {
            return;
        };
        let Some(push) = crate::config::push::for_repo(&self.config.push, repo) else {
            return;
        };
        let work = crate::deliver::JobWork::new(
            &self.state,
            &result.job_id,
            repo,
            &result.rev,
            head,
            trust,
        );
        result.push = Some(crate::deliver::push_job(&work, push, result.push.as_ref()).await);
    }

    /// [`Runner::run`] without writing the result: for a caller that adds to it first and
    /// then saves it once with [`Runner::save_result`].
    pub async fn run_unsaved(
        &self,
        job: &Job,
        cancel: impl std::future::Future<Output = Cancel>,
    ) -> JobResult {
        self.run_enclosed(job, cancel, &Unenclosed).await.0
    }

    /// [`Runner::run_unsaved`] with the job inside `enclosure` (`serve`'s limits and cgroup)
    /// from its devShell on, and what it reported once the job's processes were stopped:
    /// `None` when the job ended before its workspace was ready, or was cancelled.
    pub async fn run_enclosed<E: AgentEnclosure>(
        &self,
        job: &Job,
        cancel: impl std::future::Future<Output = Cancel>,
        enclosure: &E,
    ) -> (JobResult, Option<E::Report>) {
        let started = Instant::now();
        let mut result = JobResult::new(job);
        let mut report = None;
        tokio::pin!(cancel);
        tokio::select! {
            biased;
            signal = &mut cancel => {
                let message = format!("cancelled by {}", signal.signal_name());
                result.end(Outcome::Cancelled(signal), message);
            }
            enclosed = self.run_inner(job, &mut result, started, enclosure) => report = enclosed,
        }
        result.duration_ms = started.elapsed().as_millis() as u64;
        (result, report)
    }

    /// The job's steps: admitted, its workspace prepared, run in it, and its commits kept.
    async fn run_inner<E: AgentEnclosure>(
        &self,
        job: &Job,
        result: &mut JobResult,
        started: Instant,
        enclosure: &E,
    ) -> Option<E::Report> {
        if job.trust == Trust::Trusted {
            // The network proxy's CA key (~50 ms of a core, several times that on a busy
            // host), generated while the job is admitted and its workspace prepared: the
            // proxy waited for it after them. A refused job wastes one key, on a thread.
            crate::netproxy::ca::warm_up();
        }
        let account = match self.admit(job) {
            Ok(account) => account,
            Err(stop) => {
                result.end(stop.outcome, stop.message);
                return None;
            }
        };
        if let Err(stop) = self.admit_isolation(job).await {
            result.end(stop.outcome, stop.message);
            return None;
        }
        workspace::sweep_abandoned(&self.state);
        crate::devshell::scratch::sweep(&std::env::temp_dir());
        // The job's timeout bounds all of it, not only the agent: a fetch or a devShell build
        // that never ends must not hold the job (and its runner slot) for ever.
        let deadline = tokio::time::Instant::from_std(started + job.timeout);
        let preparing = Instant::now();
        let ws = self.prepare_workspace(job, deadline).await;
        result.phases = Some(result::Phases {
            workspace_ms: Some(preparing.elapsed().as_millis() as u64),
            devshell_ms: None,
        });
        let ws = match ws {
            Ok(ws) => ws,
            Err(stop) => {
                result.end(stop.outcome, stop.message);
                return None;
            }
        };
        // From here every process of the job is the enclosure's (serve: its cgroup), its
        // devShell's builds as much as its agent.
        let (guard, place) = match enclosure.enter(&job.id) {
            Ok(entered) => entered,
            Err(e) => {
                result.end(Outcome::Error, format!("the job's enclosure: {e}"));
                return None;
            }
        };
        let adjust = hooks::chain(enclosure.adjust(), place);
        let steps = JobRun {
            runner: self,
            agent_adjust: hooks::chain(self.hooks.agent_command.clone(), adjust),
            job,
            account,
            ws: &ws,
            started,
            deadline,
            counted: Default::default(),
        };
        if let Err(stop) = steps.run(result).await {
            result.end(stop.outcome, stop.message);
        }
        // Every process of the job is stopped: the agent's tree, the devShell's daemon.
        let report = enclosure.finish(guard);
        let counted = steps
            .counted
            .into_inner()
            .unwrap_or_else(|e| e.into_inner());
        keep_work(&ws, job, result).await;
        // The worktree and temp dir are removed, and only then is the job no longer counted
        // on their file systems.
        drop(ws);
        drop(counted);
        Some(report)
    }

    /// The job's workspace (clone, fetch, worktree, temp dir), within its timeout.
    async fn prepare_workspace(
        &self,
        job: &Job,
        deadline: tokio::time::Instant,
    ) -> Result<Workspace, Stop> {
        let preparing = Workspace::prepare_in(&self.state, job, &self.temp_parent.path);
        match tokio::time::timeout_at(deadline, preparing).await {
            Ok(ws) => ws.map_err(Stop::error),
            Err(_) => Err(Stop::new(
                Outcome::TimedOut,
                timed_out_while(job, "preparing the workspace (clone, fetch, worktree)"),
            )),
        }
    }

    /// Whether the file systems jobs write (the state dir's, the temp dirs') have the
    /// reserve free; the error says which has not.
    pub fn room_to_start(&self) -> Result<(), crate::disk::NoRoom> {
        let dirs = [self.state.root(), self.temp_parent.path.as_path()];
        crate::disk::room_to_start(&dirs, &self.disk)
    }

    /// The policy of `job` in the workspace at `paths`, whose locked dependencies the runner
    /// answers for on `dependency_hosts`, or why a private file cannot be hidden from it.
    pub fn policy(
        &self,
        job: &Job,
        paths: &WorkspacePaths,
        dependency_hosts: &[String],
    ) -> Result<SandboxPolicy, crate::sandbox::private::PlacementError> {
        let mut policy = sandbox::plan(
            paths,
            &PolicyInputs {
                platform: sandbox::Platform::current(),
                trust: job.trust,
                extra_hosts: self.config.network.extra_hosts.clone(),
                full_access_hosts: self.config.network.full_access_hosts.clone(),
                dependency_hosts: dependency_hosts.to_vec(),
                state_dir: self.state.root().to_path_buf(),
                operator_home: self.operator_home.clone(),
                private: self.private_files()?,
            },
        );
        policy.isolation = self.config.isolation.for_trust(job.trust);
        Ok(policy)
    }

    /// Every account's secret files, the queue database's password file and the config
    /// file, each with the directories that hide
    /// it from jobs' commands (resolved now: links may have been switched since the config
    /// was loaded), or why one cannot be hidden.
    pub fn private_files(
        &self,
    ) -> Result<Vec<crate::sandbox::HiddenFile>, crate::sandbox::private::PlacementError> {
        self.config.hide_private_files(self.config_file.as_deref())
    }

    /// Writes `result` to `result.json` in the job's directory, if the job got that far.
    pub fn save_result(&self, result: &JobResult) {
        let root = workspace::job_root(&self.state, &result.job_id);
        if !root.exists() {
            return;
        }
        let path = root.join("result.json");
        let data = serde_json::to_vec_pretty(result).unwrap_or_default();
        if let Err(e) = crate::util::fs::write_atomically(&root, &path, &data) {
            tracing::warn!("writing {}: {e}", path.display());
        }
    }
}

/// The runner's dependency cache and fetcher, from the config's bounds.
fn open_deps(
    state: &StateDir,
    config: &Config,
    upstreams: &crate::deps::Upstreams,
) -> Option<Arc<crate::deps::Deps>> {
    let cache = match crate::deps::DepCache::open(state.root()) {
        Ok(cache) => cache,
        Err(e) => {
            tracing::warn!("the dependency cache: {e}; jobs get no locked dependencies");
            return None;
        }
    };
    match crate::deps::Fetcher::new(config.deps.max_artifact, upstreams) {
        Ok(fetcher) => Some(Arc::new(crate::deps::Deps::new(
            cache,
            fetcher,
            config.deps.cache_size,
        ))),
        Err(e) => {
            tracing::warn!("the dependency fetcher: {e}; jobs get no locked dependencies");
            None
        }
    }
}

/// Records what the agent left in the worktree: its commits (lost with the workspace if they
/// cannot be kept, so a job that otherwise succeeded did not deliver) and what it left
/// uncommitted.
async fn keep_work(ws: &Workspace, job: &Job, result: &mut JobResult) {
    match ws.commits_since(&job.id, &job.rev).await {
        Ok((head, commits)) => {
            result.head = Some(head);
            result.commits = commits;
        }
        Err(e) => {
            tracing::warn!("keeping the worktree's commits: {e}");
            if result.outcome == Outcome::Succeeded {
                result.end(Outcome::Error, e.to_string());
            }
        }
    }
    match ws.uncommitted().await {
        Ok(paths) => result.uncommitted = paths,
        Err(e) => tracing::warn!("reading the worktree's status: {e}"),
    }
}
