//! Starting a job's network from its policy: the one step `run` takes.
//!
//! The job's proxy port is always bound by the runner. Without locked dependencies, the job's
//! `srt proxy` takes it, as it always did. With them, the runner's [`front`] takes it and
//! answers the locked set's hosts itself; a trusted job's other connections go on to its
//! `srt proxy`, which then listens on a Unix socket in the proxy's private temp dir, and an
//! untrusted job has no `srt proxy` at all.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::ca::JobCa;
use super::front::{Front, FrontSpec, Onward};
use super::log::{Counts, NetLog};
use super::proxy::{JobProxy, Listener, NetworkSummary, ProxyError, ProxySpec, StartupFailure};
use crate::binaries::Tool;
use crate::deps::{DepCache, Fetcher, Served};
use crate::job::Trust;
use crate::sandbox::SandboxPolicy;
use crate::util::io::IoContext;

/// Binds the proxy's listening socket; the boundary suite binds it in its network namespace.
pub type BindListener = dyn Fn() -> std::io::Result<std::net::TcpListener> + Send + Sync;

/// What a job's proxy needs from the runner besides the policy.
pub struct JobNet<'a> {
    pub job_id: &'a str,
    /// The job's timeout: the CA is valid for it and an hour more.
    pub timeout: Duration,
    /// `<state>/jobs/<id>`: the network log goes beside `result.json`.
    pub result_dir: &'a Path,
    /// The runner's files for the job: the proxy's own stderr goes there.
    pub job_dir: &'a Path,
    /// A private directory removed with the job's workspace: the proxy's TMPDIR.
    pub temp_dir: &'a Path,
    pub bind: Option<&'a BindListener>,
    pub adjust: Option<&'a (dyn Fn(&mut std::process::Command) + Send + Sync)>,
    pub env_source: &'a [(String, String)],
    /// The job's locked dependencies, when its locks pin any.
    pub deps: Option<DepsNet>,
}

/// What the runner answers a job from itself.
pub struct DepsNet {
    /// The hosts of the job's locked set.
    pub hosts: BTreeSet<String>,
    /// The set, once fetched.
    pub served: watch::Receiver<Option<Arc<Served>>>,
    pub cache: DepCache,
    /// The runner's client to the registries, for a trusted job's other reads of them.
    pub fetcher: Fetcher,
}

/// A job's network: its `srt proxy`, the runner's front, or both.
pub struct JobNetwork {
    pub port: u16,
    srt: Option<JobProxy>,
    front: Option<Front>,
    counts: Arc<Counts>,
    log: PathBuf,
}

impl JobNetwork {
    /// Why the job's `srt proxy` never came to serve (never, when it has none).
    pub fn startup_failure(&mut self) -> StartupFailure {
        match &mut self.srt {
            Some(srt) => srt.startup_failure(),
            None => StartupFailure::never(),
        }
    }

    /// Stops the proxy and the front; the job's counts.
    pub async fn stop(mut self) -> NetworkSummary {
        drop(self.front.take());
        if let Some(srt) = self.srt.take() {
            srt.stop().await;
        }
        NetworkSummary::of(&self.counts, &self.log)
    }
}

