//! The runner's side of the job's proxy port when the job has locked dependencies: it answers
//! the hosts of the job's locked set itself, from the cache, and passes every other
//! connection on, untouched, to the job's `srt proxy` (trusted jobs) or refuses it at once
//! (untrusted ones, which have no other way out).
//!
//! A connection's first request head is read here (bounded in size and time). A `CONNECT` to
//! one of the set's hosts on 443 is answered `200`, its TLS terminated with a certificate of
//! the job's CA for that host, and each request inside decided by the job's rules (the same
//! [`NetRules`] the decider keeps: reads only, one host named everywhere) and then:
//! - in the job's set: answered from the cache (`served locked` in the network log);
//! - not in it, trusted: fetched from the registry by the runner's own client and passed back
//!   (`allowed`), never stored — its bytes were verified by no lock;
//! - not in it, untrusted: refused `403` with the rule, so the package manager fails in
//!   seconds, not at the job's timeout.
//!
//! Nothing the job sends here reaches the cache: a request can only name what the job's set
//! (made from its revision's locks) holds.

use std::collections::{BTreeSet, HashMap};
use std::convert::Infallible;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::ca::JobCa;
use super::decider::refusal_body;
use super::log::{self, Counts, Entry, NetLog};
use super::rules::{Decision, NetRules, Request as RuleRequest};
use crate::deps::{Answer, DepCache, Fetcher, Served};

/// The most bytes of a connection's first request head.
const MAX_HEAD: usize = 64 << 10;
/// A connection's first request head, and each later one, must come within this long.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a request waits for the job's set, while the runner still fetches it.
const SET_WAIT: Duration = Duration::from_secs(3600);

/// What the front answers from, and where the rest goes.
pub struct FrontSpec {
    /// The hosts the job's set answers for (`crate::deps::Plan::hosts`).
    pub hosts: BTreeSet<String>,
    /// The job's set, once the runner has fetched it.
    pub served: watch::Receiver<Option<Arc<Served>>>,
    pub cache: DepCache,
    pub rules: NetRules,
    pub ca: Arc<JobCa>,
    pub log: Arc<NetLog>,
    pub counts: Arc<Counts>,
    /// Trusted jobs: the socket of the job's `srt proxy`, which every other connection goes
    /// to, and the runner's client for requests the set does not answer.
    pub onward: Option<Onward>,
}

/// Where a trusted job's other traffic goes.
pub struct Onward {
    pub srt_socket: PathBuf,
    pub fetcher: Fetcher,
}

/// The front's accept loop; its connections end with it.
pub struct Front {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Front {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Front {
    /// Serves `listener` (the job's proxy port) until dropped.
    pub fn start(listener: std::net::TcpListener, spec: FrontSpec) -> std::io::Result<Front> {
        listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let shared = Arc::new(Shared {
            spec,
            tls: Mutex::default(),
        });
        let task = tokio::spawn(tracing::Instrument::in_current_span(async move {
            let mut conns = JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => {
                            let _ = stream.set_nodelay(true);
                            conns.spawn(connection(stream, shared.clone()));
                        }
                        Err(e) => {
                            tracing::warn!("the job's proxy port: accept: {e}");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    },
                    Some(_) = conns.join_next(), if !conns.is_empty() => {}
                }
            }
        }));
        Ok(Front { task })
    }
}

struct Shared {
    spec: FrontSpec,
    /// A TLS setup per host, each with its leaf certificate, made at its first CONNECT.
    tls: Mutex<HashMap<String, Arc<rustls::ServerConfig>>>,
}

/// The first request head of a connection, and what came after it.
struct Head {
    bytes: Vec<u8>,
    /// Where the head ends in `bytes`.
    end: usize,
}

/// What the first request of a connection asks for.
enum Route {
    /// `CONNECT host:443` for a host of the set.
    Terminate(String),
    /// Anything else: `srt proxy`'s, or refused. Method, host and port as far as known.
    Other {
        method: String,
        host: String,
        port: u16,
        http: bool,
    },
}

