//! The agent as a process: started with its limits, fed its prompt, waited for until it
//! exits or something ends the job first (its timeout, the disk watchdog, a token cap, a
//! failed network proxy or commands' sandbox), and then stopped with its whole tree.

use std::future::Future;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;

use super::error::AgentError;
use super::tree::ProcessTree;
use crate::agent::Launch;
use crate::jobshell::host::Prepared;

/// How the agent's run ended.
pub(super) enum AgentEnd {
    Exited(i32),
    Signalled(i32),
    TimedOut,
    /// The disk watchdog stopped the job.
    Disk(crate::disk::watch::Fired),
    /// The gateway refused a request past a token cap: why.
    TokensSpent(String),
}

/// What bounds the agent's process tree besides its timeout.
pub(super) struct AgentLimits<'a> {
    /// Adjusts the agent's command (the boundary suite's confinement, the enclosure's
    /// rlimits and placement).
    pub adjust: Option<&'a (dyn Fn(&mut std::process::Command) + Send + Sync)>,
    /// RLIMIT_FSIZE: the disk limit, per file.
    pub file_size: Option<u64>,
    pub disk: Option<&'a mut crate::disk::watch::Watchdog>,
    /// The mount namespace the agent and its companion start from (a root runner's: see
    /// `workspace::namespace`).
    pub namespace: Option<std::sync::Arc<crate::workspace::namespace::JobNamespace>>,
}

/// What ends a job before its agent exits, besides its timeout.
pub(super) struct EndsEarly {
    /// The job's network proxy never served.
    pub proxy_failed: Option<crate::netproxy::proxy::StartupFailure>,
    /// The gateway refused a request past a token cap.
    pub limit_fired: Option<tokio::sync::watch::Receiver<Option<String>>>,
}

/// How long an agent whose request a token cap refused may take to show the error and exit
/// before its tree is stopped.
const TOKENS_SPENT_GRACE: Duration = Duration::from_secs(10);

/// A future that resolves when the agent's start is over (its first model request), for a
/// companion that should not compete with it.
pub(super) type StartOver = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// Starts the agent and waits for it, for at most `timeout`. Dropping this future (a
/// cancelled job) stops the agent's whole process tree, as does a timeout. The companion
/// starts when `start_over` resolves or the agent's first command reaches it.
pub(super) async fn run_agent(
    launch: &Launch,
    timeout: Duration,
    limits: AgentLimits<'_>,
    spawned: impl FnOnce(Instant),
    markers: Vec<String>,
    ends: EndsEarly,
    start_over: Option<StartOver>,
) -> Result<AgentEnd, AgentError> {
    let AgentLimits {
        adjust,
        file_size,
        disk,
        namespace,
    } = limits;
    let (cmd, companion) = commands(launch, adjust, file_size, namespace)?;
    let started = Started {
        launch,
        cmd,
        companion,
        timeout,
        adjust,
        spawned,
        markers,
        start_over,
    };
    started.until_end(disk, ends).await
}

/// The agent's and its companion's commands, in the job's namespace, adjusted and limited:
/// the companion runs the agent's commands (the sandbox host), so it is placed and
/// limited as the agent is (the suite's namespace, the enclosure's limits, the disk limit,
/// the job's cgroup), as those commands were when they were the agent's children.
fn commands(
    launch: &Launch,
    adjust: Option<&(dyn Fn(&mut std::process::Command) + Send + Sync)>,
    file_size: Option<u64>,
    namespace: Option<std::sync::Arc<crate::workspace::namespace::JobNamespace>>,
) -> Result<(tokio::process::Command, Option<Prepared>), AgentError> {
    let mut cmd = agent_command(launch)?;
    let mut companion = match &launch.companion {
        Some(plan) => Some(Prepared::new(plan)?),
        None => None,
    };
    let gvisor = launch.companion.as_ref().is_some_and(|plan| plan.gvisor);
    let mut commands: Vec<(&mut std::process::Command, bool)> = vec![(cmd.as_std_mut(), false)];
    if let Some(c) = companion.as_mut() {
        commands.push((c.command_mut(), gvisor));
    }
    for (c, soft_only) in commands.iter_mut() {
        if let Some(ns) = &namespace {
            ns.enter(c);
        }
        if let Some(adjust) = adjust {
            adjust(c);
        }
        match file_size {
            Some(bytes) if *soft_only => crate::disk::limit_file_size_soft(c, bytes),
            Some(bytes) => crate::disk::limit_file_size(c, bytes),
            None => {}
        }
    }
    Ok((cmd, companion))
}

