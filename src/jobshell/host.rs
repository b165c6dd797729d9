//! The runner's side of a job's commands' sandbox: binds the job's socket, starts the
//! sandbox host (`node sandbox-host.mjs`, srt's library) once the agent needs it (its first
//! model request, or its first command: `util::on_demand`), watches it, and stops it once the
//! agent's tree has stopped.
//!
//! Two descriptors go to the host, close-on-exec everywhere else:
//! - the job's listening socket, which the host hands down to the executor inside the
//!   sandbox (and to the next one's, when a sandbox is remade); once the host is gone,
//!   the agent's shell is refused, not left waiting;
//! - the read end of a lifeline pipe whose write end only the runner holds: the host stops
//!   the sandbox and cleans up when it closes, however the runner ended.
//!
//! The host says `ready` on stdout once the executor serves, or `failed <reason>`; both
//! can come while the model answers, which the sandbox's start (Node, srt's setup,
//! bubblewrap) overlaps. A command the agent sends before then waits in the socket's backlog.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::Serialize;
use tokio::io::AsyncBufReadExt;

use super::client;
use crate::process::HELPER_START_BOUND as START_TIMEOUT;
use crate::util::io::{IoContext, IoError};
use crate::util::on_demand::{self, OnDemand};

/// How long the host gets to stop the sandbox and clean up after its lifeline closes.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The host's start, as the agent adapter plans it: everything but the descriptors.
#[derive(Debug, Clone, Serialize)]
pub struct HostPlan {
    /// node
    pub program: PathBuf,
    /// The host script, srt's package, srt's settings, the executor's settings.
    pub args: Vec<String>,
    /// The complete environment: srt's, from which the sandbox's is made.
    pub env: BTreeMap<String, String>,
    /// The checkout: srt finds its mandatory denies from its working directory.
    pub cwd: PathBuf,
    /// Where the socket is bound ([`client::SOCKET`]), beside the agent's shell.
    pub socket_dir: PathBuf,
    /// The host's and the sandbox's stderr.
    pub log: PathBuf,
    /// What the host reads and writes besides the policy's trees, for the job's namespace:
    /// its script and settings, srt's sockets.
    pub own: crate::sandbox::boundary::OwnFiles,
    /// Who may connect to the job's socket besides the runner: the agent's identity, when a
    /// root runner hands the job to it.
    pub socket_owner: Option<u32>,
    /// How the host is started inside the job's namespace, when it is confined.
    pub confined: Option<crate::sandbox::boundary::Confined>,
    /// The commands run on gVisor: the disk limit is the host's soft limit only
    /// (`disk::limit_file_size_soft`).
    pub gvisor: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(transparent)]
    Io(#[from] IoError),
    #[error("starting {program}: {source}")]
    Spawn {
        program: PathBuf,
        source: std::io::Error,
    },
    #[error("the job's sandbox did not start within {}s{}", START_TIMEOUT.as_secs(), note(.0))]
    Timeout(String),
    #[error("the job's sandbox failed: {reason}{}", note(.log))]
    Failed { reason: String, log: String },
    #[error("the job's sandbox host exited{}", note(.0))]
    Exited(String),
}

fn note(tail: &str) -> String {
    if tail.is_empty() {
        String::new()
    } else {
        format!(" (log: {tail})")
    }
}

/// The host's command, made but not started: the caller adjusts it as it does the agent's
/// (the boundary suite's namespace, `serve`'s limits and cgroup), then [`Prepared::spawn`]s.
pub struct Prepared {
    cmd: std::process::Command,
    listener: UnixListener,
    lifeline_r: OwnedFd,
    lifeline_w: OwnedFd,
    socket: PathBuf,
    log: PathBuf,
}

/// A pipe, both ends close-on-exec: (read, write).
fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// Binds `name` in `dir` through `/proc/self/fd`, as [`client::connect_in`] connects to it.
fn bind_in(dir: &Path, name: &str) -> std::io::Result<UnixListener> {
    let dirfd = client::open_dir(dir)?;
    let path = format!("/proc/self/fd/{}/{name}", dirfd.as_raw_fd());
    match std::fs::remove_file(dir.join(name)) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    UnixListener::bind(path)
}

