//! A scripted model server, for driving the real agent CLIs (Claude Code, opencode) in tests.
//!
//! The server speaks just enough HTTP/1.1 (plain TCP, keep-alive, `Content-Length` or chunked
//! request bodies) to answer two dialects:
//!
//! - the Anthropic Messages API, for Claude Code: `POST …/v1/messages` (Claude Code adds
//!   `?beta=true`), streamed as server-sent events (`message_start`, `content_block_*` with
//!   `text_delta` / `input_json_delta`, `message_delta` with the stop reason, `message_stop`),
//!   plus `POST …/v1/messages/count_tokens`;
//! - OpenAI-compatible Chat Completions, for opencode's `@ai-sdk/openai-compatible` provider:
//!   `POST …/chat/completions` (the provider's `baseURL` + `/chat/completions`), streamed as
//!   `chat.completion.chunk` events with `tool_calls` deltas, a usage chunk and `data: [DONE]`.
//!
//! Both also get a plain JSON answer when a request does not ask for a stream. Anything else
//! (Claude Code's `HEAD /api/hello` probe, `GET …/models`, …) is answered `200 {}` or with a
//! one-model list, harmlessly.
//!
//! Every request for the main agent loop (one that offers the model `tools`) is answered with
//! the next [`Step`] of the script; once the script is exhausted, with the text `done` and
//! `end_turn` / `stop`. Side requests that offer no tools (opencode's title generation, Claude
//! Code's quota and title queries) are answered with plain text and consume no step.
//!
//! [`ModelServer::start_isolated`] binds the server inside a fresh network namespace that has
//! only a loopback interface, and [`ModelServer::confine`] puts an agent's process tree into
//! that namespace (`setns` between fork and exec): the agent reaches the server on
//! `127.0.0.1`, and nothing else, so its own vendor traffic fails at once instead of leaving
//! the machine. (Wrapping the agent in `unshare --net` alone cannot work: the fresh
//! namespace's loopback is not the one a server in the test's namespace listens on.) Creating
//! and entering network namespaces needs `CAP_SYS_ADMIN`: the tests run as root. Membership of
//! that namespace also tells the agent's processes apart, even those that left its process
//! group: [`ModelServer::kill_confined`] ends them all.
//!
//! [`ModelServer::start_isolated`] also listens on the caller's loopback
//! ([`ModelServer::upstream_url`]): the runner's model gateway, which runs there, forwards to
//! it. Each [`Exchange`] records the credential it carried and which listener it came in on,
//! so a test can tell that a request came through the gateway with the account's real key.
//!
//! The server stops when dropped: its accept loop and every connection task are aborted.

use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// The reply the server gives to each main-loop request, in order.
#[derive(Clone, Debug)]
pub enum Step {
    /// The agent's shell tool: Claude Code's `Bash`, opencode's `bash`, with input
    /// `{"command": command, "description": …}`.
    Bash { command: String },
    /// Any tool, by the name and input the agent knows it by (dialect-specific).
    Tool { name: String, input: Value },
    /// A final text answer: ends the agent's turn (`end_turn` / `stop`).
    Text(String),
}

impl Step {
    pub fn bash(command: impl Into<String>) -> Step {
        Step::Bash {
            command: command.into(),
        }
    }
}

/// What the server answered one request with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Served {
    /// Step `n` (0-based) of the script.
    Step(usize),
    /// The script was exhausted: the text `done`, ending the turn.
    Done,
    /// A side request (no tools offered): plain text, no step consumed.
    Side,
    /// Not a model request (probe, token count, model list, unknown path).
    Other,
}

/// One request received, in arrival order.
#[derive(Clone, Debug)]
pub struct Exchange {
    pub method: String,
    /// The request target as sent, query included.
    pub path: String,
    /// The body as JSON; `Null` when empty, a JSON string when not JSON.
    pub body: Value,
    pub served: Served,
    /// When the request's body had arrived.
    pub at: std::time::Instant,
    /// The credential it carried: `x-api-key`, or the token of `Authorization: Bearer`.
    pub key: Option<String>,
    /// It came in on the host-side listener ([`ModelServer::upstream_url`]), which only the
    /// runner's gateway reaches: confined agents and their commands live in the private
    /// namespace.
    pub via_host: bool,
}