/// The agent's run from its start: what [`run_agent`] awaits once its commands are placed.
struct Started<'a, F> {
    launch: &'a Launch,
    cmd: tokio::process::Command,
    companion: Option<Prepared>,
    timeout: Duration,
    adjust: Option<&'a (dyn Fn(&mut std::process::Command) + Send + Sync)>,
    spawned: F,
    markers: Vec<String>,
    start_over: Option<StartOver>,
}

impl<F: FnOnce(Instant)> Started<'_, F> {
    /// Starts the agent (after its network bridge) and its companion, and waits until the
    /// agent's end, then stops the companion and the agent's whole tree.
    async fn until_end(
        self,
        disk: Option<&mut crate::disk::watch::Watchdog>,
        ends: EndsEarly,
    ) -> Result<AgentEnd, AgentError> {
        let Started {
            launch,
            cmd,
            companion,
            timeout,
            adjust,
            spawned,
            markers,
            start_over,
        } = self;
        // Before the agent: its first request goes through the bridge.
        let _bridge = match &launch.net_bridge {
            Some(b) => Some(
                crate::agentnet::start_outside(&b.runner, &b.dir, b.owner, &b.ports, adjust)
                    .await
                    .map_err(AgentError::Bridge)?,
            ),
            None => None,
        };
        let mut child = spawn_agent(launch, cmd)?;
        spawned(Instant::now());
        let tree = ProcessTree::new(child.id(), markers);
        // At the agent's first model request or its first command: the sandbox's start-up
        // (Node, srt's setup, bubblewrap) takes a core for ~0.2 s, which the agent's own
        // start should not share, and overlaps the model's answer instead. A command sent
        // before the sandbox is up waits in the socket's backlog.
        let mut sandbox = companion.map(|c| match start_over {
            Some(over) => c.spawn_when(over),
            None => c.spawn_when(std::future::pending()),
        });
        let sandbox_failed = sandbox.as_mut().map(|s| s.failure());
        feed_prompt(&mut child, launch);
        let deadline = tokio::time::Instant::now() + timeout;
        let end = wait_for_end(&mut child, deadline, disk, sandbox_failed, ends).await;
        if matches!(end, Ok(AgentEnd::Disk(_))) {
            // No grace: a job filling the disk would go on writing through it.
            tree.kill_now();
        }
        // The commands' sandbox before the rest of the agent's tree, so srt removes the mount
        // points it left in the checkout before anything reads the worktree (its stop kills
        // the sandbox at once).
        if let Some(sandbox) = sandbox {
            sandbox.stop().await;
        }
        drop(tree);
        end
    }
}

/// The agent's command as its launch plan says (inside the job's namespace), its event
/// stream going to the transcript and its stderr to `agent.log` beside it, in a process
/// group of its own.
fn agent_command(launch: &Launch) -> Result<tokio::process::Command, AgentError> {
    let create = |path: std::path::PathBuf| {
        std::fs::File::create(&path).map_err(|source| AgentError::Output { path, source })
    };
    let transcript = create(launch.transcript.clone())?;
    let log = create(launch.transcript.with_file_name("agent.log"))?;
    let (program, args) = match &launch.confined {
        Some(confined) => (
            confined.program.clone(),
            confined.args(&launch.program, &launch.args),
        ),
        None => (launch.program.clone(), launch.args.clone()),
    };
    let mut cmd = tokio::process::Command::new(&program);
    cmd.args(&args)
        .env_clear()
        .envs(&launch.env)
        .current_dir(&launch.cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::from(transcript))
        .stderr(Stdio::from(log))
        .process_group(0)
        .kill_on_drop(false);
    Ok(cmd)
}