impl Prepared {
    pub fn new(plan: &HostPlan) -> Result<Prepared, SandboxError> {
        let listener =
            bind_in(&plan.socket_dir, client::SOCKET).context("binding the job's socket")?;
        if let Some(id) = plan.socket_owner {
            let socket = plan.socket_dir.join(client::SOCKET);
            let id = (
                Some(rustix::fs::Uid::from_raw(id)),
                Some(rustix::fs::Gid::from_raw(id)),
            );
            rustix::fs::chown(&socket, id.0, id.1)
                .map_err(std::io::Error::from)
                .at("handing the job's socket to the agent's identity", &socket)?;
        }
        let (lifeline_r, lifeline_w) = pipe().context("creating the sandbox's lifeline")?;
        let log = std::fs::File::create(&plan.log).context("creating the sandbox's log")?;
        let mut args = plan.args.clone();
        args.push(listener.as_raw_fd().to_string());
        args.push(lifeline_r.as_raw_fd().to_string());
        let (program, args) = match &plan.confined {
            Some(confined) => (
                confined.program.clone(),
                confined.args(&plan.program, &args),
            ),
            None => (plan.program.clone(), args),
        };
        let mut cmd = std::process::Command::new(&program);
        cmd.args(&args)
            .env_clear()
            .envs(&plan.env)
            .current_dir(&plan.cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log));
        crate::util::fd::inherit(&mut cmd, vec![listener.as_raw_fd(), lifeline_r.as_raw_fd()]);
        Ok(Prepared {
            cmd,
            listener,
            lifeline_r,
            lifeline_w,
            socket: plan.socket_dir.join(client::SOCKET),
            log: plan.log.clone(),
        })
    }

    pub fn command_mut(&mut self) -> &mut std::process::Command {
        &mut self.cmd
    }

    /// Starts the host now; the sandbox comes up while the caller goes on.
    pub fn spawn(self) -> JobSandbox {
        self.spawn_at(std::future::ready(()))
    }

    /// Starts the host when `need` resolves or a command connects to the job's socket,
    /// whichever comes first (`util::on_demand`): the agent's start does not share the CPU
    /// with the sandbox's, and a command sent before the host is up waits in the socket's
    /// backlog.
    pub fn spawn_when(
        self,
        need: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> JobSandbox {
        let connected = on_demand::first_connection(&self.listener);
        let need = async move {
            match connected {
                Ok(connected) => tokio::select! {
                    () = need => {}
                    () = connected => {}
                },
                Err(e) => {
                    tracing::warn!("watching the job's socket: {e}; starting its sandbox now")
                }
            }
        };
        self.spawn_at(need)
    }

    fn spawn_at(self, need: impl std::future::Future<Output = ()> + Send + 'static) -> JobSandbox {
        let (failed_tx, failed_rx) = tokio::sync::oneshot::channel();
        let socket = self.socket.clone();
        let life = OnDemand::new(need, move || self.launch(failed_tx), Running::stop);
        JobSandbox {
            life,
            failed: Some(failed_rx),
            socket,
        }
    }

    /// Starts the host and watches its reports; `None` when it could not start, which
    /// `failed` then says.
    fn launch(self, failed: tokio::sync::oneshot::Sender<SandboxError>) -> Option<Running> {
        let program = PathBuf::from(self.cmd.get_program());
        let mut cmd = tokio::process::Command::from(self.cmd);
        cmd.kill_on_drop(true);
        let mut child = match crate::process::spawn_with_runner(cmd) {
            Ok(child) => child,
            Err(source) => {
                let _ = failed.send(SandboxError::Spawn { program, source });
                return None;
            }
        };
        // The host holds these now; the runner keeps only the lifeline's write end.
        drop((self.listener, self.lifeline_r));
        let stdout = child.stdout.take();
        let log = self.log;
        tokio::spawn(tracing::Instrument::in_current_span(async move {
            let _ = failed.send(watch(stdout, &log).await);
        }));
        Some(Running {
            child,
            lifeline: Some(self.lifeline_w),
        })
    }
}

/// Reads the host's reports until it fails (or does not come up in time); the error is why.
async fn watch(stdout: Option<tokio::process::ChildStdout>, log: &Path) -> SandboxError {
    let Some(stdout) = stdout else {
        return SandboxError::Exited(tail(log));
    };
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let mut ready = false;
    let began = std::time::Instant::now();
    loop {
        let next = if ready {
            lines.next_line().await
        } else {
            match tokio::time::timeout(START_TIMEOUT, lines.next_line()).await {
                Ok(line) => line,
                Err(_) => return SandboxError::Timeout(tail(log)),
            }
        };
        match next {
            Ok(Some(line)) if line == "ready" => {
                tracing::info!(
                    ms = began.elapsed().as_millis(),
                    "the job's sandbox is ready"
                );
                ready = true;
            }
            Ok(Some(line)) => {
                if let Some(reason) = line.strip_prefix("failed ") {
                    return SandboxError::Failed {
                        reason: reason.to_string(),
                        log: tail(log),
                    };
                }
            }
            Ok(None) | Err(_) => return SandboxError::Exited(tail(log)),
        }
    }
}

/// The last lines of the host's log, for an error message.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(3)..].join(" | ")
}

/// A job's sandbox host, started or waiting for its need; killed if dropped without
/// [`JobSandbox::stop`] (its sandbox dies with it: bubblewrap's `--die-with-parent`).
pub struct JobSandbox {
    life: OnDemand,
    failed: Option<tokio::sync::oneshot::Receiver<SandboxError>>,
    socket: PathBuf,
}

/// See [`JobSandbox::failure`].
pub struct Failure(Option<tokio::sync::oneshot::Receiver<SandboxError>>);

impl Failure {
    /// Resolves with the reason the sandbox failed (at its start or later); never while it
    /// serves, or when it never started.
    pub async fn failed(self) -> SandboxError {
        match self.0 {
            Some(rx) => match rx.await {
                Ok(e) => e,
                Err(_) => std::future::pending().await,
            },
            None => std::future::pending().await,
        }
    }
}

impl JobSandbox {
    /// Why the sandbox failed, once it does (taken once).
    pub fn failure(&mut self) -> Failure {
        Failure(self.failed.take())
    }

    /// Closes the lifeline and waits for the host to stop the sandbox and clean up (srt
    /// removes the mount points it left in the checkout), killing it after a grace period.
    /// A host nothing needed is not started now.
    pub async fn stop(mut self) {
        self.life.stop().await;
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// A started host.
struct Running {
    child: tokio::process::Child,
    lifeline: Option<OwnedFd>,
}

impl Running {
    async fn stop(mut self) {
        self.lifeline.take();
        if tokio::time::timeout(STOP_GRACE, self.child.wait())
            .await
            .is_err()
        {
            tracing::warn!("the job's sandbox host did not stop with its lifeline; killing it");
            let _ = self.child.kill().await;
        }
    }
}

impl Drop for JobSandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
    }
}