/// A tool result an agent sent back to the model.
#[derive(Clone, Debug)]
pub struct ToolResult {
    /// Index (into [`ModelServer::exchanges`]) of the first request that carried it.
    pub request: usize,
    /// `tool_use_id` (Anthropic) or `tool_call_id` (OpenAI).
    pub id: String,
    pub text: String,
}

/// The text of side requests' answers.
pub const SIDE_TEXT: &str = "scripted";
/// The text of the answer once the script is exhausted.
pub const DONE_TEXT: &str = "done";

const MAX_HEAD: u64 = 64 * 1024;
const MAX_BODY: usize = 64 * 1024 * 1024;

/// Makes `cmd` enter the network namespace behind `fd` between fork and exec.
fn enter_netns_before_exec(cmd: &mut std::process::Command, fd: std::os::fd::RawFd) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setns is async-signal-safe; the closure touches nothing else.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setns(fd, libc::CLONE_NEWNET) == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        });
    }
}

/// The state survives a panicking connection task: its lock is recovered, not poisoned.
fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

struct State {
    script: Vec<Step>,
    next: usize,
    log: Vec<Exchange>,
}

pub struct ModelServer {
    pub addr: SocketAddr,
    /// A second listener in the caller's network namespace ([`Self::start_isolated`]): where
    /// the runner's model gateway, which runs there, sends the requests it forwards.
    pub host_addr: Option<SocketAddr>,
    state: Arc<Mutex<State>>,
    netns: Option<OwnedFd>,
    task: JoinHandle<()>,
    host_task: Option<JoinHandle<()>>,
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        // The accept task owns the connections' JoinSet: aborting it aborts them all.
        self.task.abort();
        if let Some(t) = &self.host_task {
            t.abort();
        }
    }
}

