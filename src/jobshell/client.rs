//! The agents' shell: the runner's binary, run for every command of an agent's shell tool, as
//! `<job dir>/quest-shell -c <command>` by opencode (its `shell`) and as
//! `<job dir>/quest-command <command>` by Claude Code (its `CLAUDE_CODE_SHELL_PREFIX`, which
//! its own shell runs with the whole command line as one argument). It hands the command, its
//! working directory and its own stdin, stdout and stderr to the job's executor through the
//! job's socket, passes on the signals the agent sends it (a timeout's SIGTERM), and ends as
//! the command ended.
//!
//! It runs on the host, as the agent's child, and decides nothing: what the command may do is
//! the sandbox's, fixed when the job started.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::ExitCode;

use super::wire::{self, Control, Reply, Request};

/// The name of the link to the runner's binary that opencode runs as its shell.
pub const NAME: &str = "quest-shell";
/// The name of the link that Claude Code runs as its command prefix.
pub const PREFIX_NAME: &str = "quest-command";
/// The job's socket, beside the link.
pub const SOCKET: &str = "shell.sock";

/// How long a command waits for a sandbox being remade.
const RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(120);

/// The command could not be run (the sandbox is not there, the request failed): what a
/// shell answers for a command it cannot execute.
const CANNOT_RUN: u8 = 126;

/// Signals the agent (or a user) may send its shell, passed on to the command.
const FORWARDED: [i32; 6] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

pub fn main(link: &Path, args: Vec<OsString>) -> ExitCode {
    let command = match command_of(link, args) {
        Ok(command) => command,
        Err(usage) => {
            eprintln!("quest-runner: {usage}");
            return ExitCode::from(2);
        }
    };
    match run(link, command) {
        Ok(Reply::Exited(code)) => ExitCode::from(code as u8),
        Ok(Reply::Killed(sig)) => die_by(sig),
        Ok(Reply::Error(message)) => {
            eprintln!("quest-runner: {message}");
            ExitCode::from(CANNOT_RUN)
        }
        Ok(Reply::Retry) => {
            eprintln!(
                "quest-runner: the job's sandbox was being remade and did not come back in time"
            );
            ExitCode::from(CANNOT_RUN)
        }
        Err(e) => {
            eprintln!("quest-runner: {e}");
            ExitCode::from(CANNOT_RUN)
        }
    }
}

/// The command, as the link's name says it comes: `-c <command>` to the shell, the command
/// alone to the prefix.
fn command_of(link: &Path, args: Vec<OsString>) -> Result<OsString, &'static str> {
    let prefix = link.file_name() == Some(std::ffi::OsStr::new(PREFIX_NAME));
    let mut args = args.into_iter();
    match (prefix, args.next(), args.next(), args.next()) {
        (true, Some(command), None, None) => Ok(command),
        (false, Some(flag), Some(command), None) if flag == "-c" => Ok(command),
        (true, ..) => Err("this command prefix only runs '<command>', one argument"),
        (false, ..) => Err("this shell only runs '-c <command>'"),
    }
}

fn run(link: &Path, command: OsString) -> Result<Reply, String> {
    let dir = link
        .parent()
        .filter(|d| d.is_absolute())
        .ok_or_else(|| format!("{} must be run by its absolute path", link.display()))?;
    let workdir =
        std::env::current_dir().map_err(|e| format!("reading the working directory: {e}"))?;
    let signals = SignalPipe::install().map_err(|e| format!("setting up signals: {e}"))?;
    let request = Request {
        workdir: workdir.as_os_str().as_bytes().to_vec(),
        command: command.as_bytes().to_vec(),
    };
    let started = std::time::Instant::now();
    loop {
        let conn = connect_in(dir, SOCKET).map_err(|e| {
            format!(
                "this job's sandbox is not running ({}: {e})",
                dir.join(SOCKET).display()
            )
        })?;
        wire::send_request(&conn, &request, wire::standard_fds())
            .map_err(|e| format!("handing the command to the sandbox: {e}"))?;
        let mut signalled = None;
        let reply = loop {
            match signals.wait_with(&conn) {
                Ok(Some(sig)) => {
                    signalled = Some(sig);
                    // The command may have ended meanwhile: its reply is read next.
                    let _ = wire::send_control(&conn, Control::Signal(sig as u8));
                }
                Ok(None) => {
                    break wire::recv_reply(&conn).map_err(|e| {
                        format!("the sandbox ended the command without a status: {e}")
                    })?
                }
                Err(e) => return Err(format!("waiting for the command: {e}")),
            }
        };
        match (reply, signalled) {
            // The sandbox is being remade: the next connection waits for the new one. A
            // signal meanwhile was for a command that never started.
            (Reply::Retry, Some(sig)) => return Ok(Reply::Killed(sig as u8)),
            (Reply::Retry, None) if started.elapsed() < RETRY_FOR => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            (reply, _) => return Ok(reply),
        }
    }
}

