//! One job, end to end: preflight → workspace → devShell → policy → agent → result.
//!
//! Every exit path — success, failure, timeout, cancellation — ends with the agent's whole
//! process tree stopped, the worktree and temp dir removed (the [`Workspace`] drop), and a
//! result written to `<state>/jobs/<id>/result.json`.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::AsyncWriteExt;

use crate::agent::{self, AgentInputs, Launch};
use crate::binaries::Tool;
use crate::config::Config;
use crate::devshell::{self, DevShells};
use crate::disk::DiskLimits;
use crate::exit::Exit;
use crate::job::{AgentKind, Job, Trust};
use crate::preflight;
use crate::sandbox::{self, PolicyInputs, SandboxPolicy, WorkspacePaths};
use crate::state::StateDir;
use crate::workspace::{self, Workspace};

/// How a job ended. Saved as its name alone (`"cancelled"`, not which signal): the signal is in
/// the result's `message`, and the exit code (see [`Outcome::exit`]) tells the two apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The agent exited 0.
    Succeeded,
    /// The agent exited non-zero or was killed by a signal.
    Failed,
    TimedOut,
    /// A signal asked the runner to stop the job.
    Cancelled(Cancel),
    /// The runner refused the job (untrusted revision, host not ready, bad account).
    Refused,
    /// The runner could not prepare or run it (fetch, devShell, I/O).
    Error,
}

#[derive(Debug, Clone, Serialize)]
pub struct JobResult {
    pub job_id: String,
    pub outcome: Outcome,
    pub agent: AgentKind,
    pub rev: String,
    /// The agent's exit code, when it exited.
    pub exit_status: Option<i32>,
    /// The signal that killed the agent, when one did.
    pub signal: Option<i32>,
    pub duration_ms: u64,
    /// The worktree's HEAD when the agent stopped, and the commits it made (oldest first).
    pub head: Option<String>,
    pub commits: Vec<String>,
    /// Paths the agent left in the worktree without committing them (untracked and ignored
    /// included), as `git status --porcelain --ignored` lists them. Removed with the worktree.
    pub uncommitted: Vec<String>,
    /// The agent's event stream (Claude Code's stream-json, opencode's JSON events).
    pub transcript: Option<PathBuf>,
    pub devshell: Option<DevShellSummary>,
    /// Milliseconds from the job's start until the agent was started: the runner's own work
    /// (workspace, devShell, policy, files).
    pub agent_started_ms: Option<u64>,
    /// Why the job did not succeed, in one line.
    pub message: Option<String>,
    /// Requests the runner's proxy allowed and refused, and the job's network log (trusted
    /// jobs; untrusted ones reach no host).
    pub network: Option<crate::netproxy::NetworkSummary>,
    /// The limit that stopped the job (`disk` and `tokens` here; `serve` adds those its
    /// cgroups report).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_fired: Option<&'static str>,
    /// The most the job had on disk at one of the disk watchdog's measurements, in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_used: Option<u64>,
    /// The job's model use as the runner's gateway metered it: requests, tokens per model,
    /// time waiting on the model (absent when the agent reached no model through it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::gateway::Usage>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DevShellSummary {
    pub cache: devshell::CacheStatus,
    pub key: String,
    pub present: bool,
}

impl Outcome {
    /// The process exit code `quest-runner run` ends with.
    pub fn exit(self) -> Exit {
        match self {
            Outcome::Succeeded => Exit::Success,
            Outcome::Failed | Outcome::Error => Exit::Failed,
            Outcome::Refused => Exit::Refused,
            Outcome::TimedOut => Exit::TimedOut,
            Outcome::Cancelled(Cancel::Interrupt) => Exit::Interrupted,
            Outcome::Cancelled(Cancel::Terminate) => Exit::Terminated,
        }
    }

    /// The name `result.json` and `serve` record.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::TimedOut => "timed_out",
            Outcome::Cancelled(_) => "cancelled",
            Outcome::Refused => "refused",
            Outcome::Error => "error",
        }
    }
}

impl Serialize for Outcome {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// Why a job was cancelled, so the exit code can name the signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancel {
    Interrupt,
    Terminate,
}