impl ModelServer {
    /// Binds `127.0.0.1:0` in the caller's network namespace. Must be called inside a tokio
    /// runtime.
    pub fn start(script: Vec<Step>) -> io::Result<ModelServer> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        Self::serve(script, listener, None)
    }

    /// Binds `127.0.0.1:0` inside a new network namespace with only `lo` (up); spawn the
    /// agent through [`ModelServer::confine`] so that it runs there too. Needs
    /// `CAP_SYS_ADMIN` (root).
    pub fn start_isolated(script: Vec<Step>) -> io::Result<ModelServer> {
        let (listener, netns) = std::thread::spawn(bind_in_new_netns)
            .join()
            .map_err(|_| io::Error::other("the network namespace thread panicked"))??;
        let host = std::net::TcpListener::bind("127.0.0.1:0")?;
        host.set_nonblocking(true)?;
        let mut server = Self::serve(script, listener, Some(netns))?;
        server.host_addr = Some(host.local_addr()?);
        let host = TcpListener::from_std(host)?;
        server.host_task = Some(tokio::spawn(accept_loop(host, server.state.clone(), true)));
        Ok(server)
    }

    /// Where a model gateway running in the caller's namespace reaches the server: the
    /// host-side listener of [`Self::start_isolated`], else [`Self::base_url`].
    pub fn upstream_url(&self) -> String {
        match self.host_addr {
            Some(addr) => format!("http://{addr}"),
            None => self.base_url(),
        }
    }

    /// [`Self::start_isolated`] when this process may make a network namespace (root), else
    /// [`Self::start`]: an unprivileged runner's selftest and tests (the README's setup with
    /// nix-daemon) get the caller's loopback, and [`Self::confined_processes`] sees nothing.
    pub fn start_isolated_if_root(script: Vec<Step>) -> io::Result<ModelServer> {
        if rustix::process::geteuid().is_root() {
            Self::start_isolated(script)
        } else {
            Self::start(script)
        }
    }

    fn serve(
        script: Vec<Step>,
        listener: std::net::TcpListener,
        netns: Option<OwnedFd>,
    ) -> io::Result<Self> {
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let listener = TcpListener::from_std(listener)?;
        let state = Arc::new(Mutex::new(State {
            script,
            next: 0,
            log: Vec::new(),
        }));
        let task = tokio::spawn(accept_loop(listener, state.clone(), false));
        Ok(ModelServer {
            addr,
            host_addr: None,
            state,
            netns,
            task,
            host_task: None,
        })
    }

    /// `http://127.0.0.1:PORT` (Claude Code's `ANTHROPIC_BASE_URL`; opencode's provider
    /// `baseURL` is this plus `/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// [`Self::confine`] as a closure that can be kept (the runner's agent hook). It holds the
    /// namespace's descriptor number: use it only while the server lives.
    pub fn confiner(&self) -> impl Fn(&mut std::process::Command) + Send + Sync + 'static {
        let fd = self.netns.as_ref().map(|ns| ns.as_raw_fd());
        move |cmd: &mut std::process::Command| {
            if let Some(fd) = fd {
                enter_netns_before_exec(cmd, fd);
            }
        }
    }

    /// [`Self::bind_loopback`] as a closure that can be kept (the runner's proxy hook). It
    /// holds the namespace's descriptor number: use it only while the server lives.
    pub fn binder(&self) -> impl Fn() -> io::Result<std::net::TcpListener> + Send + Sync + 'static {
        let fd = self.netns.as_ref().map(|ns| ns.as_raw_fd());
        move || bind_loopback_in(fd)
    }

    /// A listening socket on `127.0.0.1:0` where the confined agent can reach it: in the
    /// server's private network namespace (or the caller's, for [`Self::start`]). Servers the
    /// agent's commands talk to (the runner's proxy, a stand-in registry) bind here.
    pub fn bind_loopback(&self) -> io::Result<std::net::TcpListener> {
        bind_loopback_in(self.netns.as_ref().map(|ns| ns.as_raw_fd()))
    }

    /// A listening socket on `[::1]:port` beside [`Self::bind_loopback`]'s, for a server that
    /// `localhost` must reach whichever loopback address it resolves to. `None` without IPv6.
    pub fn bind_loopback_v6(&self, port: u16) -> Option<std::net::TcpListener> {
        let fd = self.netns.as_ref().map(|ns| ns.as_raw_fd());
        let bind = move || std::net::TcpListener::bind(("::1", port));
        match fd {
            None => bind().ok(),
            Some(fd) => std::thread::spawn(move || {
                // SAFETY: setns on this short-lived thread only; `fd` is the server's namespace.
                if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
                    return None;
                }
                bind().ok()
            })
            .join()
            .ok()
            .flatten(),
        }
    }

    /// A connection to `127.0.0.1:port` as the confined agent would make it: from inside the
    /// server's private network namespace (or the caller's, for [`Self::start`]).
    pub fn connect_loopback(&self, port: u16) -> io::Result<std::net::TcpStream> {
        let Some(fd) = self.netns.as_ref().map(|ns| ns.as_raw_fd()) else {
            return std::net::TcpStream::connect(("127.0.0.1", port));
        };
        std::thread::spawn(move || {
            // SAFETY: setns on this short-lived thread only; `fd` is the server's namespace
            // handle, alive while `self` is. The socket keeps the namespace it was made in.
            if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
            std::net::TcpStream::connect(("127.0.0.1", port))
        })
        .join()
        .map_err(|_| io::Error::other("the network namespace thread panicked"))?
    }

    /// Makes `cmd` run in the server's private network namespace (no-op for [`Self::start`]).
    /// The namespace handle is close-on-exec: the agent does not inherit it.
    pub fn confine(&self, cmd: &mut std::process::Command) {
        if let Some(ns) = &self.netns {
            enter_netns_before_exec(cmd, ns.as_raw_fd());
        }
    }

    /// Pids of every process in the server's private network namespace: the confined agent's
    /// whole tree, including the parts that left its process group or session (opencode runs
    /// its shell tool with `setsid`). Empty for [`Self::start`].
    pub fn confined_processes(&self) -> Vec<libc::pid_t> {
        let Some(ns) = &self.netns else {
            return Vec::new();
        };
        let Ok(id) = std::fs::read_link(format!("/proc/self/fd/{}", ns.as_raw_fd())) else {
            return Vec::new();
        };
        let me = std::process::id();
        crate::procfs::pids()
            .into_iter()
            .filter(|&pid| {
                pid != me
                    && std::fs::read_link(format!("/proc/{pid}/ns/net")).is_ok_and(|l| l == id)
            })
            .map(|pid| pid as libc::pid_t)
            .collect()
    }

    /// SIGKILLs every process in the server's private network namespace, again until none is
    /// left (at most for two seconds); returns how many were signalled.
    pub fn kill_confined(&self) -> usize {
        let mut killed = 0;
        for _ in 0..100 {
            let pids = self.confined_processes();
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                // SAFETY: a plain kill of a process inside our own private namespace.
                if unsafe { libc::kill(pid, libc::SIGKILL) } == 0 {
                    killed += 1;
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        killed
    }

    /// Every request body received, in order (side requests and probes included).
    pub fn requests(&self) -> Vec<Value> {
        self.exchanges().into_iter().map(|e| e.body).collect()
    }

    /// Every request received, in order, with what it was answered with.
    pub fn exchanges(&self) -> Vec<Exchange> {
        lock(&self.state).log.clone()
    }

    /// Replaces the script (before the agent starts): attempts that name the server's own
    /// port can only be written once it is bound.
    pub fn set_script(&self, script: Vec<Step>) {
        let mut st = lock(&self.state);
        st.script = script;
        st.next = 0;
    }

    /// How many script steps have been served.
    pub fn steps_served(&self) -> usize {
        lock(&self.state).next
    }

    /// The tool results the agent sent back, in both dialects, each once (by id), with the
    /// first request that carried it.
    pub fn tool_results(&self) -> Vec<ToolResult> {
        self.tool_results_since(0)
    }

    /// [`Self::tool_results`] of the requests from the `first`-th on: those of a script set
    /// after that (whose step ids start again at 0).
    pub fn tool_results_since(&self, first: usize) -> Vec<ToolResult> {
        let mut found: Vec<ToolResult> = Vec::new();
        for (i, e) in self.exchanges().iter().enumerate().skip(first) {
            let Some(messages) = e.body.get("messages").and_then(Value::as_array) else {
                continue;
            };
            for m in messages {
                // OpenAI: {"role": "tool", "tool_call_id": …, "content": …}
                if m.get("role").and_then(Value::as_str) == Some("tool") {
                    let id = str_field(m, "tool_call_id");
                    push_result(&mut found, i, id, content_text(m.get("content")));
                }
                // Anthropic: {"role": "user", "content": [{"type": "tool_result", …}]}
                if let Some(blocks) = m.get("content").and_then(Value::as_array) {
                    for b in blocks {
                        if b.get("type").and_then(Value::as_str) == Some("tool_result") {
                            let id = str_field(b, "tool_use_id");
                            push_result(&mut found, i, id, content_text(b.get("content")));
                        }
                    }
                }
            }
        }
        found
    }

    /// One line per request: method, path, what was served, model, tool and message counts,
    /// and the last message (shortened). For failure messages.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        for (i, e) in self.exchanges().iter().enumerate() {
            let b = &e.body;
            let tools = b.get("tools").and_then(Value::as_array).map_or(0, Vec::len);
            let messages = b.get("messages").and_then(Value::as_array);
            let last = messages
                .and_then(|m| m.last())
                .map(|m| shorten(&m.to_string(), 300))
                .unwrap_or_default();
            out.push_str(&format!(
                "#{i} {} {} -> {:?} model={} tools={tools} messages={} last={last}\n",
                e.method,
                e.path,
                e.served,
                b.get("model").unwrap_or(&Value::Null),
                messages.map_or(0, Vec::len),
            ));
        }
        out
    }
}

