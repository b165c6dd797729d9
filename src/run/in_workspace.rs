//! A job inside its prepared workspace, as a pipeline of named steps: its devShell, its
//! policy and network, the agent's launch plan and files, the agent's run with what meters
//! it, and how the run ended.

use crate::sandbox::store::StoreView;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::agent_process::{run_agent, AgentEnd, AgentLimits, EndsEarly};
use super::hooks::CommandHook;
use super::model::ModelAccess;
use super::outcome::{add_agent_log, add_model_error, record_end, timed_out_while, Stop};
use super::prompt::system_prompt;
use super::result::{DevShellSummary, JobResult, Outcome};
use super::tree::job_markers;
use super::Runner;
use crate::agent::{self, AgentInputs, Launch};
use crate::binaries::Tool;
use crate::config::Account;
use crate::devshell;
use crate::job::{AgentKind, Job, Trust};
use crate::netproxy::job::{DepsNet, JobNetwork};
use crate::netproxy::rules;
use crate::sandbox::SandboxPolicy;
use crate::workspace::{self, Workspace, WorkspacePaths};

/// One job in its workspace: what every step reads.
pub(super) struct JobRun<'a> {
    pub runner: &'a Runner,
    /// Applied to every process started for the job (its devShell's nix, its agent): the
    /// suite's hook, then the enclosure's (its limits, its placement).
    pub agent_adjust: Option<CommandHook>,
    pub job: &'a Job,
    pub account: &'a Account,
    pub ws: &'a Workspace,
    /// When the job started, and when its timeout runs out (it bounds every step).
    pub started: Instant,
    pub deadline: tokio::time::Instant,
    /// The job, once its agent has stopped, still counted by the disk reserve with what it
    /// had on disk: the caller drops it after the workspace is removed.
    pub counted: std::sync::Mutex<Option<crate::disk::watch::Counted>>,
}

/// What the agent's run needs besides its launch plan, each stopped or dropped once the
/// agent's tree is: the job's network proxy and its grant on the model gateway.
struct Services {
    proxy: Option<JobNetwork>,
    model: Option<ModelAccess>,
}