/// Connects to `name` in `dir` through `/proc/self/fd`: a socket's path is limited to 107
/// bytes, and the job's directory under the state dir may be longer.
pub fn connect_in(dir: &Path, name: &str) -> io::Result<UnixStream> {
    let dirfd = open_dir(dir)?;
    UnixStream::connect(format!("/proc/self/fd/{}/{name}", dirfd.as_raw_fd()))
}

pub(crate) fn open_dir(dir: &Path) -> io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    Ok(rustix::fs::open(
        dir,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Ends this process the way the command ended: by the same signal, so the agent sees what a
/// shell's death by it looks like.
fn die_by(sig: u8) -> ExitCode {
    let sig = sig as i32;
    // SAFETY: resetting a disposition, unblocking and raising are plain syscalls here.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
    // A signal that does not end a process by default (or could not be raised).
    ExitCode::from(128u8.wrapping_add(sig as u8))
}

/// Signals turned into bytes on a pipe (the self-pipe trick), so the main loop can wait for a
/// signal and the executor's reply at once.
struct SignalPipe {
    read: OwnedFd,
}

/// The write end, for the handler; set once before any handler is installed.
static SIGNAL_WRITE_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

extern "C" fn on_signal(sig: libc::c_int) {
    let fd = SIGNAL_WRITE_FD.load(std::sync::atomic::Ordering::Relaxed);
    if fd < 0 {
        return;
    }
    // SAFETY: the write end is never closed (see above); write(2) is async-signal-safe; a
    // full pipe drops the byte (non-blocking).
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let _ = rustix::io::write(fd, &[sig as u8]);
}

impl SignalPipe {
    fn install() -> io::Result<SignalPipe> {
        use rustix::pipe::PipeFlags;
        let (read, write) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        // The write end lives as long as the process: the handler may run at any time.
        SIGNAL_WRITE_FD.store(
            std::os::fd::IntoRawFd::into_raw_fd(write),
            std::sync::atomic::Ordering::Relaxed,
        );
        for sig in FORWARDED {
            // SAFETY: the handler only writes a byte to a descriptor that stays open.
            let installed = unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_signal as *const () as usize;
                action.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut action.sa_mask);
                libc::sigaction(sig, &action, std::ptr::null_mut())
            };
            if installed != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(SignalPipe { read })
    }

    /// Waits until a signal arrives (`Some`) or `conn` has something to read (`None`).
    fn wait_with(&self, conn: &UnixStream) -> io::Result<Option<i32>> {
        use rustix::event::{PollFd, PollFlags};
        loop {
            let mut fds = [
                PollFd::new(conn, PollFlags::IN),
                PollFd::new(&self.read, PollFlags::IN),
            ];
            if let Err(e) = rustix::event::poll(&mut fds, None) {
                if e == rustix::io::Errno::INTR {
                    continue;
                }
                return Err(e.into());
            }
            if fds[1].revents().contains(PollFlags::IN) {
                let mut byte = [0u8; 1];
                if rustix::io::read(&self.read, &mut byte).is_ok_and(|n| n == 1) {
                    return Ok(Some(byte[0] as i32));
                }
            }
            if !fds[0].revents().is_empty() {
                return Ok(None);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shell_takes_dash_c_and_the_prefix_one_argument() {
        let shell = Path::new("/j/quest-shell");
        let prefix = Path::new("/j/quest-command");
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(command_of(shell, args(&["-c", "ls"])), Ok("ls".into()));
        assert!(command_of(shell, args(&["ls"])).is_err());
        assert!(command_of(shell, args(&["-l", "-c", "ls"])).is_err());
        assert_eq!(command_of(prefix, args(&["ls; pwd"])), Ok("ls; pwd".into()));
        assert!(command_of(prefix, args(&["-c", "ls"])).is_err());
        assert!(command_of(prefix, args(&[])).is_err());
    }
}
