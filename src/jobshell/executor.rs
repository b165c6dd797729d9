//! The executor: the program srt's wrap starts inside the job's sandbox, in the place of its
//! seccomp helper, and that starts that helper for every command.
//!
//! srt's wrap ends its in-sandbox script with `ARGV0=<argv0> <applyPath> <shell> -c <command>`
//! once its network relays listen: that is where the seccomp filter goes on. The host names
//! this binary as `applyPath` (srt's `seccomp.argv0` setting, meant for a multicall helper),
//! so it runs there, beside srt's relays — inside bubblewrap's namespaces, mounts and
//! network, not yet under the filter — and runs each command as srt would have run it:
//! `apply-seccomp <shell> -c <command>`, with srt's own helper. Every command so gets the
//! AF_UNIX filter and its own user, PID and mount namespaces from that helper (it sees no
//! process but its own, and whatever it leaves running dies with it), in the sandbox srt made.
//!
//! Its only input is the listening socket the host handed down (descriptor 3), on which
//! The agent's shell connects from the host ([`super::wire`]); commands inherit none of it.
//!
//! Before each command it compares the sandbox's [`Fingerprint`] with the one it took when it
//! started. When they differ (a command made a nested repository, a denied file was renamed
//! over on the host), the sandbox is no longer what srt would make for that command: it
//! answers [`Reply::Retry`], tells the host `stale` on stdout, stops accepting and exits once
//! its running commands end. The host has srt make a new sandbox, whose executor takes the
//! next connection.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::fingerprint::Fingerprint;
use super::wire::{self, Control, Reply, Request};
use crate::sandbox::gvisor::{self, GvisorExec};
use crate::util::shell::quote_bytes;

/// The `ARGV0` srt sets for the helper it starts: this binary's executor mode.
pub const ARGV0: &str = "quest-runner-executor";

/// The descriptor the host hands the listening socket down on.
pub const LISTEN_FD: i32 = 3;

/// What the executor needs to know: the text the host has srt wrap as the command, which
/// reaches [`main`] as its last argument (the host writes all but `apply_seccomp`, which the
/// sandbox host adds from srt's own lookup).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// srt's own seccomp helper, as its wrap would have used it.
    pub apply_seccomp: PathBuf,
    pub checkout: PathBuf,
    /// A working directory that stands for the checkout: opencode's own (empty, private) one;
    /// the checkout itself for Claude Code.
    pub cwd_alias: PathBuf,
    /// Shell lines each command runs first, before the devShell: the policy's prelude
    /// (package managers' proxy settings), literal.
    #[serde(default)]
    pub prelude: String,
    /// The devShell script each command sources first.
    pub devshell: Option<PathBuf>,
    /// The paths denied to commands, watched for a file put in place of one
    /// ([`Fingerprint`]).
    #[serde(default)]
    pub watch: Vec<PathBuf>,
    /// Set in `gvisor` isolation: each command runs as a container of runsc instead of under
    /// srt's seccomp helper ([`crate::sandbox::gvisor`]).
    #[serde(default)]
    pub gvisor: Option<GvisorExec>,
}

/// Exit status when the executor cannot start: the host reports the sandbox as failed.
const FAILED: u8 = 70;

pub fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quest-runner executor: {e}");
            ExitCode::from(FAILED)
        }
    }
}

