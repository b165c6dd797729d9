//! The repository's store served to a job's nix by a `nix-daemon` the runner starts for the
//! run, in both setups.
//!
//! A nix that writes a store itself must own it, and a root one reaches around every path
//! rule of a mount namespace (`/proc/1/root` of any process still in the runner's namespace
//! is the host's tree; every file is readable to it). So the client that evaluates the
//! revision is the job's identity, and the repository's store ([`super::repo_store`]) is
//! written by a daemon that reads nothing the job names: it takes what the client sends
//! (NARs, derivations) and builds in Nix's sandbox — as the build users when the runner is
//! root, in a user namespace as the runner's own user otherwise (Nix does that for a store it
//! owns).
//!
//! The daemon is the runner's, for this one run, so it can be held where a system daemon
//! cannot: it runs in a network namespace of its own with only the job's proxy bridged in
//! (its fixed-output builds share that network), in a PID namespace whose end ends every
//! builder, with an environment built from an allowlist (a fixed-output build reads the
//! daemon's environment through `impureEnvVars`), its build directories in a directory of
//! its own, and under the job's limits where the job has them.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use super::network::NixNet;
use super::repo_store::RepoStore;
use super::scratch::Scratch;
use super::{environment, DevShellError, DevShells, Prepared};
use crate::binaries::{self, Tool};

/// How long the daemon may take to make its socket.
const START: Duration = Duration::from_secs(10);

/// How long a stopped daemon's processes may take to exit before what they leave is cleared
/// anyway (a killed PID namespace ends in milliseconds).
const GONE: Duration = Duration::from_secs(5);

/// A running daemon: stopped, with everything it started, when dropped; [`RunnerDaemon::stop`]
/// also waits for that and clears what its unfinished builds left.
pub struct RunnerDaemon {
    socket: PathBuf,
    child: Child,
    store: RepoStore,
    /// Held shared while the daemon runs: another run's cleanup clears a sandbox's directory
    /// in the store only where no daemon of the store runs.
    serving: Option<std::fs::File>,
    /// Nix's TMPDIR, where its builds' directories are: on disk, counted by the job's disk
    /// watchdog, removed (still locked) after the daemon is gone, swept if the runner dies.
    build: Scratch,
    /// Its socket and log, removed after the daemon is gone (fields drop in order).
    _dir: tempfile::TempDir,
}

impl RunnerDaemon {
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Where its builds' directories are.
    pub fn build_dir(&self) -> &Path {
        self.build.path()
    }

    /// The repository store it serves.
    pub fn store(&self) -> &RepoStore {
        &self.store
    }

    /// Stops the daemon and every process it started, waits until they have exited (and so
    /// released their locks), then clears what a build it did not finish left in the store
    /// ([`RepoStore::clear_unfinished`]): Nix leaves it, and a failed or stopped build must
    /// leave nothing. `nix` tells a half-written path from a valid one.
    pub async fn stop(mut self, nix: &Path) {
        if let Some(pid) = self.child.id() {
            let tree = crate::procfs::descendants(pid);
            let _ = self.child.start_kill();
            let _ = self.child.wait().await;
            let deadline = Instant::now() + GONE;
            while tree.iter().any(|p| crate::procfs::alive(*p)) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        // Its shared hold goes first: alone, this run may clear the sandboxes' directories.
        self.serving = None;
        let store = self.store.clone();
        drop(self);
        store.clear_unfinished(nix).await;
    }
}

impl Drop for RunnerDaemon {
    /// A run dropped mid-build (its job's timeout, a cancel): the daemon's namespace is killed
    /// and, once its processes are gone (waited for here, briefly: they die with the
    /// namespace), its build directories and stale locks go. A half-written path whose
    /// validity needs nix to tell is left to the next build of it, which replaces it, or to
    /// `cache gc`.
    fn drop(&mut self) {
        let Some(pid) = self.child.id() else {
            return;
        };
        let tree = crate::procfs::descendants(pid);
        let _ = self.child.start_kill();
        let deadline = Instant::now() + GONE;
        while (crate::procfs::alive(pid) || tree.iter().any(|p| crate::procfs::alive(*p)))
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(2));
        }
        let _ = self.child.try_wait();
        self.serving = None;
        self.store.clear_unfinished_now();
    }
}

