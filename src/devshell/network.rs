//! The devShell's nix on the job's own network (`nix.network = "proxy"`, the default): the
//! job's proxy bridged into nix's empty network namespace on the same port, as it is into
//! the agent's ([`crate::agentnet`]), and nix's fetchers pointed at it.
//!
//! So nix reaches what the job's commands reach and nothing else, by construction: the one
//! address in its namespace is the proxy, whose decider applies the job's allowlist to every
//! request and writes it to the job's network log. A flake input aimed at a loopback service
//! or a metadata address finds nothing to connect to; one aimed at a host off the allowlist is
//! refused by the decider. In setup (a) nix's fixed-output builds share that namespace, so
//! they reach the same proxy and nothing more. What a `nix-daemon` does (its substitutes, its
//! builds) happens in the daemon's network, outside the boundary (see `confine::describe`).

use std::path::PathBuf;

use super::DevShellError;
use crate::process::CommandHook;

/// The job's proxy as the devShell's nix reaches it.
#[derive(Clone)]
pub struct NixNet {
    /// The job's proxy, on the runner's loopback; the same port inside nix's namespace.
    pub proxy_port: u16,
    /// The job's CA bundle (the system's roots and the job's CA): what nix, curl and git trust
    /// where the proxy terminates TLS. Shown to nix read-only.
    pub ca_bundle: Option<PathBuf>,
    /// A directory of the runner's for the job, where the bridge's socket is made.
    pub socket_dir: PathBuf,
    /// The runner's binary, whose modes are the bridge's two sides.
    pub runner: PathBuf,
    /// Adjusts the bridge's runner side as the job's other processes are.
    pub adjust: Option<CommandHook>,
}

impl std::fmt::Debug for NixNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NixNet")
            .field("proxy_port", &self.proxy_port)
            .field("ca_bundle", &self.ca_bundle)
            .field("socket_dir", &self.socket_dir)
            .finish_non_exhaustive()
    }
}

/// Proxy settings the runner's own environment may carry, which would send nix elsewhere or
/// around the proxy (a host in `no_proxy` would be tried directly, and find no network).
const CLEARED: [&str; 6] = [
    "no_proxy",
    "NO_PROXY",
    "all_proxy",
    "ALL_PROXY",
    "ftp_proxy",
    "FTP_PROXY",
];

/// The variables that send nix's fetchers (libcurl, and the git it runs) through the proxy and
/// make them trust the job's CA.
pub(super) fn env(net: &NixNet) -> Vec<(&'static str, String)> {
    let proxy = format!("http://127.0.0.1:{}", net.proxy_port);
    let mut out: Vec<(&'static str, String)> =
        ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"]
            .into_iter()
            .map(|name| (name, proxy.clone()))
            .collect();
    if let Some(bundle) = &net.ca_bundle {
        let bundle = bundle.to_string_lossy().into_owned();
        for name in [
            "NIX_SSL_CERT_FILE",
            "SSL_CERT_FILE",
            "CURL_CA_BUNDLE",
            "GIT_SSL_CAINFO",
        ] {
            out.push((name, bundle.clone()));
        }
    }
    out
}

/// Applies [`env`] to nix's command, and clears what would bypass it.
pub(super) fn apply_env(cmd: &mut tokio::process::Command, net: &NixNet) {
    for name in CLEARED {
        cmd.env_remove(name);
    }
    for (name, value) in env(net) {
        cmd.env(name, value);
    }
}

/// What nix's namespace must show besides its own files: the runner's binary (the bridge's
/// inside is nix's first program), the bridge's socket and the CA bundle.
pub(super) fn reads(net: &NixNet) -> Vec<PathBuf> {
    let mut out = vec![net.runner.clone(), net.socket_dir.clone()];
    out.extend(net.ca_bundle.clone());
    out
}

/// The arguments between the namespace's `--` and nix: the bridge's inside, which binds the
/// proxy's port on the namespace's loopback and starts nix.
pub(super) fn inside(net: &NixNet) -> Vec<String> {
    let mut out = vec![net.runner.to_string_lossy().into_owned()];
    out.extend(crate::agentnet::inside_args(
        &net.socket_dir,
        &[net.proxy_port],
    ));
    out
}

/// Starts the bridge's runner side, which carries each connection from the socket on to the
/// proxy; nix's fetches fail until it runs. `owner`: the uid nix runs as, when it is not the
/// runner's. Stopped when the returned child is dropped.
pub(super) async fn start(
    net: &NixNet,
    owner: Option<u32>,
) -> Result<tokio::process::Child, DevShellError> {
    std::fs::create_dir_all(&net.socket_dir)
        .map_err(|e| DevShellError::io("creating", &net.socket_dir, e))?;
    crate::agentnet::start_outside(
        &net.runner,
        &net.socket_dir,
        owner,
        &[net.proxy_port],
        net.adjust.as_deref(),
    )
    .await
    .map_err(|message| DevShellError::Nix {
        what: "the devShell's network".to_string(),
        message,
    })
}

/// Nix's error, with what to do when it failed for want of the network the job's boundary
/// gives it: the job's allowed hosts through its proxy, or none.
pub(super) fn without_network_hint(p: &super::Prepared, message: String) -> String {
    let fetch = [
        "unable to download",
        "resolve host",
        "Couldn't connect",
        "Could not resolve",
        "HTTP error 403",
    ];
    if p.confine.is_none() || p.host_network || !fetch.iter().any(|f| message.contains(f)) {
        return message;
    }
    match p.net {
        Some(_) => format!(
            "{message} (the devShell's nix fetches through the job's proxy, from the hosts the \
             job may reach: add a host its inputs or binary cache need to \"network\": \
             {{\"extra_hosts\": [...]}} in the config; the job's network.log names each refused \
             request; see docs/nix.md, \"Supported Nix setups\")"
        ),
        None => format!(
            "{message} (the devShell's nix has no network in the job's boundary: this job's \
             policy reaches no host (an untrusted revision's never does) or \"nix\": \
             {{\"network\": \"none\"}} is set; put the revision's inputs in the store first; \
             see docs/nix.md, \"Supported Nix setups\")"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nix_goes_through_the_proxy_and_trusts_the_job_ca() {
        let net = NixNet {
            proxy_port: 4000,
            ca_bundle: Some("/s/jobs/j/network-ca-bundle.pem".into()),
            socket_dir: "/s/jobs/j/nix-net".into(),
            runner: "/usr/bin/quest-runner".into(),
            adjust: None,
        };
        let env = env(&net);
        let get = |n: &str| env.iter().find(|(k, _)| *k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("https_proxy"), Some("http://127.0.0.1:4000"));
        assert_eq!(get("HTTP_PROXY"), Some("http://127.0.0.1:4000"));
        assert_eq!(
            get("NIX_SSL_CERT_FILE"),
            Some("/s/jobs/j/network-ca-bundle.pem")
        );
        assert_eq!(get("GIT_SSL_CAINFO"), get("NIX_SSL_CERT_FILE"));
        let inside = inside(&net);
        assert_eq!(inside[0], "/usr/bin/quest-runner");
        assert_eq!(inside.last().map(String::as_str), Some("--"));
        assert!(inside.iter().any(|a| a == "4000"));
        assert!(reads(&net).contains(&PathBuf::from("/s/jobs/j/nix-net")));
    }
}