async fn connection(mut stream: tokio::net::TcpStream, shared: Arc<Shared>) {
    let Ok(Ok(head)) = tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut stream)).await else {
        return;
    };
    match route(&head, &shared.spec.hosts) {
        Route::Terminate(host) => terminate(stream, head, host, shared).await,
        Route::Other {
            method,
            host,
            port,
            http,
        } => match &shared.spec.onward {
            Some(onward) => splice(stream, head, &onward.srt_socket).await,
            None => {
                let reason = format!(
                    "host_not_allowed: {host} is not a host of this untrusted revision's locked \
                     dependencies, and untrusted revisions reach no other"
                );
                let decision = Decision::Deny {
                    status: 403,
                    reason,
                };
                record(&shared.spec, &method, &host, port, "-", &decision);
                if http {
                    let _ = stream.write_all(&plain_refusal(&decision)).await;
                }
            }
        },
    }
}

/// Reads until the end of the first request head (or what is not one: a SOCKS greeting).
async fn read_head(stream: &mut tokio::net::TcpStream) -> std::io::Result<Head> {
    let mut bytes = Vec::with_capacity(1024);
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        bytes.extend_from_slice(&buf[..n]);
        if let Some(i) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok(Head { bytes, end: i + 4 });
        }
        // Not HTTP (SOCKS starts with 0x04 or 0x05), or too long to be a head: passed on
        // as it is, or refused.
        if !bytes[0].is_ascii_alphabetic() || bytes.len() > MAX_HEAD {
            let end = bytes.len();
            return Ok(Head { bytes, end });
        }
    }
}

fn route(head: &Head, hosts: &BTreeSet<String>) -> Route {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let parsed = matches!(
        req.parse(&head.bytes[..head.end]),
        Ok(httparse::Status::Complete(_))
    );
    let method = req.method.unwrap_or("-").to_string();
    let target = req.path.unwrap_or_default();
    if parsed && method == "CONNECT" {
        let (host, port) = target.rsplit_once(':').unwrap_or((target, ""));
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let port = port.parse().unwrap_or(0);
        if port == 443 && hosts.contains(&host) {
            return Route::Terminate(host);
        }
        return Route::Other {
            method,
            host,
            port,
            http: true,
        };
    }
    // A plain request names its host in an absolute target.
    let (host, port) = target
        .strip_prefix("http://")
        .map(|rest| rest.split('/').next().unwrap_or(rest))
        .map(|authority| match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.parse().unwrap_or(80)),
            None => (authority.to_string(), 80),
        })
        .unwrap_or_else(|| ("-".into(), 0));
    Route::Other {
        method,
        host,
        port,
        http: parsed,
    }
}

/// The job's `srt proxy` takes the connection as the client sent it.
async fn splice(mut stream: tokio::net::TcpStream, head: Head, socket: &std::path::Path) {
    let mut srt = match tokio::net::UnixStream::connect(socket).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("reaching the job's srt proxy at {}: {e}", socket.display());
            return;
        }
    };
    if srt.write_all(&head.bytes).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut stream, &mut srt).await;
}