fn run() -> Result<(), String> {
    // srt runs `<this> <shell> -c <command>`.
    let args: Vec<OsString> = std::env::args_os().collect();
    let [_, shell, dash_c, text] = args.as_slice() else {
        return Err(format!("expected `<shell> -c <config>`, got {args:?}"));
    };
    if dash_c != "-c" {
        return Err(format!("expected `<shell> -c <config>`, got {args:?}"));
    }
    let config: Config = serde_json::from_slice(text.as_bytes())
        .map_err(|e| format!("reading the configuration: {e}"))?;
    // SAFETY: descriptor 3 is ours alone from here on; it is checked before use.
    let listener = unsafe { OwnedFd::from_raw_fd(LISTEN_FD) };
    if !wire::is_listening_socket(&listener) {
        return Err(format!(
            "descriptor {LISTEN_FD} is not a listening socket: started by something other than the job's sandbox host"
        ));
    }
    close_on_exec_above_stdio();
    // The environment srt's wrap made (its proxy variables among them), as the commands
    // would have had it, but for the name that picked this mode.
    let env: Vec<(OsString, OsString)> =
        std::env::vars_os().filter(|(k, _)| k != "ARGV0").collect();
    let (wake_r, wake_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| format!("creating a pipe: {e}"))?;
    let shared = Arc::new(Shared {
        baseline: Fingerprint::take(&config.checkout, &config.watch),
        config,
        shell: PathBuf::from(shell),
        env,
        stale: AtomicBool::new(false),
        wake: wake_w,
        serving: AtomicUsize::new(0),
    });
    let listener = UnixListener::from(listener);
    // Shared with the executor that replaces this one: whichever is woken may find the
    // connection taken.
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("setting up the socket: {e}"))?;
    // The host waits for this line: the sandbox is up and commands are served.
    say("ready");
    while let Some(conn) = accept(&listener, &wake_r)? {
        let _ = conn.set_nonblocking(false);
        let shared = shared.clone();
        shared.serving.fetch_add(1, Ordering::SeqCst);
        std::thread::spawn(move || {
            serve(conn, &shared);
            shared.serving.fetch_sub(1, Ordering::SeqCst);
        });
    }
    // Out of date: the commands still running here end here, the next ones in the new one.
    drop(listener);
    while shared.serving.load(Ordering::SeqCst) > 0 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(())
}

struct Shared {
    config: Config,
    shell: PathBuf,
    env: Vec<(OsString, OsString)>,
    /// The sandbox as it was made.
    baseline: Fingerprint,
    /// Set once the sandbox is out of date.
    stale: AtomicBool,
    /// Written to when it becomes so, which ends the accept loop.
    wake: OwnedFd,
    /// Connections being served.
    serving: AtomicUsize,
}

/// One line to the host.
fn say(line: &str) {
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The next connection, or `None` once the sandbox is out of date.
fn accept(listener: &UnixListener, wake: &OwnedFd) -> Result<Option<UnixStream>, String> {
    use rustix::event::{PollFd, PollFlags};
    loop {
        let mut fds = [
            PollFd::new(listener, PollFlags::IN),
            PollFd::new(wake, PollFlags::IN),
        ];
        if let Err(e) = rustix::event::poll(&mut fds, None) {
            if e == rustix::io::Errno::INTR {
                continue;
            }
            return Err(format!(
                "waiting for a command: {}",
                std::io::Error::from(e)
            ));
        }
        if !fds[1].revents().is_empty() {
            return Ok(None);
        }
        if !fds[0].revents().is_empty() {
            match listener.accept() {
                Ok((conn, _)) => return Ok(Some(conn)),
                // Interrupted, or another executor (the one replacing this) took it.
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock
                    ) =>
                {
                    continue
                }
                Err(e) => return Err(format!("accepting a command: {e}")),
            }
        }
    }
}

/// Whether the sandbox is still what srt made for the state it is in; if not, says so (once)
/// and stops the accept loop.
fn still_current(shared: &Shared) -> bool {
    if !shared.stale.load(Ordering::SeqCst)
        && Fingerprint::take(&shared.config.checkout, &shared.config.watch) == shared.baseline
    {
        return true;
    }
    if !shared.stale.swap(true, Ordering::SeqCst) {
        say("stale");
        let _ = rustix::io::write(&shared.wake, b"x");
    }
    false
}

/// Marks every descriptor above 2 close-on-exec: what srt's script and bubblewrap left open
/// must not reach a command.
fn close_on_exec_above_stdio() {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<i32> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd > 2)
        .collect();
    for fd in fds {
        // SAFETY: only the flag of a descriptor number is changed, and the borrow ends with
        // the call; a number read_dir's own (closed by now) fails harmlessly with EBADF.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        let _ = rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC);
    }
}