/// The runner's side of a job, shared by `run` and (later) `serve`.
pub struct Runner {
    pub state: StateDir,
    pub config: Config,
    pub devshells: Arc<DevShells>,
    pub hooks: RunHooks,
    /// The environment agents are started from (after the policy's filter): the runner's
    /// own, unless the boundary suite plants secrets in it.
    pub env_source: Vec<(String, String)>,
    /// The operator's home directory, which commands must not read.
    pub operator_home: Option<PathBuf>,
    /// The config file, when it lives outside the state directory; denied to commands.
    pub config_file: Option<PathBuf>,
    /// The per-job part of the agent's start and end (see [`JobAgentHook`]): `serve`'s
    /// per-job cgroups. Not in [`RunHooks`], which are the boundary suite's seams.
    pub job_agent: Option<JobAgentHook>,
    /// Where jobs' private temp dirs are made ([`workspace::temp_parent`]).
    pub temp_parent: workspace::TempParent,
    /// Every job's disk limit and the reserve (config `limits.disk`, `limits.disk_reserve`).
    pub disk: DiskLimits,
    /// This runner's running jobs' disk use: which one the reserve stops.
    pub disk_jobs: Arc<crate::disk::watch::Registry>,
    /// The model gateway, started with the first job that needs it; one per process, kept
    /// by a runner reloaded from it ([`Runner::reloaded`]).
    gateway: Arc<tokio::sync::OnceCell<crate::gateway::Gateway>>,
    /// How the gateway is started (tests add the CA of a loopback TLS upstream).
    pub gateway_options: crate::gateway::GatewayOptions,
}

/// Adjusts the agent's command before it starts.
pub type CommandHook = Arc<dyn Fn(&mut std::process::Command) + Send + Sync>;
/// Called with a job's id just before its agent starts: adjusts the commands (the agent's, and
/// the companion's that runs its commands, opencode's sandbox host), and returns
/// what is kept until the agent's whole process tree has been stopped and then dropped
/// (`serve` places the agent in the job's cgroup, and the dropped value kills and removes
/// that group). An error fails the job before the agent starts.
pub type JobAgentHook = Arc<
    dyn Fn(&str, &mut [&mut std::process::Command]) -> Result<Box<dyn std::any::Any + Send>, String>
        + Send
        + Sync,
>;
/// Changes a job's policy before it is rendered.
pub type PolicyHook = Arc<dyn Fn(&mut SandboxPolicy) + Send + Sync>;