fn str_field(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn push_result(found: &mut Vec<ToolResult>, request: usize, id: String, text: String) {
    if !found.iter().any(|r| r.id == id) {
        found.push(ToolResult { request, id, text });
    }
}

/// A message content: a string, or an array of parts whose `text`s are joined.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

fn shorten(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Runs on a thread of its own: the namespace change stays with that thread, which ends;
/// the listener and the namespace handle keep the namespace alive.
fn bind_in_new_netns() -> io::Result<(std::net::TcpListener, OwnedFd)> {
    // SAFETY: plain syscalls on this thread only.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    loopback_up()?;
    let ns = OwnedFd::from(File::open("/proc/thread-self/ns/net")?);
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok((listener, ns))
}

/// Binds `127.0.0.1:0` in the namespace behind `netns` (on a thread of its own, which enters
/// it and ends), or in the caller's.
fn bind_loopback_in(netns: Option<std::os::fd::RawFd>) -> io::Result<std::net::TcpListener> {
    let Some(fd) = netns else {
        return std::net::TcpListener::bind("127.0.0.1:0");
    };
    std::thread::spawn(move || {
        // SAFETY: setns on this short-lived thread only; `fd` is the server's namespace handle.
        if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
            return Err(io::Error::last_os_error());
        }
        std::net::TcpListener::bind("127.0.0.1:0")
    })
    .join()
    .map_err(|_| io::Error::other("the namespace thread panicked"))?
}

/// `ip link set lo up`, by ioctl.
fn loopback_up() -> io::Result<()> {
    // SAFETY: a socket we own, and a zeroed `ifreq` naming `lo`.
    unsafe {
        let raw = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        let sock = OwnedFd::from_raw_fd(raw);
        let mut req: libc::ifreq = std::mem::zeroed();
        for (d, s) in req.ifr_name.iter_mut().zip(b"lo\0") {
            *d = *s as libc::c_char;
        }
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS as _, &mut req) < 0 {
            return Err(io::Error::last_os_error());
        }
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS as _, &req) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

async fn accept_loop(listener: TcpListener, state: Arc<Mutex<State>>, via_host: bool) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    conns.spawn(serve_connection(stream, state.clone(), via_host));
                }
                Err(e) => {
                    eprintln!("model server: accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

struct Request {
    method: String,
    path: String,
    close: bool,
    body: Vec<u8>,
    key: Option<String>,
    via_host: bool,
}

struct Response {
    status: &'static str,
    content_type: &'static str,
    body: Vec<u8>,
}

async fn serve_connection(stream: TcpStream, state: Arc<Mutex<State>>, via_host: bool) {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    loop {
        let request = match read_request(&mut read, &mut write).await {
            Ok(Some(mut r)) => {
                r.via_host = via_host;
                r
            }
            Ok(None) => return,
            Err(e) => {
                eprintln!("model server: bad request: {e}");
                let _ = write
                    .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
                return;
            }
        };
        let response = respond(&state, &request);
        let head = format!(
            "HTTP/1.1 {}\r\ncontent-type: {}\r\ncontent-length: {}\r\ncache-control: no-cache\r\nrequest-id: req_scripted\r\nconnection: {}\r\n\r\n",
            response.status,
            response.content_type,
            response.body.len(),
            if request.close { "close" } else { "keep-alive" },
        );
        let mut bytes = head.into_bytes();
        if request.method != "HEAD" {
            bytes.extend_from_slice(&response.body);
        }
        if write.write_all(&bytes).await.is_err() || write.flush().await.is_err() {
            return;
        }
        if request.close {
            return;
        }
    }
}

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Reads one line (CRLF or LF), bounded.
async fn read_line<R: AsyncRead + Unpin>(r: &mut BufReader<R>) -> io::Result<String> {
    let mut line = String::new();
    (&mut *r).take(MAX_HEAD).read_line(&mut line).await?;
    if !line.ends_with('\n') && !line.is_empty() {
        return Err(invalid("line too long or truncated"));
    }
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}

async fn read_request<R: AsyncRead + Unpin>(
    r: &mut BufReader<R>,
    w: &mut tokio::net::tcp::OwnedWriteHalf,
) -> io::Result<Option<Request>> {
    let mut request_line = read_line(r).await?;
    // Tolerate stray empty lines between requests; end quietly at EOF.
    let mut blank = 0;
    while request_line.is_empty() {
        if r.fill_buf().await?.is_empty() || blank > 4 {
            return Ok(None);
        }
        blank += 1;
        request_line = read_line(r).await?;
    }
    let mut parts = request_line.split_whitespace();
    let (Some(method), Some(path), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(invalid(format!("request line {request_line:?}")));
    };
    let mut close = version == "HTTP/1.0";
    let mut length: Option<usize> = None;
    let mut chunked = false;
    let mut expect_continue = false;
    let mut key = None;
    let mut head_size = request_line.len();
    loop {
        let line = read_line(r).await?;
        if line.is_empty() {
            break;
        }
        head_size += line.len();
        if head_size as u64 > MAX_HEAD {
            return Err(invalid("headers too large"));
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(invalid(format!("header {line:?}")));
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => {
                length = Some(value.parse().map_err(|_| invalid("content-length"))?);
            }
            "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
            "connection" => close = value.eq_ignore_ascii_case("close"),
            "expect" => expect_continue = value.eq_ignore_ascii_case("100-continue"),
            "x-api-key" => key = Some(value.to_string()),
            "authorization" => {
                if let Some(token) = value.strip_prefix("Bearer ") {
                    key = Some(token.trim().to_string());
                }
            }
            _ => {}
        }
    }
    if expect_continue {
        w.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
    }
    let body = if chunked {
        read_chunked(r).await?
    } else {
        let n = length.unwrap_or(0);
        if n > MAX_BODY {
            return Err(invalid("body too large"));
        }
        let mut body = vec![0; n];
        r.read_exact(&mut body).await?;
        body
    };
    Ok(Some(Request {
        method: method.to_string(),
        path: path.to_string(),
        close,
        body,
        key,
        via_host: false,
    }))
}

async fn read_chunked<R: AsyncRead + Unpin>(r: &mut BufReader<R>) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line = read_line(r).await?;
        let size = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size, 16).map_err(|_| invalid("chunk size"))?;
        if size == 0 {
            // Trailers, up to the empty line.
            while !read_line(r).await?.is_empty() {}
            return Ok(body);
        }
        if body.len() + size > MAX_BODY {
            return Err(invalid("body too large"));
        }
        let start = body.len();
        body.resize(start + size, 0);
        r.read_exact(&mut body[start..]).await?;
        read_line(r).await?;
    }
}

