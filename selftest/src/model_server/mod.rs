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

mod anthropic;
mod http;
mod log;
mod netns;
mod openai;
mod script;
mod sse;
mod wire;

use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use http::accept_loop;
use netns::bind_in_new_netns;

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
    /// [`Self::start`]: an unprivileged runner's selftest and tests (docs/nix.md's setup with
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
}
