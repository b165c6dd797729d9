//! The job's namespace carried out for the agent and its sandbox host: the launch plan
//! rewritten to start each inside the policy's boundary ([`crate::sandbox::boundary`]), and,
//! when the runner is root, the job's trees handed to the agent's unprivileged identity
//! first.

use std::path::{Path, PathBuf};

use crate::agent::Launch;
pub use crate::agent_id::chown_tree;
use crate::binaries::{self, Tool};
use crate::sandbox::boundary::{self, Identity, NetBridge, Tools, AGENT_ID};
use crate::sandbox::SandboxPolicy;
use crate::util::io::{IoContext, IoError};
use crate::workspace::WorkspacePaths;

#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error("the job's namespace needs {0}")]
    Tool(#[from] binaries::BinaryError),
    #[error(transparent)]
    Unreachable(#[from] crate::agent_id::TraversalError),
    #[error(
        "the agent holds its account's login itself ({0}, e.g. opencode's OAuth entries), which a \
         runner that is root cannot hand to the agent's unprivileged identity (uid {AGENT_ID}): \
         run quest-runner as its service user (setup (b) of docs/nix.md), or give the account an \
         API key, which the runner's gateway holds for it"
    )]
    HeldLogin(PathBuf),
    #[error("the job's network bridges need the runner's binary: {0}")]
    Runner(String),
    #[error(transparent)]
    Io(#[from] IoError),
}

/// A link the agent follows to a file of the runner's that others may not read (the
/// account's login, which the agent refreshes itself) cannot be read by the agent's identity.
fn refuse_held_logins(launch: &Launch) -> Result<(), ConfineError> {
    use std::os::unix::fs::MetadataExt;
    for file in &launch.files {
        if let crate::agent::Contents::Symlink(target) = &file.contents {
            let private = std::fs::metadata(target).is_ok_and(|m| m.mode() & 0o004 == 0);
            if private {
                return Err(ConfineError::HeldLogin(target.clone()));
            }
        }
    }
    Ok(())
}

/// Rewrites `launch` (the agent, and its companion) to start inside the job's namespace.
/// Nothing to do when the policy does not confine the agent (macOS, or the suite's mutation).
/// Public for the benchmark, which starts an agent on its own in the same namespace.
///
/// `gateway_port`: where the agent reaches its model through the runner's gateway; then the
/// namespace has a network of its own, with the gateway and the job's proxy bridged in. `None`
/// (the agent holds its login and talks to its provider itself) keeps the host's network.
pub fn confine(
    launch: &mut Launch,
    policy: &SandboxPolicy,
    ws: &WorkspacePaths,
    (state_root, gateway_port): (&Path, Option<u16>),
) -> Result<(), ConfineError> {
    if !policy.confine_agent {
        return Ok(());
    }
    let identity = Identity::current();
    let tools = Tools {
        bwrap: binaries::find(Tool::Bwrap)?,
        setpriv: match identity {
            Identity::Agent => binaries::find(Tool::Setpriv)?,
            Identity::Runner => PathBuf::new(),
        },
    };
    let bridges = match gateway_port {
        Some(port) => Some(bridges(ws, port, policy.proxy_port, identity)?),
        None => None,
    };
    let passwd = match identity {
        Identity::Agent => {
            refuse_held_logins(launch)?;
            let passwd = write_passwd(&ws.job_dir, &policy.home)?;
            hand_over(ws)?;
            Some(passwd)
        }
        Identity::Runner => None,
    };
    bind_programs(launch, policy, bridges.as_ref().map(|(agent, _)| agent));
    launch.confined = Some(boundary::plan(
        policy,
        &launch.own,
        identity,
        passwd.as_deref(),
        &tools,
        (&launch.cwd, bridges.as_ref().map(|(agent, _)| agent)),
    ));
    if let Some(host) = launch.companion.as_mut() {
        host.confined = Some(boundary::plan(
            policy,
            &host.own,
            identity,
            passwd.as_deref(),
            &tools,
            (&host.cwd, bridges.as_ref().map(|(_, host)| host)),
        ));
        if identity == Identity::Agent {
            host.socket_owner = Some(AGENT_ID);
        }
    }
    launch.net_bridge = bridges.map(|(agent, _)| agent);
    if identity == Identity::Agent {
        let plans = [launch.confined.as_ref()]
            .into_iter()
            .chain([launch.companion.as_ref().and_then(|h| h.confined.as_ref())]);
        for source in plans.flatten().flat_map(|plan| plan.sources()) {
            crate::agent_id::grant_traversal(&source, state_root)?;
        }
    }
    Ok(())
}