/// What one model request is answered with.
enum Turn {
    Tool {
        id: String,
        name: String,
        input: Value,
    },
    Text(String),
}

fn respond(state: &Mutex<State>, req: &Request) -> Response {
    let body: Value = if req.body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&req.body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&req.body).into_owned()))
    };
    let route = req
        .path
        .split('?')
        .next()
        .unwrap_or("")
        .trim_end_matches('/');
    let is_post = req.method == "POST";
    let anthropic = is_post && route.ends_with("/messages");
    let openai = is_post && route.ends_with("/chat/completions");

    let mut st = lock(state);
    let exchange = st.log.len();
    let (served, turn) = if anthropic || openai {
        let offers_tools = body
            .get("tools")
            .and_then(Value::as_array)
            .is_some_and(|t| !t.is_empty());
        if !offers_tools {
            (Served::Side, Turn::Text(SIDE_TEXT.to_string()))
        } else if st.next < st.script.len() {
            let n = st.next;
            st.next += 1;
            let id = if anthropic {
                format!("toolu_scripted_{n}")
            } else {
                format!("call_scripted_{n}")
            };
            let turn = match &st.script[n] {
                Step::Bash { command } => Turn::Tool {
                    id,
                    name: if anthropic { "Bash" } else { "bash" }.to_string(),
                    input: json!({"command": command, "description": format!("scripted step {n}")}),
                },
                Step::Tool { name, input } => Turn::Tool {
                    id,
                    name: name.clone(),
                    input: input.clone(),
                },
                Step::Text(text) => Turn::Text(text.clone()),
            };
            (Served::Step(n), turn)
        } else {
            (Served::Done, Turn::Text(DONE_TEXT.to_string()))
        }
    } else {
        (Served::Other, Turn::Text(String::new()))
    };
    st.log.push(Exchange {
        method: req.method.clone(),
        path: req.path.clone(),
        body: body.clone(),
        served: served.clone(),
        at: std::time::Instant::now(),
        key: req.key.clone(),
        via_host: req.via_host,
    });
    drop(st);

    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("scripted")
        .to_string();
    let stream = body.get("stream").and_then(Value::as_bool) == Some(true);
    if anthropic {
        let id = format!("msg_scripted_{exchange}");
        if stream {
            sse(anthropic_events(&id, &model, &turn))
        } else {
            json_response(anthropic_message(&id, &model, &turn))
        }
    } else if openai {
        let id = format!("chatcmpl-scripted-{exchange}");
        if stream {
            sse(openai_events(&id, &model, &turn))
        } else {
            json_response(openai_completion(&id, &model, &turn))
        }
    } else if is_post && route.ends_with("/count_tokens") {
        json_response(json!({"input_tokens": 1}))
    } else if req.method == "GET" && route.ends_with("/models") {
        json_response(json!({
            "object": "list",
            "data": [{"id": "scripted", "object": "model", "type": "model", "display_name": "Scripted", "created": 0, "created_at": "1970-01-01T00:00:00Z", "owned_by": "scripted"}],
            "has_more": false, "first_id": "scripted", "last_id": "scripted",
        }))
    } else {
        json_response(json!({}))
    }
}

