//! The job's boundary as a kernel namespace: the same [`SandboxPolicy`] that the commands'
//! sandboxes render, rendered once more as a bubblewrap command line for everything that acts
//! for the job outside those sandboxes — the agent's own process (its file tools, its
//! subagents, its helpers) and the sandbox host that runs its commands.
//!
//! Rules written against an agent's path handling lose to its next release (issue 22: a
//! plugin that judged `link/..` as text, a kernel that followed the link). Inside this
//! namespace a file tool's bug reaches no more than a command could: the system read-only,
//! the policy's denied trees absent, the checkout and the job's temp dir writable, plus only
//! the agent's own private files. The commands' sandboxes still run inside it, nested, as a
//! second layer.
//!
//! Nesting decides who the agent is. bubblewrap covers `/proc/sys` and friends read-only when
//! the user setting up the namespace can write them, and a namespace whose only `/proc` is
//! covered can mount no other: as root every inner sandbox then fails ("Can't mount proc").
//! Root in a user namespace would also keep root's ownership of every root-owned file
//! (`/proc/sys/kernel/*` among them). So a runner that is root hands the job's trees to an
//! unprivileged identity, [`AGENT_ID`], and starts the namespace as it (`setpriv`); a runner
//! that is already unprivileged (the service user) runs it as itself.
//!
//! [`plan`] is pure: the program and the options; `run` carries out the hand-over.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::SandboxPolicy;

pub use crate::agent_id::AGENT_ID;

/// Who the namespace's processes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Identity {
    /// The runner's own (unprivileged) uid and gid.
    Runner,
    /// The runner is root: [`AGENT_ID`], switched to by `setpriv` before the namespace is made
    /// (after `serve`'s placement in the job's cgroup, which needs root).
    Agent,
}

impl Identity {
    pub fn current() -> Identity {
        if rustix::process::geteuid().is_root() {
            Identity::Agent
        } else {
            Identity::Runner
        }
    }
}

/// What a process acting for the job may use besides what the policy gives its commands: its
/// own private files, read-only or writable. Declared by the agent adapter.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct OwnFiles {
    pub read: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
    /// Inside `write`, still read-only: the settings that confine the agent itself.
    pub read_only: Vec<PathBuf>,
}

/// The programs the namespace is made with.
#[derive(Debug, Clone, Serialize)]
pub struct Tools {
    pub bwrap: PathBuf,
    pub setpriv: PathBuf,
}

/// The job's own network: the ports of the runner's services bridged into it
/// ([`crate::agentnet`]). No ports: a network with nothing in it but loopback.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NetBridge {
    /// The runner's binary, whose `inside` mode is the namespace's first program.
    pub runner: PathBuf,
    /// Where the bridge's sockets are (in the runner's files for the job, which the namespace
    /// shows read-only: a socket is connected to, never written).
    pub dir: PathBuf,
    pub ports: Vec<u16>,
    /// Who may connect to the sockets besides the runner: the agent's identity.
    pub owner: Option<u32>,
}

/// One process's confinement: the command that starts it inside the job's boundary, up to
/// and including the `--` after which the process's own program and arguments follow.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Confined {
    pub program: PathBuf,
    pub prefix: Vec<String>,
}

/// The namespace options whose source is a host path.
const BINDS: [&str; 4] = ["--bind", "--bind-try", "--ro-bind", "--ro-bind-try"];

impl Confined {
    /// The whole command line for `program args`.
    pub fn args(&self, program: &Path, args: &[String]) -> Vec<String> {
        let mut out = self.prefix.clone();
        out.push(program.to_string_lossy().into_owned());
        out.extend(args.iter().cloned());
        out
    }
}

impl Confined {
    /// The host paths the namespace binds from: bubblewrap, run as the agent's identity, must
    /// be able to reach each of them.
    pub fn sources(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut rest = self.prefix.iter();
        while let Some(arg) = rest.next() {
            if arg == "--chdir" {
                break;
            }
            if BINDS.contains(&arg.as_str()) {
                if let Some(src) = rest.next() {
                    out.push(PathBuf::from(src));
                }
                rest.next();
            }
        }
        out
    }
}

/// The command that starts a process in `cwd` inside the job's boundary.
/// `net`: the namespace's own network and what is bridged into it; `None`: the host's (the
/// agent reaches its model itself, without the gateway).
pub fn plan(
    policy: &SandboxPolicy,
    own: &OwnFiles,
    identity: Identity,
    passwd: Option<&Path>,
    tools: &Tools,
    (cwd, net): (&Path, Option<&NetBridge>),
) -> Confined {
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let (program, mut prefix) = as_identity(identity, tools);
    prefix.extend(namespace_args(policy, own, passwd));
    if net.is_some() {
        prefix.push("--unshare-net".to_string());
    }
    prefix.extend(["--chdir".to_string(), s(cwd), "--".to_string()]);
    if let Some(bridge) = net.filter(|b| !b.ports.is_empty()) {
        prefix.push(s(&bridge.runner));
        prefix.extend(crate::agentnet::inside_args(&bridge.dir, &bridge.ports));
    }
    Confined { program, prefix }
}