/// Starts the daemon of `store` for `p`'s run, on the job's network `net` (or none; the
/// host's for a trusted job whose config says `nix.network = "host"`), and waits for its
/// socket.
pub(super) async fn start(
    shells: &DevShells,
    p: &Prepared,
    store: &RepoStore,
    net: Option<&NixNet>,
    host_network: bool,
) -> Result<RunnerDaemon, DevShellError> {
    store.ensure()?;
    let serving = store.serving().await?;
    let dir = private_dir()?;
    let build = Scratch::create()
        .map_err(|e| DevShellError::io("creating a directory in", &std::env::temp_dir(), e))?;
    let socket = dir.path().join("socket");
    // What the daemon says before it serves: shown when it fails to start. Once it serves, a
    // client's errors go to the client.
    let log_path = dir.path().join("daemon.log");
    let log = std::fs::File::create(&log_path)
        .map_err(|e| DevShellError::io("creating", &log_path, e))?;
    let daemon = nix_daemon(&p.nix.path)?;
    let mut cmd = command(&daemon, net, host_network)?;
    cmd.args(environment::option_args(&shells.nix_options))
        .args(["--option", "store", &store.uri()])
        // Nix keeps a file of this size beside the database for its own emergencies; here it
        // would be larger than a small `limits.disk` lets any file be.
        .args(["--option", "gc-reserved-space", "0"])
        // A job's builds run in Nix's sandbox or not at all: where it cannot make one (a
        // container without user namespaces), Nix would otherwise build unsandboxed, as the
        // runner's user, seeing all the runner sees.
        .args(["--option", "sandbox", "true"])
        .args(["--option", "sandbox-fallback", "false"]);
    if !rustix::process::geteuid().is_root() {
        // No build users to switch to: Nix builds in a user namespace as this user.
        cmd.args(["--option", "build-users-group", ""]);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true);
    environment::clear(&mut cmd, &[&daemon, &p.nix.path]);
    // Never `auto`: with the socket's variable set, `auto` connects to its own socket.
    cmd.env("NIX_REMOTE", store.uri())
        .env("NIX_DAEMON_SOCKET_PATH", &socket)
        .env("TMPDIR", build.path());
    if let Some(net) = net {
        super::network::apply_env(&mut cmd, net);
    }
    limit(cmd.as_std_mut(), shells, p);
    // `unshare` or bubblewrap, whose end ends the rest: a runner killed outright leaves no
    // daemon.
    let mut child = crate::process::spawn_with_runner(cmd)
        .map_err(|e| DevShellError::io("starting", &daemon, e))?;
    wait_for_socket(&mut child, &socket, &log_path).await?;
    Ok(RunnerDaemon {
        socket,
        child,
        store: store.clone(),
        serving: Some(serving),
        build,
        _dir: dir,
    })
}

/// The daemon's directory: its socket (reached by the client, the agent's identity by its
/// group where the runner is root, and no other local user: the daemon serves the runner's
/// store, in the job's network) and its log.
fn private_dir() -> Result<tempfile::TempDir, DevShellError> {
    let dir = tempfile::Builder::new()
        .prefix("quest-nixd-")
        .tempdir()
        .map_err(|e| DevShellError::io("creating a directory in", &std::env::temp_dir(), e))?;
    let root = rustix::process::geteuid().is_root();
    if root {
        let group = Some(rustix::fs::Gid::from_raw(crate::agent_id::AGENT_ID));
        rustix::fs::chown(dir.path(), None, group)
            .map_err(|e| DevShellError::io("handing to the agent's group", dir.path(), e.into()))?;
    }
    set_mode(dir.path(), if root { 0o710 } else { 0o700 })?;
    Ok(dir)
}

/// The command that starts `daemon` in its namespaces: [`plan`]'s as root,
/// [`plan_unprivileged`]'s otherwise.
fn command(
    daemon: &Path,
    net: Option<&NixNet>,
    host_network: bool,
) -> Result<Command, DevShellError> {
    let bwrap = binaries::find(Tool::Bwrap)?;
    let host_store = host_store();
    let host_store = host_store.as_deref();
    Ok(match rustix::process::geteuid().is_root() {
        true => {
            let mut cmd = Command::new(binaries::find(Tool::Unshare)?);
            cmd.args(plan(&bwrap, daemon, net, host_network, host_store));
            cmd
        }
        false => {
            let mut cmd = Command::new(&bwrap);
            cmd.args(plan_unprivileged(daemon, net, host_network, host_store));
            cmd
        }
    })
}

/// The host's store directory, to be read-only in the daemon's namespace, when there is one.
///
/// The daemon's store is the repository's, a chroot store whose paths are named
/// `/nix/store/...` but kept under the state directory; nothing it does should touch the
/// host's `/nix/store`. Nix 2.8 does: a build that fails (or is stopped by RLIMIT_FSIZE at
/// `limits.disk`) has its outputs moved out of the build's sandbox "for easier debugging" by
/// a `rename` to the output's *logical* path, the host's `/nix/store/<hash>-<name>`, where the
/// bytes stay unregistered, unrooted and uncounted (issue 55; Nix 2.13 and later rename to the
/// store's real path). Read-only there, that `rename` fails, which Nix ignores, and the output
/// goes with the sandbox's directory in the repository's store, which Nix or
/// [`RepoStore::clear_unfinished`] removes.
fn host_store() -> Option<PathBuf> {
    let store = crate::store_path::store_dir();
    store.is_dir().then_some(store)
}

/// bubblewrap's arguments that keep `host_store` read-only in the daemon's namespace.
fn read_only(host_store: Option<&Path>) -> Vec<String> {
    host_store
        .map(|dir| {
            let dir = dir.to_string_lossy().into_owned();
            vec!["--ro-bind".to_string(), dir.clone(), dir]
        })
        .unwrap_or_default()
}