fn json_response(v: Value) -> Response {
    Response {
        status: "200 OK",
        content_type: "application/json",
        body: v.to_string().into_bytes(),
    }
}

fn sse(events: String) -> Response {
    Response {
        status: "200 OK",
        content_type: "text/event-stream",
        body: events.into_bytes(),
    }
}

fn anthropic_usage() -> Value {
    json!({"input_tokens": 1, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0})
}

fn anthropic_stop(turn: &Turn) -> &'static str {
    match turn {
        Turn::Tool { .. } => "tool_use",
        Turn::Text(_) => "end_turn",
    }
}

fn anthropic_block(turn: &Turn) -> Value {
    match turn {
        Turn::Tool { id, name, input } => {
            json!({"type": "tool_use", "id": id, "name": name, "input": input})
        }
        Turn::Text(text) => json!({"type": "text", "text": text}),
    }
}

fn anthropic_message(id: &str, model: &str, turn: &Turn) -> Value {
    json!({
        "id": id, "type": "message", "role": "assistant", "model": model,
        "content": [anthropic_block(turn)],
        "stop_reason": anthropic_stop(turn), "stop_sequence": null,
        "usage": anthropic_usage(),
    })
}

fn anthropic_events(id: &str, model: &str, turn: &Turn) -> String {
    let mut out = String::new();
    let mut event = |v: Value| {
        let kind = v["type"].as_str().unwrap_or_default().to_string();
        out.push_str(&format!("event: {kind}\ndata: {v}\n\n"));
    };
    event(json!({"type": "message_start", "message": {
        "id": id, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": null, "stop_sequence": null, "usage": anthropic_usage(),
    }}));
    let (start, delta) = match turn {
        Turn::Tool { id, name, input } => (
            json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
            json!({"type": "input_json_delta", "partial_json": input.to_string()}),
        ),
        Turn::Text(text) => (
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": text}),
        ),
    };
    event(json!({"type": "content_block_start", "index": 0, "content_block": start}));
    event(json!({"type": "content_block_delta", "index": 0, "delta": delta}));
    event(json!({"type": "content_block_stop", "index": 0}));
    event(json!({"type": "message_delta",
        "delta": {"stop_reason": anthropic_stop(turn), "stop_sequence": null},
        "usage": {"output_tokens": 1}}));
    event(json!({"type": "message_stop"}));
    out
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn openai_usage() -> Value {
    json!({"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2})
}

fn openai_finish(turn: &Turn) -> &'static str {
    match turn {
        Turn::Tool { .. } => "tool_calls",
        Turn::Text(_) => "stop",
    }
}

fn openai_completion(id: &str, model: &str, turn: &Turn) -> Value {
    let message = match turn {
        Turn::Tool { id, name, input } => json!({"role": "assistant", "content": null,
            "tool_calls": [{"id": id, "type": "function",
                "function": {"name": name, "arguments": input.to_string()}}]}),
        Turn::Text(text) => json!({"role": "assistant", "content": text}),
    };
    json!({
        "id": id, "object": "chat.completion", "created": now(), "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": openai_finish(turn)}],
        "usage": openai_usage(),
    })
}