/// Starts the agent, with the runner as the subreaper of its orphans (a tool's process that
/// left its group is re-parented to the runner, which kills it when the agent ends).
fn spawn_agent(
    launch: &Launch,
    cmd: tokio::process::Command,
) -> Result<tokio::process::Child, AgentError> {
    let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
    tracing::info!(program = %launch.program.display(), cwd = %launch.cwd.display(), "starting the agent");
    crate::process::spawn_with_runner(cmd).map_err(|source| {
        let program = launch.program.clone();
        match program.is_file() {
            true => AgentError::Prepare { program, source },
            false => AgentError::Start { program, source },
        }
    })
}

/// Writes the prompt to the agent's stdin from a task of its own: a prompt the agent does
/// not read must not block the runner.
fn feed_prompt(child: &mut tokio::process::Child, launch: &Launch) {
    if let Some(mut stdin) = child.stdin.take() {
        let prompt = launch.stdin.clone();
        tokio::spawn(async move {
            let _ = stdin.write_all(prompt.as_bytes()).await;
            let _ = stdin.shutdown().await;
        });
    }
}

/// Waits until the agent exits, its time is up, or something else ends the job first.
async fn wait_for_end(
    child: &mut tokio::process::Child,
    deadline: tokio::time::Instant,
    disk: Option<&mut crate::disk::watch::Watchdog>,
    sandbox_failed: Option<crate::jobshell::host::Failure>,
    EndsEarly {
        proxy_failed,
        limit_fired,
    }: EndsEarly,
) -> Result<AgentEnd, AgentError> {
    use std::os::unix::process::ExitStatusExt;
    // The job's network proxy starts when the job first connects to it (see
    // `JobProxy::at_first_connection`); if it then never serves, the job ends here, its tree
    // stopped by the caller, rather than running without network. Likewise the sandbox of the
    // agent's commands: a job whose commands cannot run ends.
    let proxy_failed = or_never(proxy_failed.map(|f| f.failed()));
    let sandbox_failed = or_never(sandbox_failed.map(|f| f.failed()));
    let disk_fired = or_never(disk.map(|w| w.fired()));
    let limit_fired = or_never(limit_fired.map(token_cap_reached));
    tokio::select! {
        fired = disk_fired => Ok(AgentEnd::Disk(fired)),
        waited = tokio::time::timeout_at(deadline, child.wait()) => match waited {
            Ok(Ok(status)) => match (status.code(), status.signal()) {
                (Some(code), _) => Ok(AgentEnd::Exited(code)),
                (None, Some(sig)) => Ok(AgentEnd::Signalled(sig)),
                (None, None) => Ok(AgentEnd::Exited(-1)),
            },
            Ok(Err(e)) => Err(AgentError::Wait(e)),
            Err(_) => Ok(AgentEnd::TimedOut),
        },
        e = proxy_failed => Err(AgentError::Proxy(e)),
        e = sandbox_failed => Err(AgentError::Sandbox(e)),
        why = limit_fired => {
            // The agent got the refusal; let it say so and exit on its own first.
            let grace = (tokio::time::Instant::now() + TOKENS_SPENT_GRACE).min(deadline);
            let _ = tokio::time::timeout_at(grace, child.wait()).await;
            Ok(AgentEnd::TokensSpent(why))
        }
    }
}

/// Resolves with why the gateway refused a request past a token cap, once it has; never if
/// the gateway is gone without saying so.
async fn token_cap_reached(mut fired: tokio::sync::watch::Receiver<Option<String>>) -> String {
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

/// `end`'s output, or never when there is nothing that could end the job this way.
async fn or_never<F: Future>(end: Option<F>) -> F::Output {
    match end {
        Some(end) => end.await,
        None => std::future::pending().await,
    }
}