/// Seams for the boundary suite (`selftest` and its tests); empty in normal runs, and not
/// reachable from the command line or the config file.
#[derive(Clone, Default)]
pub struct RunHooks {
    /// Adjusts the agent's command before it starts: the suite confines the agent to the
    /// scripted model's network namespace.
    pub agent_command: Option<CommandHook>,
    /// Changes the policy before it is rendered: each mutation check weakens one rule to
    /// prove the suite notices.
    pub policy: Option<PolicyHook>,
    /// Binds the network proxy's listening socket (default: `127.0.0.1:0`); the suite binds
    /// it in the scripted model's network namespace.
    pub proxy_listener: Option<Arc<crate::netproxy::job::BindListener>>,
    /// Adjusts the network proxy's command before it starts: the suite runs it in the scripted
    /// model's network namespace (its upstream is a stand-in there), while `selftest
    /// --registries` leaves it on the host's network, to reach the real registries, with its
    /// listening socket in the namespace.
    pub proxy_command: Option<CommandHook>,
    /// Binds the model gateway's listening socket (default: `127.0.0.1:0`): the suite binds
    /// it where its confined agents reach it.
    pub gateway_listener: Option<Arc<crate::netproxy::job::BindListener>>,
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
        // Checked when the config was loaded.
        let disk = config.limits.disk_limits().unwrap_or_default();
        let gateway_options = crate::gateway::GatewayOptions::new(state.root());
        Runner {
            state,
            config,
            devshells,
            hooks: RunHooks::default(),
            env_source: std::env::vars().collect(),
            operator_home: std::env::var_os("HOME").map(PathBuf::from),
            config_file: None,
            job_agent: None,
            temp_parent,
            disk,
            disk_jobs: Arc::default(),
            gateway: Arc::new(tokio::sync::OnceCell::new()),
            gateway_options,
        }
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
            job_agent: self.job_agent.clone(),
            temp_parent: self.temp_parent.clone(),
            // Limits are read at start, like the cgroup ones; the running jobs stay registered.
            disk: self.disk,
            disk_jobs: self.disk_jobs.clone(),
            gateway: self.gateway.clone(),
            gateway_options: self.gateway_options.clone(),
        }
    }

    /// The runner's model gateway, started on first use.
    pub async fn gateway(&self) -> Result<&crate::gateway::Gateway, String> {
        self.gateway
            .get_or_try_init(|| async {
                let listener = match &self.hooks.gateway_listener {
                    Some(bind) => bind(),
                    None => std::net::TcpListener::bind("127.0.0.1:0"),
                }
                .map_err(|e| format!("binding the model gateway's port on loopback: {e}"))?;
                crate::gateway::Gateway::start(listener, self.gateway_options.clone())
            })
            .await
    }

    /// Opens the job's way to its model through the gateway, or `None` for an account whose
    /// agent holds its login itself (see [`crate::gateway::account`]).
    async fn open_model_access(
        &self,
        job: &Job,
        account: &crate::config::Account,
    ) -> Result<Option<(crate::gateway::JobGrant, agent::GatewayAccess)>, String> {
        use crate::config::Account;
        use crate::gateway::{account::route, budget::Budget, JobSpec, Route};
        let auth_json = match account {
            Account::Opencode(a) => a.auth_file.as_ref().and_then(|f| {
                let text = zeroize::Zeroizing::new(std::fs::read_to_string(f).ok()?);
                serde_json::from_str::<serde_json::Value>(&text).ok()
            }),
            Account::Claude(_) => None,
        };
        let (upstream, secret, provider) = match route(&job.account, account, auth_json.as_ref())? {
            Route::Gateway {
                upstream,
                secret,
                provider,
            } => (upstream, secret, provider),
            Route::Direct { why } => {
                tracing::info!(job = %job.id, account = %job.account, "the agent holds the account's login itself: {why}");
                return Ok(None);
            }
        };
        let gateway = self.gateway().await?;
        let credential = gateway
            .credential(&secret)
            .map_err(|e| format!("account {}: {e}", job.account))?;
        let grant = gateway.open(JobSpec {
            job_id: job.id.clone(),
            account: job.account.clone(),
            upstream,
            credential,
            token_limit: self.config.limits.tokens,
            budget: account
                .budget()
                .map(|b| Budget::new(self.state.root(), &job.account, b)),
            log: workspace::job_root(&self.state, &job.id).join("model.log"),
        })?;
        let access = agent::GatewayAccess {
            base_url: grant.base_url.clone(),
            token: grant.token.clone(),
            provider,
        };
        Ok(Some((grant, access)))
    }

    /// Runs `job` until it ends or `cancel` resolves. Always returns a result; the result is
    /// also written to the job's directory.
    pub async fn run(
        &self,
        job: &Job,
        cancel: impl std::future::Future<Output = Cancel>,
    ) -> JobResult {
        let started = Instant::now();
        let mut result = JobResult {
            job_id: job.id.clone(),
            outcome: Outcome::Error,
            agent: job.agent,
            rev: job.rev.clone(),
            exit_status: None,
            signal: None,
            duration_ms: 0,
            head: None,
            commits: Vec::new(),
            uncommitted: Vec::new(),
            transcript: None,
            devshell: None,
            agent_started_ms: None,
            message: None,
            network: None,
            limit_fired: None,
            disk_used: None,
            usage: None,
        };
        tokio::pin!(cancel);
        tokio::select! {
            biased;
            signal = &mut cancel => {
                result.outcome = Outcome::Cancelled(signal);
                result.message = Some(match signal {
                    Cancel::Interrupt => "cancelled by SIGINT".into(),
                    Cancel::Terminate => "cancelled by SIGTERM".into(),
                });
            }
            () = self.run_inner(job, &mut result, started) => {}
        }
        result.duration_ms = started.elapsed().as_millis() as u64;
        self.save_result(&result);
        result
    }

    async fn run_inner(&self, job: &Job, result: &mut JobResult, started: Instant) {
        let refuse = |result: &mut JobResult, outcome: Outcome, msg: String| {
            result.outcome = outcome;
            result.message = Some(msg);
        };
        let Some(account) = self.config.accounts.get(&job.account) else {
            return refuse(
                result,
                Outcome::Refused,
                format!(
                    "unknown account {:?}: it is not in the runner's config",
                    job.account
                ),
            );
        };
        if account.agent() != job.agent {
            return refuse(
                result,
                Outcome::Refused,
                format!(
                    "account {:?} is for {}, but the job asks for {}",
                    job.account,
                    account.agent().name(),
                    job.agent.name()
                ),
            );
        }
        if job.trust == Trust::Untrusted && !self.config.allow_untrusted {
            return refuse(
                result,
                Outcome::Refused,
                "untrusted revisions are refused: their devShells would build on this host. \
                 Set allow_untrusted in the config to run them with no network and no devShell"
                    .into(),
            );
        }
        // Before anything is fetched: a secret the sandbox cannot hide refuses every job.
        if let Err(e) = self.private_files() {
            return refuse(result, Outcome::Refused, e.to_string());
        }
        let checks = preflight::checks_for(job.agent, job.trust == Trust::Trusted);
        if let Some(missing) = preflight::refusal(&checks) {
            return refuse(
                result,
                Outcome::Refused,
                format!("host not ready: {missing}"),
            );
        }

        if let Err(why) = self.room_to_start() {
            return refuse(result, Outcome::Refused, why);
        }
        if job.trust == Trust::Trusted {
            // The network proxy's CA key, generated while the workspace is prepared.
            crate::netproxy::ca::warm_up();
        }
        workspace::sweep_abandoned(&self.state);
        crate::devshell::scratch::sweep(&std::env::temp_dir());
        // The job's timeout bounds all of it, not only the agent: a fetch or a devShell build
        // that never ends must not hold the job (and its runner slot) for ever.
        let deadline = tokio::time::Instant::from_std(started + job.timeout);
        let preparing = Workspace::prepare_in(&self.state, job, &self.temp_parent.path);
        let ws = match tokio::time::timeout_at(deadline, preparing).await {
            Ok(Ok(ws)) => ws,
            Ok(Err(e)) => return refuse(result, Outcome::Error, e.to_string()),
            Err(_) => {
                let message =
                    timed_out_while(job, "preparing the workspace (clone, fetch, worktree)");
                return refuse(result, Outcome::TimedOut, message);
            }
        };
        match self
            .run_in_workspace(job, account, &ws, result, (started, deadline))
            .await
        {
            Ok(()) => {}
            Err(message) => {
                result.outcome = Outcome::Error;
                result.message = Some(message);
            }
        }
        match ws.commits_since(&job.id, &job.rev).await {
            Ok((head, commits)) => {
                result.head = Some(head);
                result.commits = commits;
            }
            Err(e) => {
                // The agent's work is lost with the workspace: a job that otherwise succeeded
                // did not deliver it.
                tracing::warn!("keeping the worktree's commits: {e}");
                if result.outcome == Outcome::Succeeded {
                    result.outcome = Outcome::Error;
                    result.message = Some(e.to_string());
                }
            }
        }
        match ws.uncommitted().await {
            Ok(paths) => result.uncommitted = paths,
            Err(e) => tracing::warn!("reading the worktree's status: {e}"),
        }
        // `ws` drops here: worktree and temp dir are removed.
    }

    async fn run_in_workspace(
        &self,
        job: &Job,
        account: &crate::config::Account,
        ws: &Workspace,
        result: &mut JobResult,
        (started, deadline): (Instant, tokio::time::Instant),
    ) -> Result<(), String> {
        let mut paths = ws.paths.clone();
        let mut devshell_attr = None;
        if job.trust == Trust::Trusted {
            let req = devshell::Request {
                repo: paths.bare_clone.clone(),
                rev: job.rev.clone(),
                git_ref: Some(ws.nix_ref.clone()),
                attr: None,
            };
            let building = with_progress(self.devshells.get(&req), &job.rev);
            let shell = match tokio::time::timeout_at(deadline, building).await {
                Ok(shell) => shell.map_err(|e| e.to_string())?,
                Err(_) => {
                    result.outcome = Outcome::TimedOut;
                    result.message = Some(timed_out_while(job, "building the devShell"));
                    return Ok(());
                }
            };
            result.devshell = Some(DevShellSummary {
                cache: shell.cache,
                key: shell.key.clone(),
                present: shell.env.is_some(),
            });
            if let Some(env) = &shell.env {
                // A copy in the job's directory: the sandbox may read it, but not the cache.
                let copy = paths.job_dir.join("devshell.sh");
                std::fs::copy(&env.script, &copy)
                    .map_err(|e| format!("copying the devShell script: {e}"))?;
                paths.devshell_script = Some(copy);
                devshell_attr = Some(shell.attr.clone());
            }
        }
        let mut policy = self.policy(job, &paths).map_err(|e| e.to_string())?;
        if let Some(hook) = &self.hooks.policy {
            hook(&mut policy);
        }
        // Started before the agent's files are rendered: they name its port.
        let mut proxy = crate::netproxy::job::start(
            &mut policy,
            crate::netproxy::job::JobNet {
                job_id: &job.id,
                timeout: job.timeout,
                result_dir: &workspace::job_root(&self.state, &job.id),
                job_dir: &paths.job_dir,
                temp_dir: &ws.proxy_tmp,
                bind: self.hooks.proxy_listener.as_deref(),
                adjust: self.hooks.proxy_command.as_deref(),
                env_source: &self.env_source,
            },
        )
        .await
        .map_err(|e| e.to_string())?;
        let proxy_failed = proxy.as_mut().map(|p| p.startup_failure());
        let instructions = crate::instructions::read(&paths.checkout);
        let system_prompt = system_prompt(job, &policy, devshell_attr.as_deref(), &instructions);

        let (tool, srt, node, runner_binary) = match job.agent {
            AgentKind::Claude => (Tool::Claude, None, None, None),
            AgentKind::Opencode => (
                Tool::Opencode,
                crate::binaries::find(Tool::Srt).ok(),
                crate::binaries::find(Tool::Node).ok(),
                Some(crate::jobshell::runner_binary()?),
            ),
        };
        let program = crate::binaries::find(tool)
            .ok()
            .ok_or("the agent binary vanished")?;
        // Dropped when this returns: the job's token is worthless from then on.
        let model = self.open_model_access(job, account).await?;
        let inputs = AgentInputs {
            job,
            account,
            policy: &policy,
            workspace: &paths,
            system_prompt: &system_prompt,
            program: &program,
            srt: srt.as_deref(),
            node: node.as_deref(),
            runner: runner_binary.as_deref(),
            host_env: self.env_source.clone(),
            gateway: model.as_ref().map(|(_, access)| access),
        };
        let launch = agent::plan(&inputs).map_err(|e| e.to_string())?;
        launch.write_files().map_err(|e| e.to_string())?;
        result.transcript = Some(launch.transcript.clone());
        let spawned =
            |at: Instant| result.agent_started_ms = Some((at - started).as_millis() as u64);
        let mut disk = crate::disk::watch::Watchdog::start(
            &job.id,
            ws.disk_trees(),
            self.disk,
            self.disk_jobs.clone(),
        );
        let ended = run_agent(
            &launch,
            deadline.saturating_duration_since(tokio::time::Instant::now()),
            AgentLimits {
                adjust: self.hooks.agent_command.as_deref(),
                per_job: self.job_agent.as_ref().map(|h| (job.id.as_str(), h)),
                file_size: self.disk.limit,
                disk: disk.as_mut(),
            },
            spawned,
            job_markers(&paths),
            EndsEarly {
                proxy_failed,
                limit_fired: model.as_ref().map(|(grant, _)| grant.limit_fired()),
            },
        )
        .await;
        result.disk_used = disk.as_ref().map(|d| d.peak());
        drop(disk);
        // The agent's tree is stopped: nothing can make a request any more.
        if let Some(proxy) = proxy {
            result.network = Some(proxy.stop().await);
        }
        if let Some((grant, _)) = &model {
            result.usage = Some(grant.usage());
        }
        drop(model);
        let ended = ended?;
        match ended {
            AgentEnd::Exited(code) => {
                result.exit_status = Some(code);
                if code == 0 {
                    result.outcome = Outcome::Succeeded;
                } else {
                    result.outcome = Outcome::Failed;
                    result.message = Some(format!("the agent exited with status {code}"));
                }
            }
            AgentEnd::Signalled(sig) => {
                result.outcome = Outcome::Failed;
                result.signal = Some(sig);
                result.message = Some(format!(
                    "the agent was killed by signal {sig}{}",
                    crate::util::units::signal_name(sig)
                        .map(|n| format!(" ({n})"))
                        .unwrap_or_default()
                ));
            }
            AgentEnd::TokensSpent(why) => {
                result.outcome = Outcome::Failed;
                result.limit_fired = Some("tokens");
                result.message = Some(why);
            }
            AgentEnd::TimedOut => {
                result.outcome = Outcome::TimedOut;
                result.message = Some(format!(
                    "timed out after {}",
                    humantime::format_duration(job.timeout)
                ));
            }
            AgentEnd::Disk(fired) => {
                result.outcome = Outcome::Failed;
                result.limit_fired = Some("disk");
                result.message = Some(fired.message);
            }
        }
        if result.outcome == Outcome::Failed {
            // A full disk kills agents with an arbitrary status; say so where it applies.
            let clause = crate::disk::space::full_clause(&[&paths.job_dir, &paths.temp_dir]);
            if let Some(message) = result.message.as_mut() {
                message.push_str(&clause);
            }
        }
        Ok(())
    }

    /// Whether the file systems jobs write (the state dir's, the temp dirs') have the
    /// reserve free; the error says which has not.
    pub fn room_to_start(&self) -> Result<(), String> {
        let dirs = [self.state.root(), self.temp_parent.path.as_path()];
        crate::disk::room_to_start(&dirs, self.disk.reserve)
    }

    /// The policy of `job` in the workspace at `paths`, or why a private file cannot be
    /// hidden from it.
    pub fn policy(
        &self,
        job: &Job,
        paths: &WorkspacePaths,
    ) -> Result<SandboxPolicy, crate::sandbox::private::PlacementError> {
        Ok(sandbox::plan(
            paths,
            &PolicyInputs {
                platform: sandbox::Platform::current(),
                trust: job.trust,
                extra_hosts: self.config.network.extra_hosts.clone(),
                full_access_hosts: self.config.network.full_access_hosts.clone(),
                state_dir: self.state.root().to_path_buf(),
                operator_home: self.operator_home.clone(),
                private: self.private_files()?,
            },
        ))
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

    fn save_result(&self, result: &JobResult) {
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

/// Awaits a devShell build, printing a progress line every ten seconds while it lasts when
/// stderr is a terminal.
async fn with_progress<F: std::future::Future>(build: F, rev: &str) -> F::Output {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return build.await;
    }
    const EVERY: Duration = Duration::from_secs(10);
    let started = tokio::time::Instant::now();
    let mut ticks = tokio::time::interval_at(started + EVERY, EVERY);
    tokio::pin!(build);
    loop {
        tokio::select! {
            out = &mut build => return out,
            _ = ticks.tick() => eprintln!(
                "still building the devShell of {} ({}s)",
                &rev[..rev.len().min(12)],
                started.elapsed().as_secs()
            ),
        }
    }
}

fn system_prompt(
    job: &Job,
    policy: &SandboxPolicy,
    devshell_attr: Option<&str>,
    instructions: &crate::instructions::Instructions,
) -> String {
    let devshell = match devshell_attr {
        Some(attr) => format!("The revision's devShell ({attr}) is loaded in every command."),
        None if job.trust == Trust::Untrusted => {
            "This revision is untrusted: its devShell is not built, so commands get only the base system.".into()
        }
        None => "This revision has no flake.nix, so commands get only the base system.".into(),
    };
    format!(
        "You are running as a quest-runner job on revision {rev}.\n\
         - Work in the checkout at {checkout} and commit your changes there with git: the \
         job's result is the commits you make.\n\
         - HOME and TMPDIR are {tmp}, private to this job and deleted when it ends.\n\
         - Every command runs in a sandbox: it reads the checkout, its git data, its temp \
         directory and the system, and writes only the checkout and the temp directory.\n\
         - Network: {network}\n\
         - {devshell} There is no Nix daemon in the sandbox: `nix build` and `nix flake \
         check` do not work in jobs; CI runs them.\n{instructions}",
        rev = job.rev,
        checkout = policy.checkout.display(),
        tmp = policy.tmpdir.display(),
        network = policy.network_summary(),
        instructions = instructions.prompt_section(),
    )
}

enum AgentEnd {
    Exited(i32),
    Signalled(i32),
    TimedOut,
    /// The disk watchdog stopped the job.
    Disk(crate::disk::watch::Fired),
    /// The gateway refused a request past a token cap: why.
    TokensSpent(String),
}

/// What bounds the agent's process tree besides its timeout.
struct AgentLimits<'a> {
    /// Adjusts the agent's command (the boundary suite's confinement, `serve`'s rlimits).
    adjust: Option<&'a (dyn Fn(&mut std::process::Command) + Send + Sync)>,
    /// `serve`'s per-job cgroup, for the job of this id.
    per_job: Option<(&'a str, &'a JobAgentHook)>,
    /// RLIMIT_FSIZE: the disk limit, per file.
    file_size: Option<u64>,
    disk: Option<&'a mut crate::disk::watch::Watchdog>,
}