fn openai_events(id: &str, model: &str, turn: &Turn) -> String {
    let created = now();
    let mut out = String::new();
    let mut chunk = |choices: Value, usage: Option<Value>| {
        let mut v = json!({"id": id, "object": "chat.completion.chunk", "created": created,
            "model": model, "choices": choices});
        if let Some(u) = usage {
            v["usage"] = u;
        }
        out.push_str(&format!("data: {v}\n\n"));
    };
    match turn {
        Turn::Tool { id, name, input } => {
            chunk(
                json!([{"index": 0, "finish_reason": null, "delta": {"role": "assistant", "content": null,
                "tool_calls": [{"index": 0, "id": id, "type": "function",
                    "function": {"name": name, "arguments": ""}}]}}]),
                None,
            );
            chunk(
                json!([{"index": 0, "finish_reason": null, "delta": {
                "tool_calls": [{"index": 0, "function": {"arguments": input.to_string()}}]}}]),
                None,
            );
        }
        Turn::Text(text) => {
            chunk(
                json!([{"index": 0, "finish_reason": null,
                "delta": {"role": "assistant", "content": text}}]),
                None,
            );
        }
    }
    chunk(
        json!([{"index": 0, "delta": {}, "finish_reason": openai_finish(turn)}]),
        None,
    );
    chunk(json!([]), Some(openai_usage()));
    out.push_str("data: [DONE]\n\n");
    out
}
