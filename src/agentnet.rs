//! The network of the job's namespace: nothing but its own loopback, with the runner's model
//! gateway and the job's network proxy bridged in on the same ports, so what the agent's
//! process reaches is what the job's policy lets it (its model through the gateway, the hosts
//! the proxy decides) and nothing else of the host's network: no other loopback service, no
//! link-local metadata address, no host off the allowlist — whatever a tool of a later agent
//! release tries.
//!
//! Two small modes of the runner's binary, each a plain process with threads:
//! - `inside`, the first program of the namespace: binds `127.0.0.1:<port>` there for each
//!   port, starts the agent, and carries each connection to `<dir>/<port>.sock`; it exits
//!   with the agent's status.
//! - `outside`, beside the agent on the runner's side (where the runner's commands for the
//!   job run, e.g. the suite's network namespace): binds those sockets and carries each
//!   connection on to `127.0.0.1:<port>`, where the gateway and the proxy listen. It says
//!   `ready` once they are bound, and lives until the runner stops it.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The first argument that selects these modes.
pub const FLAG: &str = "--quest-agent-net";

/// The bridge's socket for `port` in `dir`.
pub fn socket(dir: &Path, port: u16) -> PathBuf {
    dir.join(format!("{port}.sock"))
}

/// The directory of the bridge's sockets, held open, so that a socket is bound and reached at
/// an address that does not grow with `dir`: the kernel takes at most 107 bytes of one, and
/// `dir` is under the state dir and the job's id, whose lengths are the operator's and the
/// job's (a 59-byte id under `/var/lib/quest-runner` was one too many). Both sides have a
/// /proc of their own (the namespace mounts it), through which the open directory is named.
struct SocketDir {
    dir: rustix::fd::OwnedFd,
}

impl SocketDir {
    fn open(dir: &Path) -> Result<SocketDir, String> {
        use rustix::fs::{Mode, OFlags};
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        rustix::fs::open(dir, flags, Mode::empty())
            .map(|dir| SocketDir { dir })
            .map_err(|e| format!("opening {}: {e}", dir.display()))
    }

    /// The address of the socket for `port`: at most 36 bytes, whatever the directory.
    fn address(&self, port: u16) -> PathBuf {
        use rustix::fd::AsRawFd;
        PathBuf::from(format!(
            "/proc/self/fd/{}/{port}.sock",
            self.dir.as_raw_fd()
        ))
    }
}

/// The sockets' directory of the bridge's runner side running as `pid`, if it is one: what a
/// later `serve` finds of a dead runner's bridges.
pub fn outside_dir(pid: u32) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    match args.as_slice() {
        [_, flag, mode, dir, ..] if *flag == FLAG.as_bytes() && *mode == b"outside" => {
            Some(PathBuf::from(std::ffi::OsStr::from_bytes(dir)))
        }
        _ => None,
    }
}

/// The arguments that start `program` inside the namespace through the bridge (after the
/// runner's binary).
pub fn inside_args(dir: &Path, ports: &[u16]) -> Vec<String> {
    vec![
        FLAG.to_string(),
        "inside".to_string(),
        dir.to_string_lossy().into_owned(),
        ports_arg(ports),
        "--".to_string(),
    ]
}

/// The arguments of the runner's side of the bridge; `owner`: the uid that may connect.
pub fn outside_args(dir: &Path, owner: Option<u32>, ports: &[u16]) -> Vec<String> {
    vec![
        FLAG.to_string(),
        "outside".to_string(),
        dir.to_string_lossy().into_owned(),
        owner.map_or("-".to_string(), |u| u.to_string()),
        ports_arg(ports),
    ]
}

/// How long the runner's side of the bridges may take to bind its sockets.
const OUTSIDE_START: std::time::Duration = std::time::Duration::from_secs(10);

/// Starts the runner's side of the bridges (`runner`'s `outside` mode), adjusted as the
/// caller's commands are (the suite's network namespace), and returns once its sockets are
/// bound. Stopped when the returned child is dropped.
pub async fn start_outside(
    runner: &Path,
    dir: &Path,
    owner: Option<u32>,
    ports: &[u16],
    adjust: Option<&(dyn Fn(&mut std::process::Command) + Send + Sync)>,
) -> Result<tokio::process::Child, String> {
    use tokio::io::AsyncBufReadExt;
    let mut cmd = std::process::Command::new(runner);
    cmd.args(outside_args(dir, owner, ports))
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit());
    if let Some(adjust) = adjust {
        adjust(&mut cmd);
    }
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    let mut child = crate::process::spawn_with_runner(cmd)
        .map_err(|e| format!("starting the job's network bridge: {e}"))?;
    let Some(stdout) = child.stdout.take() else {
        return Err("the job's network bridge has no stdout".into());
    };
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    match tokio::time::timeout(OUTSIDE_START, lines.next_line()).await {
        Ok(Ok(Some(line))) if line == "ready" => Ok(child),
        Ok(_) => Err("the job's network bridge exited before it was ready".into()),
        Err(_) => Err(format!(
            "the job's network bridge was not ready within {}s",
            OUTSIDE_START.as_secs()
        )),
    }
}

