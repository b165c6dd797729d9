//! The model gateway: a loopback HTTP server in the runner (one per `serve` or `run`) that
//! agents talk to instead of their provider, so they never hold the account's secret.
//!
//! Each job opens a [`JobGrant`]: a random token, which the agent sends as its API key, and
//! the base URL to send it to. The gateway checks the token, allows only the provider's model
//! endpoints, puts the account's real credential in the token's place, forwards the request
//! to the account's upstream (TLS with the system's roots) and streams the answer back as it
//! comes, frame by frame. On the way it reads the answer's token usage ([`meter`]), adds it to
//! the job's [`Usage`] and the account's daily [`budget`], and writes a line to the job's
//! `model.log` (never a body, never a header). A request past the job's `limits.tokens` or the
//! account's budget is refused with an error the agent shows, and the job is told to end.
//! Dropping the grant revokes the token.

pub mod account;
pub mod account_check;
pub mod budget;
pub mod credentials;
pub mod meter;
pub mod upstream;

mod error;
mod forward;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};

use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

pub use account::{Route, SecretSource};
pub use credentials::{ClaudeLogin, Credential};
pub use error::{
    AccountError, AccountFileError, ApplyError, CredentialError, FileProblem, GatewayError,
    RefreshProblem,
};
use upstream::{HttpClient, UpstreamUrl};

/// A job's model use, as its result shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Requests forwarded to the model (refused ones are in `refused`).
    pub requests: u64,
    pub refused: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    /// Time spent waiting on the model: each request from its forwarding to its answer's
    /// last byte, added up (requests that overlap count each).
    pub wait_ms: u64,
    /// The same by model (as the answers name it).
    pub models: BTreeMap<String, ModelUsage>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelUsage {
    pub requests: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
}

impl Usage {
    /// What caps count: every token, cached ones included.
    pub fn tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_write_tokens
    }

    fn record(&mut self, model: &str, t: &meter::Tokens, wait: std::time::Duration) {
        self.requests += 1;
        self.input_tokens += t.input;
        self.output_tokens += t.output;
        self.cache_read_tokens += t.cache_read;
        self.cache_write_tokens += t.cache_write;
        self.wait_ms += wait.as_millis() as u64;
        let m = self.models.entry(model.to_string()).or_default();
        m.requests += 1;
        m.input_tokens += t.input;
        m.output_tokens += t.output;
        m.cache_read_tokens += t.cache_read;
        m.cache_write_tokens += t.cache_write;
    }

    /// One line for `jobs`: requests and tokens in and out.
    pub fn brief(&self) -> String {
        format!(
            "{} req, {} in / {} out tok",
            self.requests,
            self.input_tokens + self.cache_read_tokens + self.cache_write_tokens,
            self.output_tokens
        )
    }
}

/// Options of the gateway as a whole; the defaults are production's.
#[derive(Clone)]
pub struct GatewayOptions {
    /// CAs trusted besides the system's (tests: the CA of a loopback TLS upstream).
    pub extra_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    /// Where a Claude Code login is refreshed.
    pub claude_token_url: String,
    /// `<state>/gateway`: lock files of login refreshes.
    pub state_dir: PathBuf,
}

impl GatewayOptions {
    pub fn new(state_root: &std::path::Path) -> GatewayOptions {
        GatewayOptions {
            extra_roots: Vec::new(),
            claude_token_url: credentials::CLAUDE_TOKEN_URL.to_string(),
            state_dir: state_root.join("gateway"),
        }
    }
}

/// What a job's model requests need.
pub struct JobSpec {
    pub job_id: String,
    pub account: String,
    pub upstream: UpstreamUrl,
    pub credential: Credential,
    /// `limits.tokens`: the most tokens the job may use.
    pub token_limit: Option<u64>,
    pub budget: Option<budget::Budget>,
    /// `<job>/model.log`.
    pub log: PathBuf,
}

/// A job's side of the gateway; the token is revoked when it is dropped.
pub struct JobGrant {
    pub token: String,
    /// Where the agent sends its requests: the gateway's origin and the upstream's base path.
    pub base_url: String,
    gate: Arc<JobGate>,
    inner: Weak<Inner>,
}

impl JobGrant {
    pub fn usage(&self) -> Usage {
        lock(&self.gate.usage).clone()
    }

    /// Why the upstream last failed the job's requests, unless a later one succeeded.
    pub fn upstream_error(&self) -> Option<String> {
        lock(&self.gate.upstream_error).clone()
    }