/// The job's limits on the daemon and so on its builders: the job's rlimit hook, and
/// `limits.disk` as the largest file any of them may write (SIGXFSZ, which the error names).
fn limit(cmd: &mut std::process::Command, shells: &DevShells, p: &Prepared) {
    if let Some(adjust) = p.job_hook() {
        adjust(cmd);
    }
    if let Some(bytes) = shells.disk.limit {
        use std::os::unix::process::CommandExt;
        // SAFETY: only setrlimit (async-signal-safe) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                crate::util::rlimit::set_capped(rustix::process::Resource::Fsize, bytes, bytes)
            });
        }
    }
}

/// Waits until the daemon has made its socket; its log's end when it exits first.
async fn wait_for_socket(
    child: &mut Child,
    socket: &Path,
    log_path: &Path,
) -> Result<(), DevShellError> {
    let deadline = Instant::now() + START;
    while !socket.exists() {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(DevShellError::Nix {
                what: "the job's nix-daemon".to_string(),
                message: format!(
                    "exited before it made its socket ({status}): {}",
                    last_lines(log_path)
                ),
            });
        }
        if Instant::now() > deadline {
            return Err(DevShellError::Nix {
                what: "the job's nix-daemon".to_string(),
                message: format!("made no socket within {}s", START.as_secs()),
            });
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// The `nix-daemon` of the `nix` the runner uses (the one beside it), unless the operator
/// names one.
pub fn nix_daemon(nix: &Path) -> Result<PathBuf, crate::binaries::BinaryError> {
    if std::env::var_os(Tool::NixDaemon.env_var()).is_none() {
        let beside = nix.with_file_name("nix-daemon");
        if beside.is_file() {
            return Ok(beside);
        }
    }
    binaries::find(Tool::NixDaemon)
}

/// `unshare`'s arguments: a PID namespace whose `/proc` is its own and uncovered (Nix's build
/// sandbox mounts another inside it; bubblewrap run by root would cover it), whose first
/// process's end kills every builder; then bubblewrap for the network namespace (its
/// loopback up), keeping root's capabilities over the host's tree (the daemon writes the
/// store and switches to the build users), the host's store read-only ([`host_store`]); then
/// the bridge's inside when the job has a proxy.
pub fn plan(
    bwrap: &Path,
    daemon: &Path,
    net: Option<&NixNet>,
    host_network: bool,
    host_store: Option<&Path>,
) -> Vec<String> {
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let mut args: Vec<String> = ["--pid", "--fork", "--kill-child", "--mount-proc", "--"]
        .map(String::from)
        .to_vec();
    args.push(s(bwrap));
    args.extend(["--dev-bind", "/", "/"].map(String::from));
    args.extend(read_only(host_store));
    if !host_network {
        args.push("--unshare-net".to_string());
    }
    args.extend(["--cap-add", "ALL", "--die-with-parent", "--"].map(String::from));
    if let Some(net) = net {
        args.extend(super::network::inside(net));
    }
    args.push(s(daemon));
    args
}

/// bubblewrap's arguments for a runner that is not root: a user namespace in which it keeps
/// its own uid (Nix makes its build sandbox inside it), a PID namespace with its own `/proc`
/// whose end ends every builder, the host's store read-only and the network namespace as
/// [`plan`]'s.
pub fn plan_unprivileged(
    daemon: &Path,
    net: Option<&NixNet>,
    host_network: bool,
    host_store: Option<&Path>,
) -> Vec<String> {
    let mut args: Vec<String> = ["--dev-bind", "/", "/", "--unshare-pid", "--proc", "/proc"]
        .map(String::from)
        .to_vec();
    args.extend(read_only(host_store));
    if !host_network {
        args.push("--unshare-net".to_string());
    }
    args.extend(["--die-with-parent", "--"].map(String::from));
    if let Some(net) = net {
        args.extend(super::network::inside(net));
    }
    args.push(daemon.to_string_lossy().into_owned());
    args
}

/// The end of the daemon's log, for its failure to start.
fn last_lines(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(5)..].join("; ")
}

fn set_mode(path: &Path, mode: u32) -> Result<(), DevShellError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| DevShellError::io("setting the mode of", path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemon_has_its_own_pid_and_network_namespaces() {
        let args = plan(
            Path::new("/bin/bwrap"),
            Path::new("/bin/nix-daemon"),
            None,
            false,
            Some(Path::new("/nix/store")),
        );
        assert_eq!(
            &args[..4],
            ["--pid", "--fork", "--kill-child", "--mount-proc"]
        );
        assert!(args.windows(2).any(|w| w == ["--unshare-net", "--cap-add"]));
        // The host's store read-only (issue 55): Nix 2.8 moves a failed build's outputs there.
        assert!(args
            .windows(3)
            .any(|w| w == ["--ro-bind", "/nix/store", "/nix/store"]));
        assert_eq!(args.last().map(String::as_str), Some("/bin/nix-daemon"));
    }
}