fn ports_arg(ports: &[u16]) -> String {
    ports
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Runs a mode when this process was started as one.
pub fn dispatch() -> Option<ExitCode> {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).map(|a| a.as_os_str()) != Some(FLAG.as_ref()) {
        return None;
    }
    let text: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let result = match text.get(2).map(String::as_str) {
        Some("inside") => inside(&text[3..]),
        Some("outside") => outside(&text[3..]),
        _ => Err("usage: --quest-agent-net inside|outside ...".to_string()),
    };
    Some(match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("quest-runner (the job's network): {e}");
            ExitCode::from(125)
        }
    })
}

fn parse_ports(s: &str) -> Result<Vec<u16>, String> {
    s.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| p.parse().map_err(|_| format!("bad port {p:?}")))
        .collect()
}

/// `<dir> <ports> -- <program> <args>...`
fn inside(args: &[String]) -> Result<ExitCode, String> {
    let [dir, ports, dashes, program, rest @ ..] = args else {
        return Err("inside: <dir> <ports> -- <program> [args]".into());
    };
    if dashes != "--" {
        return Err("inside: <dir> <ports> -- <program> [args]".into());
    }
    // Held open until the program ends: each connection is made through it.
    let dir = SocketDir::open(Path::new(dir))?;
    for port in parse_ports(ports)? {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .map_err(|e| format!("binding 127.0.0.1:{port} in the job's namespace: {e}"))?;
        let sock = dir.address(port);
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                no_delay(&conn);
                let sock = sock.clone();
                std::thread::spawn(move || {
                    if let Ok(out) = UnixStream::connect(&sock) {
                        join(conn, out);
                    }
                });
            }
        });
    }
    let status = std::process::Command::new(program)
        .args(rest)
        .status()
        .map_err(|e| format!("starting {program}: {e}"))?;
    use std::os::unix::process::ExitStatusExt;
    let code = match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
    };
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

/// `<dir> <owner uid | -> <ports>`
fn outside(args: &[String]) -> Result<ExitCode, String> {
    let [dir, owner, ports] = args else {
        return Err("outside: <dir> <owner|-> <ports>".into());
    };
    let shown = PathBuf::from(dir);
    let dir = SocketDir::open(&shown)?;
    let owner: Option<u32> = match owner.as_str() {
        "-" => None,
        uid => Some(uid.parse().map_err(|_| format!("bad uid {uid:?}"))?),
    };
    let mut listeners = Vec::new();
    for port in parse_ports(ports)? {
        let sock = dir.address(port);
        let _ = std::fs::remove_file(&sock);
        let listener = UnixListener::bind(&sock)
            .map_err(|e| format!("binding {}: {e}", socket(&shown, port).display()))?;
        if let Some(uid) = owner {
            let id = (
                Some(rustix::fs::Uid::from_raw(uid)),
                Some(rustix::fs::Gid::from_raw(uid)),
            );
            rustix::fs::chown(&sock, id.0, id.1).map_err(|e| {
                let shown = socket(&shown, port);
                format!("handing {} to uid {uid}: {e}", shown.display())
            })?;
        }
        listeners.push((listener, port));
    }
    println!("ready");
    let _ = std::io::stdout().flush();
    let mut threads = Vec::new();
    for (listener, port) in listeners {
        threads.push(std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    if let Ok(out) = TcpStream::connect(("127.0.0.1", port)) {
                        no_delay(&out);
                        join(conn, out);
                    }
                });
            }
        }));
    }
    for t in threads {
        let _ = t.join();
    }
    Ok(ExitCode::SUCCESS)
}

/// The bridge copies whatever arrives as soon as it arrives: with Nagle's algorithm on, the
/// tail of a request written in pieces waits for the peer's delayed ACK (40 ms on Linux, once
/// per model request: issue 42 measured it). Best effort: a socket that refuses it still
/// carries the bytes.
fn no_delay(stream: &TcpStream) {
    let _ = stream.set_nodelay(true);
}

/// A stream that can be read and written from two threads, and half-closed.
trait Duplex: Read + Write + Send + Sized + 'static {
    fn split(&self) -> std::io::Result<Self>;
    fn close_write(&self);
}

impl Duplex for TcpStream {
    fn split(&self) -> std::io::Result<Self> {
        self.try_clone()
    }
    fn close_write(&self) {
        let _ = self.shutdown(Shutdown::Write);
    }
}

impl Duplex for UnixStream {
    fn split(&self) -> std::io::Result<Self> {
        self.try_clone()
    }
    fn close_write(&self) {
        let _ = self.shutdown(Shutdown::Write);
    }
}

/// Carries bytes both ways until each side has closed, half-closing as each ends (a request
/// sent whole, then its answer).
fn join<A: Duplex, B: Duplex>(mut a: A, mut b: B) {
    let (Ok(mut a_out), Ok(mut b_out)) = (a.split(), b.split()) else {
        return;
    };
    let up = std::thread::spawn(move || {
        let _ = std::io::copy(&mut a, &mut b_out);
        b_out.close_write();
    });
    let _ = std::io::copy(&mut b, &mut a_out);
    a_out.close_write();
    let _ = up.join();
}