impl JobRun<'_> {
    /// Runs the job's steps in its workspace, filling `result`; an error names the step.
    pub(super) async fn run(&self, result: &mut JobResult) -> Result<(), Stop> {
        let mut paths = self.ws.paths.clone();
        // The revision's locks, read before anything of the job runs: the hosts of their set
        // are all an untrusted revision reaches, and only the runner answers them.
        let locks = self.read_locks(&paths).await;
        let dep_hosts = locks.as_ref().map(Locks::hosts).unwrap_or_default();
        // Nix runs inside the job's boundary: the policy before the devShell is known (its
        // script is a read the commands get, not one nix needs). The runner's own, without
        // the suite's hook: its mutations weaken the rules of the agent and its commands, and
        // one that hands the shared clone to the agent's identity would leave Nix's git a
        // repository of another owner (tests/suite/devshell_confined.rs has its controls).
        let before = self
            .runner
            .policy(self.job, &paths, &dep_hosts)
            .map_err(Stop::error)?;
        // The job's network first: the devShell's nix fetches through it too. From the
        // runner's own policy: the suite's hook runs once, after the devShell (a mutation of
        // it hands the shared clone to the agent's identity, which nix's git would refuse).
        let mut net_policy = before.clone();
        let dep_net = || locks.as_ref().and_then(Locks::net);
        let mut proxy = self
            .start_network(&paths, &mut net_policy, dep_net())
            .await?;
        let nix_net = match proxy {
            Some(_) => self.nix_net(&paths, &net_policy)?,
            None => None,
        };
        let building = Instant::now();
        // The locked set is fetched while the devShell builds: both are done before the agent.
        let (devshell, fetched) = tokio::join!(
            self.prepare_devshell(&mut paths, &before, nix_net, result),
            self.fetch_locked(locks.as_ref())
        );
        if let Some(phases) = result.phases.as_mut() {
            phases.devshell_ms = Some(building.elapsed().as_millis() as u64);
        }
        let devshell = fetched.and_then(|deps| {
            result.deps = deps;
            devshell
        });
        let (devshell_attr, closure) = match devshell {
            Ok(loaded) => loaded,
            Err(stop) => {
                if let Some(proxy) = proxy {
                    result.network = Some(proxy.stop().await);
                }
                return Err(stop);
            }
        };
        let mut policy = self.policy(&paths, &dep_hosts)?;
        policy.store_view = self.store_view(closure).await;
        // Before the agent's files are rendered: they name the proxy's port.
        if rules::plan(&policy) == rules::plan(&net_policy) {
            policy.proxy_port = net_policy.proxy_port;
        } else {
            // Only the suite's mutations change a job's network rules after the devShell: the
            // agent gets a proxy with the rules its policy has.
            if let Some(old) = proxy.take() {
                old.stop().await;
            }
            proxy = self.start_network(&paths, &mut policy, dep_net()).await?;
        }
        let system_prompt = {
            let instructions = crate::instructions::read(&self.ws.checkout_view());
            system_prompt(self.job, &policy, devshell_attr.as_deref(), &instructions)
        };
        // `model` is dropped when this returns: the job's token is worthless from then on.
        let (launch, model) = self.plan_agent(&paths, &policy, &system_prompt).await?;
        result.transcript = Some(launch.transcript.clone());
        let (ended, model_error) = self
            .run_agent(&paths, &launch, Services { proxy, model }, result)
            .await?;
        record_end(result, ended, self.job, &paths);
        if let (Some(deps), Some(net)) = (result.deps.as_mut(), result.network.as_ref()) {
            deps.served = net.served;
        }
        add_agent_log(result, &launch.transcript.with_file_name("agent.log"));
        add_model_error(result, model_error);
        Ok(())
    }

    /// The job's policy for the workspace at `paths`, as the runner's hook adjusts it.
    fn policy(&self, paths: &WorkspacePaths, dep_hosts: &[String]) -> Result<SandboxPolicy, Stop> {
        let mut policy = self
            .runner
            .policy(self.job, paths, dep_hosts)
            .map_err(Stop::error)?;
        if let Some(hook) = &self.runner.hooks.policy {
            hook(&mut policy);
        }
        Ok(policy)
    }

    /// Builds (or finds cached) the revision's devShell, inside the job's boundary, and puts a copy
    /// of its script in the job's directory: the sandbox may read that, but not the cache.
    /// Returns the devShell's attribute, when there is one to load, and the store paths the
    /// job needs (`None`: not known, the whole store).
    async fn prepare_devshell(
        &self,
        paths: &mut WorkspacePaths,
        policy: &SandboxPolicy,
        net: Option<devshell::network::NixNet>,
        result: &mut JobResult,
    ) -> Result<(Option<String>, Option<Closure>), Stop> {
        let job = self.job;
        // An untrusted revision's devShell is built only where nix runs in the job's
        // boundary, with no fixed-output build it would need to make (see devshell::confine).
        if job.trust != Trust::Trusted && !policy.confine_agent {
            return Ok((None, None));
        }
        let req = devshell::Request {
            repo: paths.bare_clone.clone(),
            rev: job.rev.clone(),
            git_ref: Some(self.ws.nix_ref.clone()),
            attr: None,
        };
        let shells = &self.runner.devshells;
        // Off only where the agent is not confined either (macOS, the suite's mutation).
        let building = async {
            match policy.confine_agent {
                true => {
                    shells
                        .get_for_job(
                            &req,
                            Arc::new(policy.clone()),
                            net,
                            self.agent_adjust.clone(),
                        )
                        .await
                }
                false => shells.get(&req).await,
            }
        };
        let building = with_progress(building, &job.rev);
        let shell = match tokio::time::timeout_at(self.deadline, building).await {
            Ok(Err(devshell::DevShellError::LimitFired { message })) => {
                result.limit_fired = Some("disk".into());
                return Err(Stop::new(Outcome::Failed, message));
            }
            Ok(shell) => shell.map_err(Stop::error)?,
            Err(_) => {
                let message = timed_out_while(job, "building the devShell");
                return Err(Stop::new(Outcome::TimedOut, message));
            }
        };
        result.devshell = Some(DevShellSummary {
            cache: shell.cache,
            key: shell.key.clone(),
            present: shell.env.is_some(),
        });
        let Some(env) = &shell.env else {
            return Ok((None, Some(Closure::default())));
        };
        let copy = paths.job_dir.join("devshell.sh");
        std::fs::copy(&env.script, &copy)
            .map_err(|e| format!("copying the devShell script: {e}"))?;
        paths.devshell_script = Some(copy);
        let closure = (!env.closure.is_empty()).then(|| Closure {
            paths: env.closure.clone(),
            store: env.store.clone(),
        });
        Ok((Some(shell.attr.clone()), closure))
    }

    /// The job's view of the store ([`crate::sandbox::store`]): `closure`, unless a program
    /// its namespace runs lives in the store (NixOS), or the closure is not known. Where a
    /// program does and the devShell was built in its repository's store, the view adds the
    /// programs' closures from the host's store: the whole host store would not hold the
    /// devShell.
    async fn store_view(&self, closure: Option<Closure>) -> Option<StoreView> {
        let closure = closure?;
        let real = closure
            .store
            .as_deref()
            .map(crate::devshell::repo_store::real_dir);
        let tool = agent_tool(self.job.agent);
        let programs: Vec<PathBuf> = [
            tool,
            Tool::Bwrap,
            Tool::Srt,
            Tool::Node,
            Tool::Setpriv,
            Tool::Runsc,
        ]
        .into_iter()
        .filter_map(|t| crate::binaries::find(t).ok())
        .chain(crate::jobshell::runner_binary().ok())
        .collect();
        let store = crate::store_path::store_dir();
        match crate::sandbox::store::view(&store, &closure.paths, &programs) {
            Ok(paths) => Some(StoreView {
                real,
                paths,
                host: Vec::new(),
            }),
            Err(why) if real.is_some() => {
                let host = match crate::sandbox::store::programs_closure(&programs).await {
                    Ok(host) => host,
                    Err(e) => {
                        tracing::warn!("{why}, and their closure is unknown: {e}");
                        Vec::new()
                    }
                };
                tracing::info!("{why}: the view adds their closure ({} paths)", host.len());
                Some(StoreView {
                    real,
                    paths: closure.paths,
                    host,
                })
            }
            Err(why) => {
                tracing::info!("{why}");
                None
            }
        }
    }

    /// How the devShell's nix reaches the job's proxy, which `policy` names.
    fn nix_net(
        &self,
        paths: &WorkspacePaths,
        policy: &SandboxPolicy,
    ) -> Result<Option<devshell::network::NixNet>, Stop> {
        let Some(proxy_port) = policy.proxy_port else {
            return Ok(None);
        };
        Ok(Some(devshell::network::NixNet {
            proxy_port,
            ca_bundle: policy.ca.as_ref().map(|ca| ca.bundle.clone()),
            socket_dir: paths.job_dir.join("nix-net"),
            runner: crate::jobshell::runner_binary().map_err(Stop::error)?,
            adjust: self.agent_adjust.clone(),
        }))
    }

    /// The revision's locks as the runner will serve them, with the channel the job's
    /// proxy is given its set through; `None` when the runner has no cache or the revision
    /// pins nothing. A revision whose tree cannot be read gets no locked set, said in the log
    /// (its devShell's evaluation will say what is wrong with it).
    async fn read_locks(&self, paths: &WorkspacePaths) -> Option<Locks> {
        let deps = self.runner.deps()?.clone();
        let plan = match crate::deps::prepare::plan(&paths.bare_clone, &self.job.rev).await {
            Ok(plan) => plan,
            Err(e) => {
                tracing::warn!("reading the revision's locks: {e}");
                return None;
            }
        };
        if plan.is_empty() && plan.skipped.is_empty() {
            return None;
        }
        let (served, _) = tokio::sync::watch::channel(None);
        Some(Locks {
            deps,
            plan,
            served,
            job: self.job.id.clone(),
        })
    }

    /// Fetches the locked set into the cache, within the job's timeout, and hands it to the
    /// job's proxy; what it came to, for the result.
    async fn fetch_locked(
        &self,
        locks: Option<&Locks>,
    ) -> Result<Option<crate::deps::DepsSummary>, Stop> {
        let Some(locks) = locks else {
            return Ok(None);
        };
        let fetching = locks.deps.prepare(&self.job.id, locks.plan.clone());
        match tokio::time::timeout_at(self.deadline, fetching).await {
            Ok((served, summary)) => {
                let _ = locks.served.send(Some(served));
                Ok(Some(summary))
            }
            Err(_) => Err(Stop::new(
                Outcome::TimedOut,
                timed_out_while(self.job, "fetching the revision's locked dependencies"),
            )),
        }
    }

    /// Starts the job's network proxy, when its policy lets commands reach some host, and
    /// records its port in the policy.
    async fn start_network(
        &self,
        paths: &WorkspacePaths,
        policy: &mut SandboxPolicy,
        deps: Option<DepsNet>,
    ) -> Result<Option<JobNetwork>, Stop> {
        let (runner, job) = (self.runner, self.job);
        let net = crate::netproxy::job::JobNet {
            job_id: &job.id,
            timeout: job.timeout,
            result_dir: &workspace::job_root(&runner.state, &job.id),
            job_dir: &paths.job_dir,
            temp_dir: &self.ws.proxy_tmp,
            bind: runner.hooks.proxy_listener.as_deref(),
            adjust: runner.hooks.proxy_command.as_deref(),
            env_source: &runner.env_source,
            deps,
        };
        crate::netproxy::job::start(policy, net)
            .await
            .map_err(Stop::error)
    }

    /// The agent's launch plan, with its files (settings, wrapper, prompt) written, and the
    /// job's grant on the model gateway the plan names (none when the agent holds the
    /// account's login itself).
    async fn plan_agent(
        &self,
        paths: &WorkspacePaths,
        policy: &SandboxPolicy,
        system_prompt: &str,
    ) -> Result<(Launch, Option<ModelAccess>), Stop> {
        let tool = agent_tool(self.job.agent);
        // Both agents' commands run in the job's srt sandbox (`agent::commands`).
        let srt = crate::binaries::find(Tool::Srt).ok();
        let node = crate::binaries::find(Tool::Node).ok();
        let runner_binary = crate::jobshell::runner_binary()?;
        let program = crate::binaries::find(tool)
            .ok()
            .ok_or_else(|| Stop::error("the agent binary vanished"))?;
        let model = self
            .runner
            .open_model_access(self.job, self.account)
            .await
            .map_err(Stop::error)?;
        let inputs = AgentInputs {
            job: self.job,
            account: self.account,
            policy,
            workspace: paths,
            system_prompt,
            program: &program,
            srt: srt.as_deref(),
            node: node.as_deref(),
            runner: Some(&runner_binary),
            srt_programs: crate::agent::commands::SrtPrograms::find(),
            host_env: self.runner.env_source.clone(),
            gateway: model.as_ref().map(|(_, access)| access),
        };
        let mut launch = agent::plan(&inputs).map_err(Stop::error)?;
        launch.write_files().map_err(Stop::error)?;
        // After the files: a root runner hands them, with the job's trees, to the agent.
        let gateway_port = model.as_ref().map(|(_, access)| access.port);
        let at = (self.runner.state.root(), gateway_port);
        super::confine::confine(&mut launch, policy, paths, at).map_err(Stop::error)?;
        Ok((launch, model))
    }

    /// The mount namespace a root runner starts the confined agent in: its own checkout and
    /// no other job's (`workspace::namespace`). A runner that is its service user starts it
    /// in the namespace that alone holds its layered checkout, when it has one.
    fn agent_namespace(
        &self,
        paths: &WorkspacePaths,
        launch: &Launch,
    ) -> Result<Option<Arc<crate::workspace::namespace::JobNamespace>>, Stop> {
        let plant = self.runner.hooks.agent_mounts.clone();
        let root = rustix::process::geteuid().is_root();
        if !root {
            return Ok(self.ws.namespace().cloned());
        }
        if launch.confined.is_none() && plant.is_none() {
            return Ok(None);
        }
        crate::workspace::namespace::JobNamespace::new(Some(&paths.checkout), plant)
            .map(Some)
            .map_err(|e| Stop::error(format!("making the agent's mount namespace: {e}")))
    }

    /// Runs the agent under the job's limits and the disk watchdog, then stops the services
    /// it used and records what they metered (disk, network, model use).
    async fn run_agent(
        &self,
        paths: &WorkspacePaths,
        launch: &Launch,
        Services { mut proxy, model }: Services,
        result: &mut JobResult,
    ) -> Result<(AgentEnd, Option<String>), Stop> {
        let (runner, job) = (self.runner, self.job);
        let started = self.started;
        let spawned =
            |at: Instant| result.agent_started_ms = Some((at - started).as_millis() as u64);
        let mut disk = crate::disk::watch::Watchdog::start(
            &job.id,
            self.ws.disk_trees(),
            runner.disk,
            runner.disk_jobs.clone(),
        );
        let ended = run_agent(
            launch,
            self.deadline
                .saturating_duration_since(tokio::time::Instant::now()),
            AgentLimits {
                adjust: self.agent_adjust.as_deref(),
                file_size: runner.disk.limit,
                disk: disk.as_mut(),
                namespace: self.agent_namespace(paths, launch)?,
            },
            spawned,
            job_markers(paths),
            EndsEarly {
                proxy_failed: proxy.as_mut().map(|p| p.startup_failure()),
                limit_fired: model.as_ref().map(|(grant, _)| grant.limit_fired()),
            },
            model
                .as_ref()
                .map(|(grant, _)| Box::pin(grant.first_request()) as _),
        )
        .await;
        result.disk_used = disk.as_ref().map(|d| d.peak());
        if let Some(disk) = disk {
            *self.counted.lock().unwrap_or_else(|e| e.into_inner()) = Some(disk.stop());
        }
        // The agent's tree is stopped: nothing can make a request any more.
        if let Some(proxy) = proxy {
            result.network = Some(proxy.stop().await);
        }
        let mut model_error = None;
        if let Some((grant, _)) = &model {
            result.usage = Some(grant.usage());
            model_error = grant.upstream_error();
        }
        drop(model);
        ended.map(|e| (e, model_error)).map_err(Stop::error)
    }
}

