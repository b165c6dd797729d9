//! Starting a job's proxy from its policy: the one step `run` takes.

use std::path::Path;
use std::time::Duration;

use super::ca::JobCa;
use super::proxy::{JobProxy, ProxyError, ProxySpec};
use crate::binaries::Tool;
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
}

/// Starts the job's proxy when its policy lets commands reach some host, writes the CA files
/// the policy names, and records the proxy's port in the policy for the agents' renderings.
/// The proxy starts when the job first connects to it ([`JobProxy::at_first_connection`]);
/// the caller watches [`JobProxy::startup_failure`] while the agent runs.
/// `None`: no host is reachable, and the sandbox's own proxy refuses everything.
pub async fn start(
    policy: &mut SandboxPolicy,
    net: JobNet<'_>,
) -> Result<Option<JobProxy>, ProxyError> {
    let Some(rules) = super::rules::plan(policy) else {
        return Ok(None);
    };
    let srt = crate::binaries::find(Tool::Srt).map_err(|_| ProxyError::NoSrt)?;
    let lifetime = net.timeout + Duration::from_secs(3600);
    // RSA key generation takes a CPU for up to a second or so: off the runtime's threads.
    let job_id = net.job_id.to_string();
    let ca = tokio::task::spawn_blocking(move || JobCa::generate(&job_id, lifetime))
        .await
        .map_err(std::io::Error::other)
        .context("generating the job's CA")??;
    if let Some(files) = &policy.ca {
        ca.write_trust_files(files)?;
    }
    let listener = match net.bind {
        Some(bind) => bind(),
        None => std::net::TcpListener::bind("127.0.0.1:0"),
    }
    .context("binding the proxy's port on loopback")?;
    let proxy = JobProxy::at_first_connection(ProxySpec {
        srt: &srt,
        rules,
        ca: &ca,
        log: net.result_dir.join("network.log"),
        stderr_log: net.job_dir.join("netproxy.log"),
        listener,
        adjust: net.adjust,
        env_source: net.env_source,
        temp_dir: net.temp_dir,
    })?;
    policy.proxy_port = Some(proxy.port);
    Ok(Some(proxy))
}