/// The programs themselves, wherever they are installed (an npm prefix under a hidden home, a
/// checkout of the runner in /tmp), read-only in both namespaces, like the rest of the system;
/// and the runner's binary, whose modes are the network's bridges.
fn bind_programs(launch: &mut Launch, policy: &SandboxPolicy, bridge: Option<&NetBridge>) {
    let programs = [
        Some(launch.program.clone()),
        launch.companion.as_ref().map(|h| h.program.clone()),
    ];
    let roots =
        crate::sandbox::programs::roots(programs.iter().flatten().map(|p| p.as_path()), policy);
    let binds: Vec<PathBuf> = roots
        .into_iter()
        .chain(bridge.map(|b| b.runner.clone()))
        .collect();
    launch.own.read.extend(binds.iter().cloned());
    if let Some(host) = launch.companion.as_mut() {
        host.own.read.extend(binds);
    }
}

/// The bridges into the namespace's network: the agent's (the gateway, and the proxy when
/// some host is reachable), and the sandbox host's (the proxy only: srt's bridges carry the
/// commands' traffic there). Their sockets go in `<job dir>/net`.
fn bridges(
    ws: &WorkspacePaths,
    gateway: u16,
    proxy: Option<u16>,
    identity: Identity,
) -> Result<(NetBridge, NetBridge), ConfineError> {
    let owner = (identity == Identity::Agent).then_some(AGENT_ID);
    let runner = crate::jobshell::runner_binary().map_err(ConfineError::Runner)?;
    let dir = ws.job_dir.join("net");
    std::fs::create_dir_all(&dir).at("creating", &dir)?;
    let agent = NetBridge {
        runner: runner.clone(),
        dir: dir.clone(),
        ports: std::iter::once(gateway).chain(proxy).collect(),
        owner,
    };
    let host = NetBridge {
        runner,
        dir,
        ports: proxy.into_iter().collect(),
        owner,
    };
    Ok((agent, host))
}

/// The trees the agent's identity writes or reads as their owner: the checkout and temp
/// dirs, the parts of the job's git store that `git commit` writes, and the runner's files
/// for the job (its settings stay read-only in the namespace: a read-only mount is read-only
/// to its owner too). The store's `config`, `HEAD` and the shared clone stay root's.
fn owned_trees(ws: &WorkspacePaths) -> Vec<PathBuf> {
    vec![
        ws.checkout.clone(),
        ws.temp_dir.clone(),
        ws.helper_tmp.clone(),
        ws.job_dir.clone(),
        ws.git_store.join("objects"),
        ws.git_store.join("refs"),
        ws.git_store.join("logs"),
        ws.git_store.join("worktrees"),
    ]
}

/// Hands [`owned_trees`] to the agent's identity (public for `benches/workspace.rs`, which
/// times it as a job pays it). Of a layered checkout, only the job's layer: chowning the
/// merged view would copy every shared file up into it.
pub fn hand_over(ws: &WorkspacePaths) -> Result<(), IoError> {
    let layer = crate::workspace::checkout_layer(&ws.checkout);
    for tree in owned_trees(ws) {
        let handed = match &layer {
            Some(layer) if tree == ws.checkout => crate::agent_id::chown_layer(&layer.upper, &tree),
            _ => chown_tree(&tree),
        };
        handed.at("handing to the agent's identity", &tree)?;
    }
    Ok(())
}

/// The namespace's `/etc/passwd`: the host's, with the agent's identity named (git, Node's
/// `os.userInfo()` and ssh look the running uid up and fail on an unknown one).
fn write_passwd(job_dir: &Path, home: &Path) -> Result<PathBuf, IoError> {
    let host = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let id = AGENT_ID.to_string();
    let mut text: String = host
        .lines()
        .filter(|l| l.split(':').nth(2) != Some(id.as_str()))
        .map(|l| format!("{l}\n"))
        .collect();
    text.push_str(&format!(
        "quest-agent:x:{id}:{id}:quest-runner agent:{}:/bin/sh\n",
        home.display()
    ));
    let path = job_dir.join("passwd");
    std::fs::write(&path, text).at("writing", &path)?;
    Ok(path)
}