/// Starts the job's network when its policy lets commands reach some host, writes the CA
/// files the policy names, and records the proxy's port in the policy for the agents'
/// renderings. The job's `srt proxy` starts when the job first connects to it
/// ([`JobProxy::at_first_connection`]); the caller watches
/// [`JobNetwork::startup_failure`] while the agent runs. `None`: no host is reachable, and
/// the sandbox's own proxy refuses everything.
pub async fn start(
    policy: &mut SandboxPolicy,
    net: JobNet<'_>,
) -> Result<Option<JobNetwork>, ProxyError> {
    let Some(rules) = super::rules::plan(policy) else {
        return Ok(None);
    };
    let trusted = policy.trust == Trust::Trusted;
    let deps = net.deps.filter(|d| !d.hosts.is_empty());
    // An untrusted job with locked dependencies reaches the runner's front alone.
    let srt = match (&deps, trusted) {
        (Some(_), false) => None,
        _ => Some(crate::binaries::find(Tool::Srt).map_err(|_| ProxyError::NoSrt)?),
    };
    let ca = job_ca(net.job_id, net.timeout, policy).await?;
    let listener = net
        .bind
        .map_or_else(|| std::net::TcpListener::bind("127.0.0.1:0"), |b| b());
    let listener = listener.context("binding the proxy's port on loopback")?;
    let port = listener
        .local_addr()
        .context("reading the proxy's port")?
        .port();
    let log_path = net.result_dir.join("network.log");
    let log = Arc::new(NetLog::create(&log_path).context("creating the network log")?);
    let counts = Arc::new(Counts::default());
    let srt_spec = |listener: Listener| ProxySpec {
        srt: srt.as_deref().unwrap_or(Path::new("srt")),
        rules: rules.clone(),
        ca: &ca,
        log: log.clone(),
        counts: counts.clone(),
        stderr_log: net.job_dir.join("netproxy.log"),
        listener,
        adjust: net.adjust,
        env_source: net.env_source,
        temp_dir: net.temp_dir,
    };
    let (srt, front) = match deps {
        None => {
            let srt = JobProxy::at_first_connection(srt_spec(Listener::Tcp(listener)))?;
            (Some(srt), None)
        }
        Some(deps) => {
            let (srt, onward) = match trusted {
                true => onward_to_srt(net.temp_dir, &deps, srt_spec)
                    .map(|(srt, onward)| (Some(srt), Some(onward)))?,
                false => (None, None),
            };
            // A host the operator opened to every method stays srt's: the front answers reads.
            let hosts = deps
                .hosts
                .into_iter()
                .filter(|h| !rules.full_access.contains(h))
                .collect();
            let spec = FrontSpec {
                hosts,
                served: deps.served,
                cache: deps.cache,
                rules: rules.clone(),
                ca: ca.clone(),
                log: log.clone(),
                counts: counts.clone(),
                onward,
            };
            let front = Front::start(listener, spec).context("serving the job's proxy port")?;
            (srt, Some(front))
        }
    };
    policy.proxy_port = Some(port);
    Ok(Some(JobNetwork {
        port,
        srt,
        front,
        counts,
        log: log_path,
    }))
}

/// The job's CA, valid for its timeout and an hour more, its trust files written where the
/// policy names them.
async fn job_ca(
    job_id: &str,
    timeout: Duration,
    policy: &SandboxPolicy,
) -> Result<Arc<JobCa>, ProxyError> {
    let lifetime = timeout + Duration::from_secs(3600);
    // RSA key generation takes a CPU for up to a second or so: off the runtime's threads.
    let job_id = job_id.to_string();
    let ca = tokio::task::spawn_blocking(move || JobCa::generate(&job_id, lifetime))
        .await
        .map_err(std::io::Error::other)
        .context("generating the job's CA")??;
    if let Some(files) = &policy.ca {
        ca.write_trust_files(files)?;
    }
    Ok(Arc::new(ca))
}

/// A trusted job's `srt proxy` behind the runner's front, listening on a Unix socket in the
/// proxy's private temp dir, and what the front passes on to it.
fn onward_to_srt<'a>(
    temp_dir: &Path,
    deps: &DepsNet,
    spec: impl FnOnce(Listener) -> ProxySpec<'a>,
) -> Result<(JobProxy, Onward), ProxyError> {
    let socket = temp_dir.join("srt.sock");
    let unix = std::os::unix::net::UnixListener::bind(&socket).at("binding", &socket)?;
    let srt = JobProxy::at_first_connection(spec(Listener::Unix(unix)))?;
    let onward = Onward {
        srt_socket: socket,
        fetcher: deps.fetcher.clone(),
    };
    Ok((srt, onward))
}
