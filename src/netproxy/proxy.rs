//! The job's `srt proxy` process: started with four inherited descriptors when the job first
//! connects to it, stopped with the job, and never outliving the runner.
//!
//! - `--listen-fd`: a loopback listening socket the runner binds, so the port is known before
//!   the proxy starts and nothing else can take it between choosing and binding.
//! - `--decider-fd`: one end of a socket pair; the runner's [`super::decider`] holds the other.
//! - `--lifeline-fd`: the read end of a pipe whose write end only the runner holds. When the
//!   runner dies, however it dies, the kernel closes that end and the proxy shuts down; when
//!   the decider's end closes, it shuts down too.
//! - `--ca-fd`: a pipe the CA key and certificate are written into and closed before the
//!   proxy starts, so the key is never in a file.
//!
//! Every descriptor is close-on-exec in the runner; only the proxy's child side clears it, in
//! the forked child, so no other program the runner starts (the agent, a concurrent job's)
//! inherits one.

use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::AsyncBufReadExt;

use super::ca::JobCa;
use super::decider::{self, DeciderError};
use super::log::{self, Counts, NetLog};
use super::rules::NetRules;
use crate::process::HELPER_START_BOUND as START_TIMEOUT;
use crate::util::io::{IoContext, IoError};
use crate::util::on_demand::{self, OnDemand};

/// How long the proxy gets to shut down after its lifeline closes (it gives open requests a
/// second) before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(3);

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error(transparent)]
    Io(#[from] IoError),
    #[error("starting {program}: {source}")]
    Spawn {
        program: PathBuf,
        source: std::io::Error,
    },
    #[error("srt proxy did not start within {}s{}", START_TIMEOUT.as_secs(), stderr_note(.0))]
    Timeout(String),
    #[error("srt proxy stopped before it served{}", stderr_note(.0))]
    Exited(String),
    #[error("the network decider: {0}")]
    Decider(#[from] DeciderError),
    #[error("{0}")]
    Ca(#[from] super::ca::CaError),
    #[error("trusted jobs need srt for the runner's network proxy: set QUEST_RUNNER_SRT or put srt on PATH")]
    NoSrt,
}

fn stderr_note(tail: &str) -> String {
    if tail.is_empty() {
        String::new()
    } else {
        format!(": {tail}")
    }
}

/// What the result says about a job's network.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct NetworkSummary {
    /// Requests the decider allowed (forwarded upstream).
    pub allowed: u64,
    /// Requests the decider refused.
    pub refused: u64,
    /// Requests the runner answered from the job's locked dependencies.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub served: u64,
    /// The per-job network log: one line per request.
    pub log: PathBuf,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl NetworkSummary {
    pub fn of(counts: &Counts, log: &Path) -> NetworkSummary {
        NetworkSummary {
            allowed: counts.allowed(),
            refused: counts.refused(),
            served: counts.served(),
            log: log.to_path_buf(),
        }
    }
}

/// What starting a proxy takes.
pub struct ProxySpec<'a> {
    pub srt: &'a Path,
    pub rules: NetRules,
    pub ca: &'a JobCa,
    /// The network log, and the job's counts (shared with the runner's front, when the job
    /// has one).
    pub log: Arc<NetLog>,
    pub counts: Arc<Counts>,
    /// Where the proxy's own stderr goes.
    pub stderr_log: PathBuf,
    /// The listening socket to hand over (bound by the runner: on loopback, or the Unix
    /// socket the runner's front passes connections on to).
    pub listener: Listener,
    /// Adjusts the proxy's command before it starts (the boundary suite runs it in the
    /// scripted model's network namespace, as it does the agent).
    pub adjust: Option<&'a (dyn Fn(&mut std::process::Command) + Send + Sync)>,
    /// The runner's environment, from which the proxy keeps what it needs upstream.
    pub env_source: &'a [(String, String)],
    /// The proxy's TMPDIR: srt writes its trust bundle (~0.4 MB) into a fresh directory there
    /// and never removes it, so it must be a directory the job's cleanup removes — and not one
    /// of the job's private dirs, whose processes the runner stops before the proxy.
    pub temp_dir: &'a Path,
}

/// A listening socket the proxy inherits.
pub enum Listener {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener),
}

impl Listener {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        match self {
            Listener::Tcp(l) => l.as_fd(),
            Listener::Unix(l) => l.as_fd(),
        }
    }

    /// The loopback port, for a TCP listener.
    fn port(&self) -> std::io::Result<u16> {
        match self {
            Listener::Tcp(l) => Ok(l.local_addr()?.port()),
            Listener::Unix(_) => Ok(0),
        }
    }
}