/// One command: run it, pass on the client's signals, kill it if the client goes, reply.
fn serve(conn: UnixStream, shared: &Shared) {
    let (request, [stdin, stdout, stderr]) = match wire::recv_request(&conn) {
        Ok(got) => got,
        Err(e) => {
            let _ = wire::send_reply(&conn, &Reply::Error(format!("bad request: {e}")));
            return;
        }
    };
    if !still_current(shared) {
        let _ = wire::send_reply(&conn, &Reply::Retry);
        return;
    }
    let (mut cmd, container) = match command(shared, &request) {
        Ok(planned) => planned,
        Err(message) => {
            let _ = wire::send_reply(&conn, &Reply::Error(message));
            return;
        }
    };
    cmd.stdin(Stdio::from(stdin))
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::from(stderr));
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            let message = format!("starting {}: {e}", cmd.get_program().to_string_lossy());
            let _ = wire::send_reply(&conn, &Reply::Error(message));
            return;
        }
    };
    drop(cmd);
    let pid = child.id() as i32;
    // Some while the child is unreaped: its pid is ours to signal only until then.
    let running = Arc::new(Mutex::new(Some(pid)));
    if let Ok(reader) = conn.try_clone() {
        let running = running.clone();
        std::thread::spawn(move || watch_client(&reader, &running));
    }
    wait_unreaped(pid);
    *running.lock().unwrap_or_else(|e| e.into_inner()) = None;
    let reply = match child.wait() {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => Reply::Exited(code),
            (None, Some(sig)) => Reply::Killed(sig as u8),
            (None, None) => Reply::Error(format!("the command ended with {status}")),
        },
        Err(e) => Reply::Error(format!("waiting for the command: {e}")),
    };
    // A container's state and bundle: its processes are gone with runsc's.
    if let Some(dir) = container {
        let _ = std::fs::remove_dir_all(dir);
    }
    let _ = wire::send_reply(&conn, &reply);
    // The watcher reads end-of-file and finds nothing to kill.
    let _ = conn.shutdown(std::net::Shutdown::Both);
}

/// The command as the sandbox runs it: under srt's seccomp helper, or as a container of
/// runsc (with the directory of its bundle and state, removed when it ends).
fn command(shared: &Shared, request: &Request) -> Result<(Command, Option<PathBuf>), String> {
    let script = OsString::from_vec(script(&shared.config, request));
    let Some(exec) = &shared.config.gvisor else {
        let mut cmd = Command::new(&shared.config.apply_seccomp);
        cmd.arg(&shared.shell)
            .arg("-c")
            .arg(script)
            .env_clear()
            .envs(shared.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&shared.config.checkout);
        return Ok((cmd, None));
    };
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let id = format!(
        "c{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    );
    let dir = exec.state.join(&id);
    let bundle = dir.join("bundle");
    let root = dir.join("root");
    let made = std::fs::create_dir_all(&bundle).and_then(|()| std::fs::create_dir_all(&root));
    let args = [shared.shell.clone().into_os_string(), "-c".into(), script];
    let spec = gvisor::spec(&gvisor::CommandSpec {
        args: &args,
        env: &shared.env,
        cwd: &shared.config.checkout,
        exec,
        rlimits: &passed_rlimits(),
    });
    let written = made.and_then(|()| std::fs::write(bundle.join("config.json"), spec.to_string()));
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(format!(
            "writing the command's container in {}: {e}",
            dir.display()
        ));
    }
    let mut cmd = Command::new(&exec.runsc);
    raise_file_size_to_hard(&mut cmd);
    cmd.args(exec.run_args(&root, &bundle, &id))
        .env_clear()
        .envs(shared.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&shared.config.checkout);
    Ok((cmd, Some(dir)))
}

/// The executor's own limits a command keeps inside gVisor: the file size (the job's disk
/// limit, the host's soft limit, as soft and hard there: gVisor's kernel enforces it) and the
/// open files.
fn passed_rlimits() -> Vec<(&'static str, u64, u64)> {
    use rustix::process::{getrlimit, Resource};
    let value = |v: Option<u64>| v.unwrap_or(u64::MAX);
    let fsize = value(getrlimit(Resource::Fsize).current);
    let nofile = getrlimit(Resource::Nofile);
    vec![
        ("RLIMIT_FSIZE", fsize, fsize),
        (
            "RLIMIT_NOFILE",
            value(nofile.current),
            value(nofile.maximum),
        ),
    ]
}