/// Answers the CONNECT, terminates its TLS as `host`, and serves the requests inside it.
async fn terminate(
    mut stream: tokio::net::TcpStream,
    head: Head,
    host: String,
    shared: Arc<Shared>,
) {
    let config = match tls_for(&shared, &host) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("a certificate of the job's CA for {host}: {e}");
            let _ = stream
                .write_all(b"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\n")
                .await;
            return;
        }
    };
    if stream
        .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        .await
        .is_err()
    {
        return;
    }
    let rest = head.bytes[head.end..].to_vec();
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let handshake = acceptor.accept(Prefixed {
        rest,
        at: 0,
        inner: stream,
    });
    let Ok(Ok(tls)) = tokio::time::timeout(HEAD_TIMEOUT, handshake).await else {
        return;
    };
    let sni = tls.get_ref().1.server_name().map(str::to_string);
    let service = hyper::service::service_fn(move |req| {
        let shared = shared.clone();
        let host = host.clone();
        let sni = sni.clone();
        async move { Ok::<_, Infallible>(answer(req, &host, sni.as_deref(), &shared).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .serve_connection(TokioIo::new(tls), service)
        .await;
}

fn tls_for(shared: &Shared, host: &str) -> Result<Arc<rustls::ServerConfig>, String> {
    let mut cache = shared.tls.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = cache.get(host) {
        return Ok(c.clone());
    }
    let leaf = shared.spec.ca.leaf(host).map_err(|e| e.to_string())?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| {
            b.with_no_client_auth()
                .with_single_cert(leaf.chain, leaf.key)
        })
        .map_err(|e| e.to_string())?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let config = Arc::new(config);
    cache.insert(host.to_string(), config.clone());
    Ok(config)
}

type Body = BoxBody<Bytes, std::io::Error>;

/// One request inside a terminated tunnel to `host`.
async fn answer(
    req: Request<Incoming>,
    host: &str,
    sni: Option<&str>,
    shared: &Shared,
) -> Response<Body> {
    let spec = &shared.spec;
    let method = req.method().as_str().to_string();
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let logged_path = path.split('?').next().unwrap_or(&path).to_string();
    let header = |name: hyper::header::HeaderName| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let host_header = header(hyper::header::HOST);
    let decision = spec.rules.decide(&RuleRequest {
        method: &method,
        host,
        port: 443,
        host_header: host_header.as_deref(),
        sni: Some(sni.unwrap_or("")),
    });
    if let Decision::Deny { status, .. } = &decision {
        record(spec, &method, host, 443, &logged_path, &decision);
        return refusal(*status, &decision);
    }
    let Some(served) = the_set(spec).await else {
        let decision = deny(
            503,
            "the job's locked dependencies were never made ready".into(),
        );
        record(spec, &method, host, 443, &logged_path, &decision);
        return refusal(503, &decision);
    };
    let accept = header(hyper::header::ACCEPT);
    let trusted = spec.onward.is_some();
    match served.answer(host, &path, accept.as_deref(), trusted) {
        Some(found) => {
            let head = method == "HEAD";
            let shown = Entry {
                method: &method,
                host,
                port: 443,
                path: &logged_path,
            };
            serve_found(spec, found, head, &shown).await
        }
        None => match &spec.onward {
            Some(onward) => {
                record(spec, &method, host, 443, &logged_path, &Decision::Allow);
                forward(&onward.fetcher, req, host, &path).await
            }
            None => {
                let decision = deny(
                    403,
                    format!(
                        "not_locked: {host}{logged_path} is not in this revision's locks; an \
                         untrusted revision is served only what its lockfiles pin"
                    ),
                );
                record(spec, &method, host, 443, &logged_path, &decision);
                refusal(403, &decision)
            }
        },
    }
}

/// An answer of the job's set: an object of the cache, or a document made for the job.
async fn serve_found(
    spec: &FrontSpec,
    found: Answer,
    head: bool,
    shown: &Entry<'_>,
) -> Response<Body> {
    let response = match found {
        Answer::Object(digest) => object(spec, &digest, head).await,
        Answer::Document { content_type, body } => Some(document(content_type, body, head)),
    };
    let Some(response) = response else {
        let decision = deny(
            503,
            "the job's locked artifact is gone from the cache".into(),
        );
        record(
            spec,
            shown.method,
            shown.host,
            shown.port,
            shown.path,
            &decision,
        );
        return refusal(503, &decision);
    };
    spec.counts.count_served();
    spec.log.record_served(SystemTime::now(), shown);
    response
}

/// The job's set, waiting while the runner still fetches it.
async fn the_set(spec: &FrontSpec) -> Option<Arc<Served>> {
    let mut rx = spec.served.clone();
    let waited = tokio::time::timeout(SET_WAIT, rx.wait_for(|s| s.is_some())).await;
    match waited {
        Ok(Ok(set)) => set.clone(),
        _ => None,
    }
}

/// An object of the cache, streamed.
async fn object(
    spec: &FrontSpec,
    digest: &crate::deps::digest::Digest,
    head: bool,
) -> Option<Response<Body>> {
    let path = spec.cache.object(digest);
    let file = tokio::fs::File::open(&path).await.ok()?;
    let len = file.metadata().await.ok()?.len();
    let body: Body = if head {
        empty()
    } else {
        let chunks = futures::stream::unfold(file, |mut file| async move {
            let mut buf = bytes::BytesMut::with_capacity(64 << 10);
            match file.read_buf(&mut buf).await {
                Ok(0) => None,
                Ok(_) => Some((Ok(Frame::data(buf.freeze())), file)),
                Err(e) => Some((Err(e), file)),
            }
        });
        BodyExt::boxed(StreamBody::new(chunks))
    };
    Response::builder()
        .status(StatusCode::OK)
        .header(hyper::header::CONTENT_TYPE, "application/octet-stream")
        .header(hyper::header::CONTENT_LENGTH, len)
        .body(body)
        .ok()
}

fn document(content_type: &'static str, body: Bytes, head: bool) -> Response<Body> {
    let len = body.len();
    let body = if head { empty() } else { full(body) };
    Response::builder()
        .status(StatusCode::OK)
        .header(hyper::header::CONTENT_TYPE, content_type)
        .header(hyper::header::CONTENT_LENGTH, len)
        .body(body)
        .unwrap_or_else(|_| Response::new(empty()))
}

/// A trusted job's request the set does not answer, made by the runner's client.
async fn forward(
    fetcher: &Fetcher,
    req: Request<Incoming>,
    host: &str,
    path: &str,
) -> Response<Body> {
    let (parts, _body) = req.into_parts();
    match fetcher
        .forward(parts.method, host, path, &parts.headers)
        .await
    {
        Ok(response) => {
            let (parts, body) = response.into_parts();
            let body = body.map_err(std::io::Error::other).boxed();
            Response::from_parts(parts, body)
        }
        Err(e) => {
            tracing::info!("a trusted job's request to {host}: {e}");
            let mut r = Response::new(full(Bytes::from(format!("quest-runner: {e}\n"))));
            *r.status_mut() = StatusCode::BAD_GATEWAY;
            r
        }
    }
}

fn record(spec: &FrontSpec, method: &str, host: &str, port: u16, path: &str, decision: &Decision) {
    log::count(&spec.counts, decision);
    spec.log.record(
        SystemTime::now(),
        &Entry {
            method,
            host,
            port,
            path,
        },
        decision,
    );
}

fn deny(status: u16, reason: String) -> Decision {
    Decision::Deny { status, reason }
}

/// A refusal inside a tunnel: the body npm, pip and cargo show, naming the rule.
fn refusal(status: u16, decision: &Decision) -> Response<Body> {
    let reason = match decision {
        Decision::Deny { reason, .. } => reason.as_str(),
        Decision::Allow => "",
    };
    let rule = reason.split(':').next().unwrap_or("refused").to_string();
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN))
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header("x-deny-reason", rule)
        .body(full(Bytes::from(refusal_body(reason))))
        .unwrap_or_else(|_| Response::new(empty()))
}

/// A refusal of a connection's first request, before any tunnel.
fn plain_refusal(decision: &Decision) -> Vec<u8> {
    let (status, reason) = match decision {
        Decision::Deny { status, reason } => (*status, reason.as_str()),
        Decision::Allow => (403, ""),
    };
    let body = refusal_body(reason);
    let rule = reason.split(':').next().unwrap_or("refused");
    format!(
        "HTTP/1.1 {status} Forbidden\r\nContent-Type: application/json\r\nX-Deny-Reason: \
         {rule}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn full(bytes: Bytes) -> Body {
    Full::new(bytes).map_err(|never| match never {}).boxed()
}

fn empty() -> Body {
    full(Bytes::new())
}

/// The tunnel's stream, with the bytes the client sent after its CONNECT head (its TLS hello,
/// sent at once) read first.
struct Prefixed<S> {
    rest: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.at < self.rest.len() {
            let n = buf.remaining().min(self.rest.len() - self.at);
            let at = self.at;
            buf.put_slice(&self.rest[at..at + n]);
            self.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