impl From<std::net::TcpListener> for Listener {
    fn from(l: std::net::TcpListener) -> Listener {
        Listener::Tcp(l)
    }
}

/// Variables of the runner's that the proxy keeps: its `node` on `PATH`, a parent proxy for
/// its upstream connections, and extra roots to verify upstreams with.
const PROXY_ENV: &[&str] = &[
    "PATH",
    "LANG",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "NODE_EXTRA_CA_CERTS",
];

/// A job's proxy: started now ([`JobProxy::start`]) or at the first connection to its port
/// ([`JobProxy::at_first_connection`]); killed if dropped without [`JobProxy::stop`].
pub struct JobProxy {
    pub port: u16,
    life: OnDemand,
    counts: Arc<Counts>,
    log: PathBuf,
    /// Whether the proxy came to serve, until [`JobProxy::startup_failure`] takes it.
    started: Option<tokio::sync::oneshot::Receiver<Result<(), ProxyError>>>,
}

/// See [`JobProxy::startup_failure`].
pub struct StartupFailure(Option<tokio::sync::oneshot::Receiver<Result<(), ProxyError>>>);

impl StartupFailure {
    /// A failure that never comes: a job with no `srt proxy`.
    pub fn never() -> StartupFailure {
        StartupFailure(None)
    }

    /// The failure, or `None` as soon as the proxy serves.
    async fn now_or_never_started(self) -> Option<ProxyError> {
        match self.0?.await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e),
            Err(_) => Some(ProxyError::Exited(String::new())),
        }
    }

    /// Resolves with the failure; never if the proxy serves, or never starts.
    pub async fn failed(self) -> ProxyError {
        match self.0 {
            // Dropped unsent: the proxy was stopped before anything needed it.
            Some(rx) => match rx.await {
                Ok(Err(e)) => e,
                Ok(Ok(())) | Err(_) => std::future::pending().await,
            },
            None => std::future::pending().await,
        }
    }
}

/// A pipe, both ends close-on-exec: (read, write).
fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

impl JobProxy {
    /// Starts the proxy and its decider now, and waits until the proxy serves.
    pub async fn start(spec: ProxySpec<'_>) -> Result<JobProxy, ProxyError> {
        let mut proxy = Self::spawn(spec, std::future::ready(()))?;
        match proxy.startup_failure().now_or_never_started().await {
            Some(e) => {
                proxy.life.stop().await;
                Err(e)
            }
            None => Ok(proxy),
        }
    }

    /// Starts the proxy and its decider once a client connects to its port, without waiting
    /// for it to serve: its Node start-up takes ~0.5 s (a core for ~0.2 s), which the agent's
    /// own start should not compete with, and a job that reaches no host never needs it
    /// (`util::on_demand`). The client waits in the listening socket's backlog (the runner
    /// bound it), so nothing is refused meanwhile. [`Self::startup_failure`] says whether the
    /// proxy, once started, never came to serve; the job fails then.
    pub fn at_first_connection(spec: ProxySpec<'_>) -> Result<JobProxy, ProxyError> {
        let need = on_demand::first_connection(&spec.listener.as_fd())
            .context("watching the proxy's port")?;
        Self::spawn(spec, need)
    }