/// What ends a job before its agent exits, besides its timeout.
struct EndsEarly {
    /// The job's network proxy never served.
    proxy_failed: Option<crate::netproxy::proxy::StartupFailure>,
    /// The gateway refused a request past a token cap.
    limit_fired: Option<tokio::sync::watch::Receiver<Option<String>>>,
}

/// How long an agent whose request a token cap refused may take to show the error and exit
/// before its tree is stopped.
const TOKENS_SPENT_GRACE: Duration = Duration::from_secs(10);

/// Starts the agent and waits for it, for at most `timeout`. Dropping this future (a
/// cancelled job) stops the agent's whole process tree, as does a timeout.
async fn run_agent(
    launch: &Launch,
    timeout: Duration,
    limits: AgentLimits<'_>,
    spawned: impl FnOnce(Instant),
    markers: Vec<String>,
    EndsEarly {
        proxy_failed,
        limit_fired,
    }: EndsEarly,
) -> Result<AgentEnd, String> {
    use std::os::unix::process::ExitStatusExt;
    let transcript = std::fs::File::create(&launch.transcript)
        .map_err(|e| format!("creating {}: {e}", launch.transcript.display()))?;
    let log_path = launch.transcript.with_file_name("agent.log");
    let log = std::fs::File::create(&log_path)
        .map_err(|e| format!("creating {}: {e}", log_path.display()))?;
    let mut cmd = tokio::process::Command::new(&launch.program);
    cmd.args(&launch.args)
        .env_clear()
        .envs(&launch.env)
        .current_dir(&launch.cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::from(transcript))
        .stderr(Stdio::from(log))
        .process_group(0)
        .kill_on_drop(false);
    // The companion runs the agent's commands (opencode's sandbox host): it is placed and
    // limited as the agent is (the suite's namespace, `serve`'s limits, the disk limit, the
    // job's cgroup), as those commands were when they were the agent's children.
    let mut companion = match &launch.companion {
        Some(plan) => Some(crate::jobshell::host::Prepared::new(plan).map_err(|e| e.to_string())?),
        None => None,
    };
    let mut commands: Vec<&mut std::process::Command> = vec![cmd.as_std_mut()];
    if let Some(c) = companion.as_mut() {
        commands.push(c.command_mut());
    }
    for c in commands.iter_mut() {
        if let Some(adjust) = limits.adjust {
            adjust(c);
        }
        if let Some(bytes) = limits.file_size {
            crate::disk::limit_file_size(c, bytes);
        }
    }
    // Declared before `tree`, so dropped after it: the job's cgroup goes once the tree is
    // stopped, on every path (a cancelled job drops this future).
    let _per_job = match limits.per_job {
        Some((id, hook)) => Some(hook(id, &mut commands)?),
        None => None,
    };
    drop(commands);
    // Orphans of the agent (a tool's process that left its group) are re-parented to the
    // runner, which kills them when the agent ends.
    let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
    tracing::info!(program = %launch.program.display(), cwd = %launch.cwd.display(), "starting the agent");
    let mut child = cmd.spawn().map_err(|e| {
        // The child's setup between fork and exec (cgroup placement, limits, parent-death
        // signal) can only return an errno, which then reads as if the agent's binary were
        // missing; say which side failed.
        let program = launch.program.display();
        if launch.program.is_file() {
            format!("starting {program}: preparing its process (job cgroup, limits) failed: {e}")
        } else {
            format!("starting {program}: {e}")
        }
    })?;
    spawned(Instant::now());
    let tree = ProcessTree::new(child.id(), markers);
    // Right after the agent: its start-up (Node, srt's setup, bubblewrap) overlaps the
    // agent's, and a command the agent sends meanwhile waits in the socket's backlog.
    let mut sandbox = match companion {
        Some(c) => Some(c.spawn().map_err(|e| e.to_string())?),
        None => None,
    };
    let sandbox_failed = sandbox.as_mut().map(|s| s.failure());
    if let Some(mut stdin) = child.stdin.take() {
        // A prompt the agent does not read must not block the runner.
        let prompt = launch.stdin.clone();
        tokio::spawn(async move {
            let _ = stdin.write_all(prompt.as_bytes()).await;
            let _ = stdin.shutdown().await;
        });
    }
    // The job's network proxy starts alongside the agent (see `JobProxy::spawn`); if it never
    // serves, the job ends here, its tree stopped below, rather than running without network.
    let proxy_failed = async move {
        match proxy_failed {
            Some(failure) => failure.failed().await,
            None => std::future::pending().await,
        }
    };
    // Likewise the sandbox of opencode's commands: a job whose commands cannot run ends.
    let sandbox_failed = async move {
        match sandbox_failed {
            Some(failure) => failure.failed().await,
            None => std::future::pending().await,
        }
    };
    let disk_fired = async move {
        match limits.disk {
            Some(watchdog) => watchdog.fired().await,
            None => std::future::pending().await,
        }
    };
    let limit_fired = async move {
        match limit_fired {
            Some(mut fired) => {
                let why = fired
                    .wait_for(Option::is_some)
                    .await
                    .ok()
                    .map(|why| why.clone().unwrap_or_default());
                match why {
                    Some(why) => why,
                    None => std::future::pending().await,
                }
            }
            None => std::future::pending().await,
        }
    };
    let deadline = tokio::time::Instant::now() + timeout;
    let end = tokio::select! {
        fired = disk_fired => Ok(AgentEnd::Disk(fired)),
        waited = tokio::time::timeout_at(deadline, child.wait()) => match waited {
            Ok(Ok(status)) => match (status.code(), status.signal()) {
                (Some(code), _) => Ok(AgentEnd::Exited(code)),
                (None, Some(sig)) => Ok(AgentEnd::Signalled(sig)),
                (None, None) => Ok(AgentEnd::Exited(-1)),
            },
            Ok(Err(e)) => Err(format!("waiting for the agent: {e}")),
            Err(_) => Ok(AgentEnd::TimedOut),
        },
        e = proxy_failed => Err(format!("the job's network proxy: {e}")),
        e = sandbox_failed => Err(e.to_string()),
        why = limit_fired => {
            // The agent got the refusal; let it say so and exit on its own first.
            let grace = (tokio::time::Instant::now() + TOKENS_SPENT_GRACE).min(deadline);
            let _ = tokio::time::timeout_at(grace, child.wait()).await;
            Ok(AgentEnd::TokensSpent(why))
        }
    };
    if matches!(end, Ok(AgentEnd::Disk(_))) {
        // No grace: a job filling the disk would go on writing through it.
        tree.kill_now();
    }
    // The commands' sandbox before the rest of the agent's tree, so srt removes the mount
    // points it left in the checkout before anything reads the worktree (its stop kills the
    // sandbox at once).
    if let Some(sandbox) = sandbox {
        sandbox.stop().await;
    }
    drop(tree);
    end
}

