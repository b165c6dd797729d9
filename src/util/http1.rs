//! The one HTTP/1.1 accept loop of the crate and of the suite's stand-ins: the model gateway,
//! `serve`'s metrics listener, the scripted model and the package-registry stand-in each pass
//! it a listener and how to answer a request. Keep-alive, chunked bodies and
//! `Expect: 100-continue` are hyper's.
//!
//! Each server bounds its connections as it needs ([`Bounds`]): the metrics listener, which any
//! local user reaches, bounds how many and for how long; the gateway, whose streams last a
//! model's answer, does not.
//!
//! Every connection is a task of the loop's own `JoinSet`: aborting the task that runs
//! [`serve_http1`] (a gateway or stand-in being dropped) ends its connections with it, so no
//! connection outlives the server it came in through.

use std::convert::Infallible;
use std::future::Future;
use std::time::{Duration, Instant};

use hyper::body::{Body, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

/// What one server allows its clients. The defaults bound nothing (the gateway: a model's
/// stream may last the job); a listener any local user can reach bounds all three, so idle
/// connections cannot take the descriptors the runner's jobs need.
#[derive(Debug, Clone, Copy, Default)]
pub struct Bounds {
    /// A connection is closed after this long, whatever it is doing.
    pub limit: Option<Duration>,
    /// A request's header must have come within this long (and between requests).
    pub header_read: Option<Duration>,
    /// Connections served at once; one more is closed as soon as it is accepted, which keeps
    /// its descriptor and empties the listen queue (a client retries; a queue of idle
    /// connections would delay every real one behind them).
    pub connections: Option<usize>,
}

/// How often a flood of failed accepts or refused connections is logged: once when it begins,
/// then at most this often, with how many there were meanwhile.
const LOG_EVERY: Duration = Duration::from_secs(60);
/// The pause after a failed accept, doubled while they go on failing (out of descriptors, the
/// connection stays queued and accept fails again at once), up to the second pause.
const PAUSES: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(1));

/// Serves every connection `listener` accepts, each request answered by `answer`, until the
/// task running this is aborted, within `bounds`. `what` names the server in the log, where a
/// failed accept is logged (rate-limited) and retried after a pause that grows.
pub async fn serve_http1<F, Fut, B>(
    listener: TcpListener,
    what: &'static str,
    bounds: Bounds,
    answer: F,
) where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<B>> + Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut conns = JoinSet::new();
    let mut failed = Flood::default();
    let mut refused = Flood::default();
    let mut pause = Duration::ZERO;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    pause = Duration::ZERO;
                    if bounds.connections.is_some_and(|max| conns.len() >= max) {
                        drop(stream);
                        refused.note(|n| tracing::warn!(
                            "{what}: {n} connection(s) closed at once: {} are served already",
                            conns.len()
                        ));
                        continue;
                    }
                    conns.spawn(connection(stream, bounds, answer.clone()));
                }
                Err(e) => {
                    failed.note(|n| tracing::warn!("{what}: accept: {e} ({n} failed since the last such line)"));
                    pause = (pause * 2).clamp(PAUSES.0, PAUSES.1);
                    tokio::time::sleep(pause).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// Serves one connection within `bounds`.
async fn connection<F, Fut, B>(stream: tokio::net::TcpStream, bounds: Bounds, answer: F)
where
    F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<B>> + Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let _ = stream.set_nodelay(true);
    let service = hyper::service::service_fn(move |req| {
        let answered = answer(req);
        async move { Ok::<_, Infallible>(answered.await) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.keep_alive(true);
    if let Some(header_read) = bounds.header_read {
        builder
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(header_read);
    }
    let served = builder.serve_connection(TokioIo::new(stream), service);
    match bounds.limit {
        Some(limit) => drop(tokio::time::timeout(limit, served).await),
        None => drop(served.await),
    }
}

/// A kind of event that can come by the thousand: logged when it first comes and then at most
/// every [`LOG_EVERY`], with the count since the last line.
#[derive(Default)]
struct Flood {
    logged: Option<Instant>,
    since: u64,
}

impl Flood {
    fn note(&mut self, log: impl FnOnce(u64)) {
        self.since += 1;
        if self.logged.is_none_or(|at| at.elapsed() >= LOG_EVERY) {
            log(self.since);
            self.since = 0;
            self.logged = Some(Instant::now());
        }
    }
}