/// runsc itself at the file-size hard limit: its Sentry's memory file grows past a small
/// disk limit (`disk::limit_file_size_soft`); the commands keep the limit inside.
fn raise_file_size_to_hard(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: only getrlimit and setrlimit between fork and exec (async-signal-safe).
    unsafe {
        cmd.pre_exec(|| {
            use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
            let hard = getrlimit(Resource::Fsize).maximum;
            setrlimit(
                Resource::Fsize,
                Rlimit {
                    current: hard,
                    maximum: hard,
                },
            )?;
            Ok(())
        });
    }
}

/// The command: into its working directory (opencode's own private one means the checkout),
/// the policy's prelude, the devShell sourced, then the command itself, as the shell's script.
fn script(config: &Config, request: &Request) -> Vec<u8> {
    let workdir = OsStr::from_bytes(&request.workdir);
    let workdir = if std::path::Path::new(workdir) == config.cwd_alias {
        config.checkout.as_os_str()
    } else {
        workdir
    };
    let mut out = b"cd -- ".to_vec();
    out.extend_from_slice(&quote_bytes(workdir.as_bytes()));
    out.extend_from_slice(b" || exit 1\n");
    out.extend_from_slice(config.prelude.as_bytes());
    if !config.prelude.is_empty() && !config.prelude.ends_with('\n') {
        out.push(b'\n');
    }
    if let Some(devshell) = &config.devshell {
        out.extend_from_slice(b". ");
        out.extend_from_slice(&quote_bytes(devshell.as_os_str().as_bytes()));
        out.push(b'\n');
    }
    out.extend_from_slice(&request.command);
    out
}

/// Waits until `pid` has exited, without reaping it.
fn wait_unreaped(pid: i32) {
    use rustix::process::{WaitId, WaitIdOptions};
    let Some(pid) = rustix::process::Pid::from_raw(pid) else {
        return;
    };
    // WNOWAIT leaves the child to be reaped.
    while let Err(rustix::io::Errno::INTR) = rustix::process::waitid(
        WaitId::Pid(pid),
        WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
    ) {}
}

/// Passes the client's signals on; kills the command when the client is gone.
fn watch_client(conn: &UnixStream, running: &Mutex<Option<i32>>) {
    loop {
        let message = wire::recv_control(conn);
        let guard = running.lock().unwrap_or_else(|e| e.into_inner());
        let Some(pid) = *guard else { return };
        match message {
            // srt's helper passes a signal on to the command it runs.
            Ok(Some(Control::Signal(sig))) => {
                // libc's kill, not rustix's: the number is the client's, any byte, and
                // rustix's `Signal` cannot carry 0 or the real-time signals safely.
                // SAFETY: `pid` is our unreaped child (the lock is held).
                unsafe {
                    libc::kill(pid, sig as i32);
                }
            }
            Ok(None) | Err(_) => {
                kill_command(pid);
                return;
            }
        }
    }
}

/// Kills the command's helper and everything in the namespace it made: the helper is that
/// namespace's parent, not its init, so killing it alone would leave the command running.
/// Stopped first, so it cannot start anything between the listing and the kill.
fn kill_command(helper: i32) {
    use rustix::process::{kill_process, Pid, Signal};
    // `helper` is our unreaped child; the others are its children, listed while it is stopped
    // (a child of a stopped process stays its child until killed).
    let Some(pid) = Pid::from_raw(helper) else {
        return;
    };
    let _ = kill_process(pid, Signal::STOP);
    for child in children(helper as u32) {
        if let Some(child) = Pid::from_raw(child as i32) {
            let _ = kill_process(child, Signal::KILL);
        }
    }
    let _ = kill_process(pid, Signal::KILL);
}

fn children(pid: u32) -> Vec<u32> {
    crate::procfs::pids()
        .into_iter()
        .filter(|p| crate::procfs::parent(*p) == Some(pid))
        .collect()
}

#[cfg(test)]
#[path = "executor_tests.rs"]
mod tests;