    /// The proxy's command, descriptors and log made now; its start once `need` resolves.
    fn spawn(
        spec: ProxySpec<'_>,
        need: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<JobProxy, ProxyError> {
        let port = spec.listener.port().context("reading the proxy's port")?;
        let ends = Ends::open(spec.ca)?;
        let cmd = proxy_command(&spec, &ends);
        let log = spec.log.clone();
        let log_path = log.path().to_path_buf();
        let counts = spec.counts.clone();
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let pending = Pending {
            cmd,
            listener: spec.listener,
            ends,
            rules: spec.rules,
            log,
            counts: counts.clone(),
            stderr_log: spec.stderr_log,
            started: started_tx,
        };
        let life = OnDemand::new(need, move || pending.launch(), Running::stop);
        Ok(JobProxy {
            port,
            life,
            log: log_path,
            counts,
            started: Some(started_rx),
        })
    }

    /// Why the proxy never came to serve; resolves only then (pending forever once it
    /// serves, when it never starts, or when taken a second time).
    pub fn startup_failure(&mut self) -> StartupFailure {
        StartupFailure(self.started.take())
    }

    /// Closes the lifeline, waits for the proxy to stop (killing it after a grace period),
    /// and returns the job's counts. A proxy nothing needed is not started now.
    pub async fn stop(mut self) -> NetworkSummary {
        self.life.stop().await;
        // The decider has read everything the proxy sent.
        self.summary()
    }

    /// The counts so far.
    pub fn summary(&self) -> NetworkSummary {
        NetworkSummary::of(&self.counts, &self.log)
    }
}

/// A proxy made but not started: what its start takes.
struct Pending {
    cmd: std::process::Command,
    listener: Listener,
    ends: Ends,
    rules: NetRules,
    log: Arc<NetLog>,
    counts: Arc<Counts>,
    stderr_log: PathBuf,
    started: tokio::sync::oneshot::Sender<Result<(), ProxyError>>,
}

impl Pending {
    /// Starts the proxy and its decider; `None` when it could not start, which
    /// `started` then says.
    fn launch(self) -> Option<Running> {
        let Pending {
            cmd,
            listener,
            ends,
            rules,
            log,
            counts,
            stderr_log,
            started,
        } = self;
        let program = PathBuf::from(cmd.get_program());
        let mut cmd = tokio::process::Command::from(cmd);
        cmd.kill_on_drop(true);
        let mut child = match crate::process::spawn_with_runner(cmd) {
            Ok(child) => child,
            Err(source) => {
                let _ = started.send(Err(ProxyError::Spawn { program, source }));
                return None;
            }
        };
        // The proxy holds these now; the runner keeps only its ends.
        let Ends {
            ours,
            theirs,
            lifeline_r,
            lifeline_w,
            ca_r,
        } = ends;
        drop((listener, theirs, lifeline_r, ca_r));
        let stream = ours
            .set_nonblocking(true)
            .and_then(|()| tokio::net::UnixStream::from_std(ours));
        let stream = match stream.context("setting up the decider's socket") {
            Ok(stream) => stream,
            Err(e) => {
                let _ = started.send(Err(e.into()));
                return None;
            }
        };
        let (hello_tx, hello_rx) = tokio::sync::oneshot::channel();
        // In the job's span: the decider's and the proxy's lines name the job.
        let decider = tokio::spawn(tracing::Instrument::in_current_span(decider::serve(
            stream,
            rules,
            log.clone(),
            counts.clone(),
            hello_tx,
        )));
        let (served_tx, served_rx) = tokio::sync::oneshot::channel();
        let stderr = tokio::spawn(tracing::Instrument::in_current_span(copy_stderr(
            child.stderr.take(),
            stderr_log.clone(),
            served_tx,
            (log, counts),
        )));
        watch_startup(hello_rx, served_rx, stderr_log, started);
        Some(Running {
            child,
            lifeline: Some(lifeline_w),
            decider,
            stderr,
        })
    }
}

/// A started proxy.
struct Running {
    child: tokio::process::Child,
    lifeline: Option<OwnedFd>,
    decider: tokio::task::JoinHandle<Result<(), DeciderError>>,
    stderr: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Closes the lifeline and waits for the proxy to stop (killing it after a grace
    /// period), then for its decider to read what the proxy sent.
    async fn stop(mut self) {
        self.lifeline.take();
        if tokio::time::timeout(STOP_GRACE, self.child.wait())
            .await
            .is_err()
        {
            tracing::warn!("srt proxy did not stop with its lifeline; killing it");
            let _ = self.child.kill().await;
        }
        // The proxy's end closed with it: the decider has read everything there was.
        match tokio::time::timeout(STOP_GRACE, &mut self.decider).await {
            Ok(Ok(Err(e))) => tracing::warn!("the network decider: {e}"),
            Ok(_) => {}
            Err(_) => self.decider.abort(),
        }
        let _ = tokio::time::timeout(STOP_GRACE, &mut self.stderr).await;
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // A job dropped midway (cancelled): the lifeline closes with this, the child is
        // killed by kill_on_drop, and the decider task must not outlive it.
        self.decider.abort();
    }
}

/// The runner's ends and the proxy's of the descriptors it inherits (the listener aside): the
/// decider's socket pair, the lifeline pipe, and the CA pipe, already written and closed.
struct Ends {
    ours: std::os::unix::net::UnixStream,
    theirs: std::os::unix::net::UnixStream,
    lifeline_r: OwnedFd,
    lifeline_w: OwnedFd,
    ca_r: OwnedFd,
}

impl Ends {
    fn open(ca: &JobCa) -> Result<Ends, ProxyError> {
        let (ours, theirs) =
            std::os::unix::net::UnixStream::pair().context("creating the decider's socket")?;
        let (lifeline_r, lifeline_w) = pipe().context("creating the lifeline")?;
        let (ca_r, ca_w) = pipe().context("creating the CA pipe")?;
        // A few KiB: fits the pipe's buffer, so it is written whole before the proxy runs.
        {
            let mut w = std::fs::File::from(ca_w);
            w.write_all(ca.proxy_pem().as_bytes())
                .context("handing over the CA")?;
        }
        Ok(Ends {
            ours,
            theirs,
            lifeline_r,
            lifeline_w,
            ca_r,
        })
    }
}

/// `srt proxy` with its four descriptors, the runner's variables it needs upstream, its own
/// TMPDIR, and debug output (the refusals it makes alone).
fn proxy_command(spec: &ProxySpec<'_>, ends: &Ends) -> std::process::Command {
    let listen_fd = spec.listener.as_fd().as_raw_fd();
    let decider_fd = ends.theirs.as_raw_fd();
    let lifeline_fd = ends.lifeline_r.as_raw_fd();
    let ca_fd = ends.ca_r.as_raw_fd();
    let mut cmd = std::process::Command::new(spec.srt);
    cmd.arg("proxy")
        .args(["--listen-fd", &listen_fd.to_string()])
        .args(["--decider-fd", &decider_fd.to_string()])
        .args(["--lifeline-fd", &lifeline_fd.to_string()])
        .args(["--ca-fd", &ca_fd.to_string()])
        .env_clear()
        .envs(
            spec.env_source
                .iter()
                .filter(|(k, _)| PROXY_ENV.contains(&k.as_str()))
                .map(|(k, v)| (k.as_str(), v.as_str())),
        )
        .env("TMPDIR", spec.temp_dir)
        // Only with it does the proxy report the requests it refuses without asking the
        // decider (hosts off the allowlist); see `copy_stderr`.
        .env("SRT_DEBUG", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    crate::util::fd::inherit(&mut cmd, vec![listen_fd, decider_fd, lifeline_fd, ca_fd]);
    if let Some(adjust) = spec.adjust {
        adjust(&mut cmd);
    }
    cmd
}

/// Serving means: hellos exchanged, CA accepted, listening. `served` fails when the proxy's
/// stderr ends, that is when it exited, with all of its stderr in the log.
fn watch_startup(
    hello: tokio::sync::oneshot::Receiver<()>,
    served: tokio::sync::oneshot::Receiver<()>,
    stderr_log: PathBuf,
    started_tx: tokio::sync::oneshot::Sender<Result<(), ProxyError>>,
) {
    tokio::spawn(tracing::Instrument::in_current_span(async move {
        let began = std::time::Instant::now();
        let serving = async {
            let _ = hello.await;
            served.await.is_ok()
        };
        let outcome = match tokio::time::timeout(START_TIMEOUT, serving).await {
            Ok(true) => {
                tracing::info!(
                    ms = began.elapsed().as_millis(),
                    "the job's network proxy serves"
                );
                Ok(())
            }
            Ok(false) => Err(ProxyError::Exited(tail(&stderr_log))),
            Err(_) => Err(ProxyError::Timeout(tail(&stderr_log))),
        };
        let _ = started_tx.send(outcome);
    }));
}

/// Copies the proxy's stderr into `path`, and reports when it says it serves.
/// Copies the proxy's stderr to `path`, says when the proxy serves, and logs the requests the
/// proxy refused itself. Its debug lines are otherwise dropped: they name every request's full
/// URL, query (and any token in it) included.
async fn copy_stderr(
    stderr: Option<tokio::process::ChildStderr>,
    path: PathBuf,
    served: tokio::sync::oneshot::Sender<()>,
    (log, counts): (Arc<NetLog>, Arc<Counts>),
) {
    let Some(stderr) = stderr else { return };
    let mut file = match std::fs::File::create(&path) {
        Ok(f) => Some(f),
        Err(e) => {
            tracing::warn!("creating {}: {e}", path.display());
            None
        }
    };
    let mut served = Some(served);
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if line.starts_with("srt proxy: serving") {
            if let Some(tx) = served.take() {
                let _ = tx.send(());
            }
        }
        if let Some((method, host, port)) = log::proxy_refusal(&line) {
            let refused = log::proxy_refused();
            log::count(&counts, &refused);
            let entry = log::Entry {
                method,
                host,
                port,
                path: "-",
            };
            log.record(std::time::SystemTime::now(), &entry, &refused);
            continue;
        }
        if line.starts_with(log::SRT_DEBUG_PREFIX) {
            continue;
        }
        if let Some(f) = file.as_mut() {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// The last lines of the proxy's stderr, for an error message.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}