/// bubblewrap's options for the policy's file system, in the order they must apply: the
/// system read-only, the denied trees hidden, then (parents first within each step) what is
/// read back, what is written, and what stays read-only inside the writable trees.
pub fn namespace_args(
    policy: &SandboxPolicy,
    own: &OwnFiles,
    passwd: Option<&Path>,
) -> Vec<String> {
    let mut out: Vec<String> = [
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
    ]
    .map(String::from)
    .to_vec();
    if let Some(view) = &policy.store_view {
        out.extend(super::store::view_args(
            &crate::store_path::store_dir(),
            view,
        ));
    }
    let hidden: Vec<PathBuf> = sorted(&policy.deny_read);
    for path in &hidden {
        out.extend(hide(path));
    }
    let writes = outermost(sorted(policy.allow_write.iter().chain(&own.write)));
    let reads = outermost(sorted(policy.allow_read.iter().chain(&own.read)));
    // A read bound where a write is bound later would be covered by it.
    for path in reads
        .iter()
        .filter(|r| !writes.iter().any(|w| r.starts_with(w)))
    {
        out.extend(bind("--ro-bind-try", path));
    }
    for path in &writes {
        out.extend(bind("--bind-try", path));
    }
    // A denied write needs a read-only bind only inside a tree bound writable; anywhere else
    // it is read-only already (under `/`) or absent (under a hidden tree), and a bind there
    // would show the host's files again: `/tmp/claude`, srt's shared dir, once showed every
    // job what any process had left there, and, removed on the host while a job ran, broke
    // srt's own bind of it (bubblewrap cannot bind a deleted directory).
    let denied_writes = policy
        .deny_write
        .iter()
        .filter(|p| writes.iter().any(|w| p.starts_with(w)));
    for path in outermost(sorted(denied_writes.chain(&own.read_only))) {
        out.extend(bind("--ro-bind-try", &path));
    }
    if let Some(passwd) = passwd {
        out.extend([
            "--ro-bind".to_string(),
            passwd.to_string_lossy().into_owned(),
        ]);
        out.push("/etc/passwd".to_string());
    }
    // The empty directories over the hidden trees, read-only once what is bound back inside
    // them is in place (each bind is a mount of its own, untouched): a write there would land
    // in memory, not on the host, but it is refused as a command's would be.
    let bound_over = |p: &PathBuf| {
        let binds = policy.allow_read.iter().chain(&policy.allow_write);
        binds.chain(&own.read).chain(&own.write).any(|b| b == p)
    };
    for path in hidden.iter().filter(|p| p.is_dir() && !bound_over(p)) {
        out.extend([
            "--remount-ro".to_string(),
            path.to_string_lossy().into_owned(),
        ]);
    }
    out
}

/// Which store the host's Nix opens for the runner, by Nix's own rule (`store = auto`): what
/// `policy` and `doctor` describe, and what decides how a job's nix is served
/// (`devshell::confine`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum NixStore {
    /// Setup (a): the runner is root and the local store is its own. A job's nix is never
    /// root: the runner serves the store to it through a `nix-daemon` of its own, started for
    /// the one run in the job's network (`devshell::daemon`), and the client is
    /// [`ClientStore::Daemon`] as the agent's identity.
    LocalAsRoot {
        store: PathBuf,
        state: PathBuf,
        log: PathBuf,
    },
    /// Single-user Nix owned by the runner's unprivileged user: the store and Nix's state are
    /// the user's own, and writable to its client.
    LocalAsUser {
        store: PathBuf,
        state: PathBuf,
        log: PathBuf,
    },
    /// Setup (b): the runner's own unprivileged user, talking to the system daemon's socket.
    Daemon { socket: PathBuf },
}

/// The store a job's confined nix client opens: a daemon's socket, bound into the namespace,
/// and where the paths of the store it serves are on the host (a repository's store), mounted
/// read-only at the store's place: the client reads the paths it has the daemon add.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClientStore {
    pub socket: PathBuf,
    pub real_store_dir: PathBuf,
}