/// The agent's process group and every descendant that left it; all are stopped when this
/// is dropped.
struct ProcessTree {
    leader: Option<rustix::process::Pid>,
    /// What marks this job's processes apart from other jobs' (see [`job_markers`]).
    markers: Vec<String>,
}

impl ProcessTree {
    fn new(pid: Option<u32>, markers: Vec<String>) -> ProcessTree {
        ProcessTree {
            leader: pid.and_then(|p| rustix::process::Pid::from_raw(p as i32)),
            markers,
        }
    }
}

impl ProcessTree {
    /// SIGKILLs the whole tree at once, without the SIGTERM and grace the drop gives it.
    fn kill_now(&self) {
        if let Some(pid) = self.leader {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        kill_descendants(&self.markers, false);
    }
}

impl Drop for ProcessTree {
    fn drop(&mut self) {
        if let Some(pid) = self.leader {
            crate::process::terminate_group(pid, crate::process::TERMINATE_GRACE);
        }
        kill_descendants(&self.markers, true);
    }
}

/// The message of a job whose timeout ran out before its agent started.
fn timed_out_while(job: &Job, what: &str) -> String {
    format!(
        "timed out after {} while {what}",
        humantime::format_duration(job.timeout)
    )
}

/// The job's private directories: its commands' HOME and TMPDIR, srt's scratch dir, and the
/// runner's job dir (opencode's own HOME and XDG dirs live there). Every process of the job
/// has one of them in its environment, the agent's and the sandboxed commands' alike.
/// `serve` runs several jobs in one process, so orphans re-parented to the runner are told
/// apart by these; another job's agent or a devShell build must survive this job's end.
fn job_markers(paths: &WorkspacePaths) -> Vec<String> {
    [&paths.temp_dir, &paths.helper_tmp, &paths.job_dir]
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .filter(|v| v.len() > 1)
        .collect()
}

/// Stops every process whose parent chain leads to this one: SIGTERM first (`term_first`),
/// so srt can remove the mount points it made in the checkout, then SIGKILL to what is left.
/// These are the agent's orphans (opencode runs its tools detached and does not stop them
/// when it exits); the runner sets itself as their subreaper, so they are its descendants.
fn kill_descendants(markers: &[String], term_first: bool) {
    use rustix::process::{kill_process, waitpid, Pid, Signal, WaitOptions};
    let me = std::process::id();
    let ours = |pids: Vec<u32>| -> Vec<u32> {
        match markers.is_empty() {
            true => pids,
            false => pids
                .into_iter()
                .filter(|p| crate::procfs::environ_mentions(*p, markers))
                .collect(),
        }
    };
    // The runner's own threads are tasks, not processes; nothing else of ours is a child
    // apart from the agent's tree (git and nix have finished by now).
    let signal_all = |sig: Signal| {
        let found = ours(crate::procfs::descendants(me));
        for pid in &found {
            if let Some(p) = Pid::from_raw(*pid as i32) {
                let _ = kill_process(p, sig);
            }
        }
        found
    };
    let reap = |pids: &[u32]| {
        for pid in pids {
            if let Some(p) = Pid::from_raw(*pid as i32) {
                let _ = waitpid(Some(p), WaitOptions::NOHANG);
            }
        }
    };
    if term_first {
        let mut pids = signal_all(Signal::TERM);
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while !pids.is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            reap(&pids);
            pids = ours(crate::procfs::descendants(me));
        }
    }
    for _ in 0..5 {
        let left = signal_all(Signal::KILL);
        if left.is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
        reap(&left);
    }
}