/// The revision's locks: the runner's cache and fetcher, what they pin, and the channel the
/// job's proxy gets the fetched set through. Dropped with the job, which then holds none of
/// the cache's objects any more.
struct Locks {
    deps: Arc<crate::deps::Deps>,
    plan: crate::deps::Plan,
    served: tokio::sync::watch::Sender<Option<Arc<crate::deps::Served>>>,
    job: String,
}

impl Locks {
    /// The hosts the runner answers for the job.
    fn hosts(&self) -> Vec<String> {
        self.plan.hosts().into_iter().collect()
    }

    /// What the job's proxy answers from, when the locks pin anything.
    fn net(&self) -> Option<DepsNet> {
        (!self.plan.is_empty()).then(|| DepsNet {
            hosts: self.plan.hosts(),
            served: self.served.subscribe(),
            cache: self.deps.cache.clone(),
            fetcher: self.deps.fetcher.clone(),
        })
    }
}

impl Drop for Locks {
    fn drop(&mut self) {
        self.deps.release(&self.job);
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

/// The store paths a devShell needs, and the root of the repository store holding them
/// (`None`: the host's).
#[derive(Debug, Default)]
pub(super) struct Closure {
    paths: Vec<PathBuf>,
    store: Option<PathBuf>,
}

/// The binary that runs a job's agent.
fn agent_tool(agent: AgentKind) -> Tool {
    match agent {
        AgentKind::Claude => Tool::Claude,
        AgentKind::Opencode => Tool::Opencode,
    }
}
