//! Setup (a)'s store served to a job's nix by a `nix-daemon` the runner starts for the run.
//!
//! A root runner owns the local store, and a nix that writes it itself must be root: root
//! reaches around every path rule of a mount namespace (`/proc/1/root` of any process still in
//! the runner's namespace is the host's tree; every file is readable to it). So the client
//! that evaluates the revision is the job's identity, as in setup (b), and the store is
//! written by a daemon that reads nothing the job names: it takes what the client sends
//! (NARs, derivations) and builds in Nix's sandbox as the build users.
//!
//! The daemon is the runner's, for this one run, so it can be held where a system daemon
//! cannot: it runs in a network namespace of its own with only the job's proxy bridged in
//! (its fixed-output builds share that network, as the root client's did), in a PID namespace
//! whose end ends every builder, with an environment built from an allowlist (a fixed-output
//! build reads the daemon's environment through `impureEnvVars`), its build directories in a
//! directory of its own, and in the job's cgroup where the job has one.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use super::network::NixNet;
use super::{environment, DevShellError, DevShells, Prepared};
use crate::binaries::{self, Tool};

/// How long the daemon may take to make its socket.
const START: Duration = Duration::from_secs(10);

/// A running daemon: stopped, with everything it started, when dropped.
pub struct RunnerDaemon {
    socket: PathBuf,
    _child: Child,
    /// Its socket's and build directories' parent, removed after the daemon is gone (fields
    /// drop in order).
    _dir: tempfile::TempDir,
}

impl RunnerDaemon {
    pub fn socket(&self) -> &Path {
        &self.socket
    }
}

/// Starts the daemon for `p`'s run, on the job's network `net` (or none; the host's for a
/// trusted job whose config says `nix.network = "host"`), and waits for its socket.
pub(super) async fn start(
    shells: &DevShells,
    p: &Prepared,
    net: Option<&NixNet>,
    host_network: bool,
) -> Result<RunnerDaemon, DevShellError> {
    let dir = tempfile::Builder::new()
        .prefix("quest-nixd-")
        .tempdir()
        .map_err(|e| DevShellError::io("creating a directory in", &std::env::temp_dir(), e))?;
    // The client (the agent's identity, by its group) must reach the socket, and no other
    // local user: the daemon serves root's store, in the job's network.
    let group = Some(rustix::fs::Gid::from_raw(crate::agent_id::AGENT_ID));
    rustix::fs::chown(dir.path(), None, group)
        .map_err(|e| DevShellError::io("handing to the agent's group", dir.path(), e.into()))?;
    set_mode(dir.path(), 0o710)?;
    let build = dir.path().join("build");
    std::fs::create_dir(&build).map_err(|e| DevShellError::io("creating", &build, e))?;
    set_mode(&build, 0o700)?;
    let socket = dir.path().join("socket");
    let daemon = nix_daemon(&p.nix.path)?;
    let unshare = binaries::find(Tool::Unshare)?;
    let bwrap = binaries::find(Tool::Bwrap)?;

    // What the daemon says before it serves: shown when it fails to start. Once it serves, a
    // client's errors go to the client.
    let log_path = dir.path().join("daemon.log");
    let log = std::fs::File::create(&log_path)
        .map_err(|e| DevShellError::io("creating", &log_path, e))?;
    let mut cmd = Command::new(&unshare);
    cmd.args(plan(&bwrap, &daemon, net, host_network))
        .args(environment::option_args(&shells.nix_options))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true);
    environment::clear(&mut cmd, &[&daemon, &p.nix.path]);
    cmd.env("NIX_REMOTE", "local")
        .env("NIX_DAEMON_SOCKET_PATH", &socket)
        .env("TMPDIR", &build);
    if let Some(net) = net {
        super::network::apply_env(&mut cmd, net);
    }
    let adjust = net.and_then(|n| n.adjust.clone());
    let std_cmd = cmd.as_std_mut();
    if let Some(adjust) = adjust {
        adjust(std_cmd);
    }
    // `unshare`, whose end ends the rest: a runner killed outright leaves no root daemon.
    crate::process::die_with_runner(std_cmd);
    let mut child = cmd
        .spawn()
        .map_err(|e| DevShellError::io("starting", &daemon, e))?;
    let deadline = Instant::now() + START;
    while !socket.exists() {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(DevShellError::Nix {
                what: "the job's nix-daemon".to_string(),
                message: format!(
                    "exited before it made its socket ({status}): {}",
                    last_lines(&log_path)
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
    Ok(RunnerDaemon {
        socket,
        _child: child,
        _dir: dir,
    })
}

/// The `nix-daemon` of the `nix` the runner uses (the one beside it), unless the operator
/// names one.
fn nix_daemon(nix: &Path) -> Result<PathBuf, DevShellError> {
    if std::env::var_os(Tool::NixDaemon.env_var()).is_none() {
        let beside = nix.with_file_name("nix-daemon");
        if beside.is_file() {
            return Ok(beside);
        }
    }
    Ok(binaries::find(Tool::NixDaemon)?)
}

/// `unshare`'s arguments: a PID namespace whose `/proc` is its own and uncovered (Nix's build
/// sandbox mounts another inside it; bubblewrap run by root would cover it), whose first
/// process's end kills every builder; then bubblewrap for the network namespace (its
/// loopback up), keeping root's capabilities over the host's tree (the daemon writes the
/// store and switches to the build users); then the bridge's inside when the job has a proxy.
pub fn plan(bwrap: &Path, daemon: &Path, net: Option<&NixNet>, host_network: bool) -> Vec<String> {
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let mut args: Vec<String> = ["--pid", "--fork", "--kill-child", "--mount-proc", "--"]
        .map(String::from)
        .to_vec();
    args.push(s(bwrap));
    args.extend(["--dev-bind", "/", "/"].map(String::from));
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
        );
        assert_eq!(
            &args[..4],
            ["--pid", "--fork", "--kill-child", "--mount-proc"]
        );
        assert!(args.windows(2).any(|w| w == ["--unshare-net", "--cap-add"]));
        assert_eq!(args.last().map(String::as_str), Some("/bin/nix-daemon"));
    }
}