/// The command that starts the devShell's nix client inside the job's boundary: the policy's
/// denied trees absent ([`namespace_args`], the same rendering as the agent's, of the
/// policy's read rules only: Nix reads none of the job's workspace), `own` (the repository it
/// evaluates and its scratch dir) given back, no network namespace but its own (no host
/// loopback, no link-local address), and `identity` as the agent's namespace has it.
///
/// The client is never root: a root process reaches around every path rule (`/proc/1/root`
/// of a process still in the runner's mount namespace is the host's whole tree). It gets a
/// user namespace and a PID namespace with a `/proc` of its own, as the agent does.
pub fn nix_plan(
    policy: &SandboxPolicy,
    own: &OwnFiles,
    store: &ClientStore,
    identity: Identity,
    tools: &Tools,
    cwd: &Path,
) -> Confined {
    // Nix reads and writes the whole store: the job's view of it is for the job's processes.
    let view = SandboxPolicy {
        allow_read: Vec::new(),
        allow_write: Vec::new(),
        deny_write: Vec::new(),
        store_view: None,
        ..policy.clone()
    };
    let mut own = own.clone();
    own.read.push(store.socket.clone());
    let mut args = namespace_args(&view, &own, None);
    // The repository's store at the store's place, its paths only: the host's store and its
    // database are not in the namespace ([`crate::devshell::repo_store`]).
    let at = args
        .iter()
        .position(|a| a == "/proc")
        .map_or(args.len(), |i| i + 1);
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let store_dir = crate::store_path::store_dir();
    args.splice(
        at..at,
        [
            "--ro-bind".to_string(),
            s(&store.real_store_dir),
            s(&store_dir),
        ],
    );
    // The hidden trees stay writable (empty, in memory, gone with the build): nix writes its
    // caches under the HOME it is given, which the policy hides.
    while let Some(at) = args.iter().position(|a| a == "--remount-ro") {
        args.drain(at..at + 2);
    }
    args.insert(0, "--unshare-net".to_string());
    let (program, mut prefix) = as_identity(identity, tools);
    prefix.extend(args);
    prefix.extend([
        "--chdir".to_string(),
        cwd.to_string_lossy().into_owned(),
        "--".to_string(),
    ]);
    Confined { program, prefix }
}

/// The program that makes a namespace as `identity`, and the arguments before bubblewrap's
/// own: a root runner switches to [`AGENT_ID`] first (`setpriv`), with no supplementary
/// group of root's.
fn as_identity(identity: Identity, tools: &Tools) -> (PathBuf, Vec<String>) {
    match identity {
        Identity::Agent => {
            let id = AGENT_ID.to_string();
            // The kernel clears a parent-death signal when the credentials change, so the one
            // the runner set is set again as the agent's identity: a runner killed outright
            // takes the namespace along.
            let ids = ["--reuid", &id, "--regid", &id, "--clear-groups"];
            let mut prefix: Vec<String> = ids.map(String::from).to_vec();
            prefix.extend(["--pdeathsig", "KILL", "--"].map(String::from));
            prefix.push(tools.bwrap.to_string_lossy().into_owned());
            (tools.setpriv.clone(), prefix)
        }
        Identity::Runner => (tools.bwrap.clone(), Vec::new()),
    }
}

/// A denied path made absent: an empty directory over a directory, an empty file over a file.
/// A path that does not exist needs nothing (the system is read-only: it cannot appear).
fn hide(path: &Path) -> Vec<String> {
    let p = path.to_string_lossy().into_owned();
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => vec!["--tmpfs".into(), p],
        Ok(_) => vec!["--ro-bind".into(), "/dev/null".into(), p],
        Err(_) => Vec::new(),
    }
}

fn bind(option: &str, path: &Path) -> Vec<String> {
    let p = path.to_string_lossy().into_owned();
    vec![option.to_string(), p.clone(), p]
}

/// `paths` (parents first) without those inside another of them. Each step binds its paths
/// the same way, each recursively from the host's tree, so a path inside one bound before
/// shows the same files either way: its own bind would only add a mount, and every mount a
/// job's namespace holds is one more that each bubblewrap started inside it (Claude Code's,
/// for every command) copies and walks, once per mount it makes (issue 42).
fn outermost(paths: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::with_capacity(paths.len());
    for path in paths {
        if !out.iter().any(|kept| path.starts_with(kept)) {
            out.push(path);
        }
    }
    out
}

/// Parents before children (a later bind covers an earlier one below it), each path once.
fn sorted<'a>(paths: impl IntoIterator<Item = &'a PathBuf>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = paths.into_iter().cloned().collect();
    out.sort_by_key(|p| p.components().count());
    let mut seen = std::collections::BTreeSet::new();
    out.retain(|p| seen.insert(p.clone()));
    out
}

#[cfg(test)]
#[path = "boundary_tests.rs"]
mod tests;