    /// Resolves once the job's agent has sent the gateway its first request (any, with the
    /// job's token): its own start is over. Never, if the grant is dropped first.
    pub fn first_request(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut asked = self.gate.asked.subscribe();
        async move {
            let asked = asked.wait_for(|asked| *asked).await.is_ok();
            if !asked {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Resolves with the reason once a cap has refused one of the job's requests.
    pub fn limit_fired(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.gate.fired.subscribe()
    }
}

impl Drop for JobGrant {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.upgrade() {
            lock(&inner.jobs).remove(&self.token);
        }
    }
}

struct JobGate {
    spec: JobSpec,
    usage: Mutex<Usage>,
    fired: tokio::sync::watch::Sender<Option<String>>,
    /// Whether the job has sent a request yet ([`JobGrant::first_request`]).
    asked: tokio::sync::watch::Sender<bool>,
    log: Mutex<Option<std::fs::File>>,
    /// The upstream's last failure (no answer, an error status), cleared by a success: an
    /// agent that gives up on its model exits 1, and this is the cause.
    upstream_error: Mutex<Option<String>>,
}

struct Inner {
    jobs: Mutex<HashMap<String, Arc<JobGate>>>,
    client: HttpClient,
    options: GatewayOptions,
    logins: Mutex<HashMap<PathBuf, Arc<ClaudeLogin>>>,
}

pub struct Gateway {
    pub addr: SocketAddr,
    inner: Arc<Inner>,
    task: JoinHandle<()>,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A fresh job token: 32 random bytes, hex.
fn new_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty())
        .map_err(std::io::Error::from)?;
    Ok(format!("qrgw-{}", crate::util::hex::encode(bytes)))
}

impl Gateway {
    /// Serves on `listener` (a loopback socket). Must be called inside a tokio runtime.
    pub fn start(
        listener: std::net::TcpListener,
        options: GatewayOptions,
    ) -> Result<Gateway, GatewayError> {
        listener
            .set_nonblocking(true)
            .map_err(GatewayError::Socket)?;
        let addr = listener.local_addr().map_err(GatewayError::Socket)?;
        let listener = tokio::net::TcpListener::from_std(listener).map_err(GatewayError::Socket)?;
        let inner = Arc::new(Inner {
            jobs: Mutex::new(HashMap::new()),
            client: upstream::client(&options.extra_roots)?,
            options,
            logins: Mutex::new(HashMap::new()),
        });
        let task = tokio::spawn(forward::accept_loop(listener, inner.clone()));
        tracing::info!(%addr, "model gateway listening");
        Ok(Gateway { addr, inner, task })
    }

    /// The credential of `secret`, read now (keys) or shared with the account's other jobs
    /// (logins, so that one refresh serves them all).
    pub fn credential(&self, secret: &SecretSource) -> Result<Credential, CredentialError> {
        Ok(match secret {
            SecretSource::File(path) => Credential::Key(credentials::read_key_file(path)?),
            SecretSource::AuthJson { file, provider } => {
                Credential::Key(credentials::read_auth_json_key(file, provider)?)
            }
            SecretSource::ClaudeLogin(path) => {
                let mut logins = lock(&self.inner.logins);
                let login = logins.entry(path.clone()).or_insert_with(|| {
                    Arc::new(ClaudeLogin::new(
                        path.clone(),
                        &self.inner.options.state_dir,
                        self.inner.options.claude_token_url.clone(),
                    ))
                });
                // A login that cannot be read fails the job now, not each of its requests.
                login.check()?;
                Credential::ClaudeLogin(login.clone())
            }
        })
    }

    /// Opens a job: its token is valid until the grant is dropped.
    pub fn open(&self, spec: JobSpec) -> Result<JobGrant, GatewayError> {
        let token = new_token().map_err(GatewayError::Token)?;
        let base_url = format!("http://{}{}", self.addr, spec.upstream.base_path);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&spec.log)
            .map_err(|source| GatewayError::JobLog {
                path: spec.log.clone(),
                source,
            })?;
        let gate = Arc::new(JobGate {
            spec,
            usage: Mutex::new(Usage::default()),
            fired: tokio::sync::watch::channel(None).0,
            asked: tokio::sync::watch::channel(false).0,
            log: Mutex::new(Some(log)),
            upstream_error: Mutex::new(None),
        });
        lock(&self.inner.jobs).insert(token.clone(), gate.clone());
        Ok(JobGrant {
            token,
            base_url,
            gate,
            inner: Arc::downgrade(&self.inner),
        })
    }

    /// How many jobs hold a live token.
    pub fn open_jobs(&self) -> usize {
        lock(&self.inner.jobs).len()
    }
}

#[cfg(test)]
#[path = "gateway_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "upstream_error_tests.rs"]
mod upstream_error_tests;
