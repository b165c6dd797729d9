//! The runner's own fetches from the fixed registries: each locked artifact, streamed into
//! the cache and kept only if its hash is the lock's ([`super::cache::Writer`]), and the
//! registries' metadata the runner needs to find and serve files (PyPI's simple pages,
//! crates.io's index). Nothing a job chose is in a request: the address is the lock's (the
//! revision's author's), checked to be on the fixed registries, and no header of a job's is
//! sent.
//!
//! An artifact is fetched once however many jobs want it at once: the cache's lock on its
//! hash holds every other fetch, in this runner and in others on the same state directory,
//! until the first has stored it.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::dns::{GaiResolver, Name};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::CertificateDer;

use super::cache::{CacheError, DepCache};
use super::digest::Digest;
use super::pin::{RegistryUrl, REGISTRIES};

/// A response's next bytes must come within this long.
const IDLE: Duration = Duration::from_secs(60);
/// Headers of one connection, not of the request (RFC 9110 7.6.1), and the job's `Host`,
/// which the client sets from the address.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
];
/// Redirects followed, each to a fixed registry.
const MAX_REDIRECTS: usize = 3;
/// Tries of a fetch that failed on the way (no connection, no answer in time, a 5xx or 429,
/// a body cut short): a registry's passing fault must not fail a job's start. Never of an
/// answer that is the registry's word (404, a mismatch, too large).
const TRIES: u32 = 3;
/// The wait before the second try; it doubles after each.
const BACKOFF: Duration = Duration::from_millis(500);

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{url}: {source}")]
    Store { url: String, source: CacheError },
    #[error("{url}: {why}")]
    Http { url: String, why: String },
    /// A fault on the way, worth another try.
    #[error("{url}: {why}")]
    Unavailable { url: String, why: String },
    #[error("the registries' TLS setup: {0}")]
    Tls(#[from] rustls::Error),
}

/// Where the suite sends a registry's name instead of the DNS (a stand-in on loopback) and
/// the CA it trusts for it. Empty in every runner the CLI and `serve` make.
#[derive(Debug, Clone, Default)]
pub struct Upstreams {
    pub addresses: HashMap<String, SocketAddr>,
    pub roots: Vec<CertificateDer<'static>>,
}

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector<Resolve>>, Empty<Bytes>>;

/// The runner's client to the fixed registries.
#[derive(Clone)]
pub struct Fetcher {
    client: HttpsClient,
    /// The most bytes one artifact may be.
    pub max_artifact: u64,
}

/// What fetching an artifact came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fetched {
    /// The cache held it already.
    Cached,
    /// Fetched and verified now: its size.
    Stored(u64),
}

impl Fetcher {
    pub fn new(max_artifact: u64, upstreams: &Upstreams) -> Result<Fetcher, FetchError> {
        let tls = crate::util::tls::client_config(&upstreams.roots, "the dependency fetcher")?;
        let resolve = Resolve {
            addresses: Arc::new(upstreams.addresses.clone()),
        };
        let mut http = HttpConnector::new_with_resolver(resolve);
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(Duration::from_secs(30)));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_only()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(https);
        Ok(Fetcher {
            client,
            max_artifact,
        })
    }

    /// The artifact at `url` in the cache under `digest`: fetched and verified unless the
    /// cache holds it.
    pub async fn artifact(
        &self,
        cache: &DepCache,
        url: &RegistryUrl,
        digest: &Digest,
    ) -> Result<Fetched, FetchError> {
        if cache.size(digest).is_some() {
            cache.touch(digest);
            return Ok(Fetched::Cached);
        }
        let store = |source| FetchError::Store {
            url: url.url(),
            source,
        };
        let _lock = cache
            .lock(digest)
            .await
            .map_err(|e| store(CacheError::Io(e)))?;
        // Another job's fetch stored it while this one waited.
        if cache.size(digest).is_some() {
            cache.touch(digest);
            return Ok(Fetched::Cached);
        }
        retrying(|| async {
            let mut body = self.get(url, self.max_artifact).await?;
            // A try cut short drops its writer, and with it the partial download.
            let mut writer = cache
                .writer(digest, self.max_artifact)
                .map_err(|e| store(CacheError::Io(e)))?;
            while let Some(chunk) = next_chunk(&mut body, url).await? {
                writer.write(&chunk).map_err(store)?;
            }
            writer.commit().map(Fetched::Stored).map_err(store)
        })
        .await
    }

    /// A registry document (at most `limit` bytes), with `accept` as its `Accept` header.
    pub async fn document(
        &self,
        url: &RegistryUrl,
        accept: &str,
        limit: u64,
    ) -> Result<Vec<u8>, FetchError> {
        retrying(|| async {
            let mut body = self.get_with(url, limit, accept).await?;
            let mut out = Vec::new();
            while let Some(chunk) = next_chunk(&mut body, url).await? {
                out.extend_from_slice(&chunk);
                if out.len() as u64 > limit {
                    return Err(http_error(url, format!("larger than {limit} bytes")));
                }
            }
            Ok(out)
        })
        .await
    }

    /// A trusted job's read of a fixed registry that its locked set does not answer, made as
    /// the job asked (its end-to-end headers; no body: registries answer jobs' reads only),
    /// its answer passed back as it comes. Never stored: no lock verified it.
    pub async fn forward(
        &self,
        method: hyper::Method,
        host: &str,
        path_and_query: &str,
        headers: &hyper::HeaderMap,
    ) -> Result<hyper::Response<hyper::body::Incoming>, FetchError> {
        let url = format!("https://{host}{path_and_query}");
        let failed = |why: String| FetchError::Http {
            url: url.clone(),
            why,
        };
        let mut request = hyper::Request::builder().method(method).uri(&url);
        for (name, value) in headers {
            if !HOP_BY_HOP.contains(&name.as_str()) {
                request = request.header(name, value);
            }
        }
        let request = request
            .body(Empty::new())
            .map_err(|e| failed(e.to_string()))?;
        tokio::time::timeout(IDLE, self.client.request(request))
            .await
            .map_err(|_| failed(format!("no answer within {}s", IDLE.as_secs())))?
            .map_err(|e| failed(describe(&e)))
    }

    async fn get(
        &self,
        url: &RegistryUrl,
        limit: u64,
    ) -> Result<hyper::body::Incoming, FetchError> {
        self.get_with(url, limit, "*/*").await
    }

    /// A `GET` of `url`, following redirects within the fixed registries; the body of a 200
    /// whose declared length is within `limit`.
    async fn get_with(
        &self,
        url: &RegistryUrl,
        limit: u64,
        accept: &str,
    ) -> Result<hyper::body::Incoming, FetchError> {
        let mut at = url.clone();
        for _ in 0..=MAX_REDIRECTS {
            let request = hyper::Request::get(at.url())
                .header(hyper::header::ACCEPT, accept)
                .header(hyper::header::ACCEPT_ENCODING, "identity")
                .header(
                    hyper::header::USER_AGENT,
                    concat!("quest-runner/", env!("CARGO_PKG_VERSION")),
                )
                .body(Empty::new())
                .map_err(|e| http_error(&at, e.to_string()))?;
            let response = tokio::time::timeout(IDLE, self.client.request(request))
                .await
                .map_err(|_| unavailable(&at, format!("no answer within {}s", IDLE.as_secs())))?
                .map_err(|e| unavailable(&at, describe(&e)))?;
            let status = response.status();
            if status.is_redirection() {
                let location = response
                    .headers()
                    .get(hyper::header::LOCATION)
                    .and_then(|l| l.to_str().ok())
                    .unwrap_or_default();
                at = RegistryUrl::parse(location).map_err(|why| {
                    http_error(&at, format!("redirected off the fixed registries: {why}"))
                })?;
                continue;
            }
            if status.is_server_error() || status == hyper::StatusCode::TOO_MANY_REQUESTS {
                return Err(unavailable(&at, format!("the registry answered {status}")));
            }
            if status != hyper::StatusCode::OK {
                return Err(http_error(&at, format!("the registry answered {status}")));
            }
            let declared = response
                .headers()
                .get(hyper::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            if declared.is_some_and(|n| n > limit) {
                return Err(FetchError::Store {
                    url: at.url(),
                    source: CacheError::TooLarge { limit },
                });
            }
            return Ok(response.into_body());
        }
        Err(http_error(
            url,
            format!("more than {MAX_REDIRECTS} redirects"),
        ))
    }
}

async fn next_chunk(
    body: &mut hyper::body::Incoming,
    url: &RegistryUrl,
) -> Result<Option<Bytes>, FetchError> {
    loop {
        let frame = tokio::time::timeout(IDLE, body.frame())
            .await
            .map_err(|_| unavailable(url, format!("no bytes for {}s", IDLE.as_secs())))?;
        match frame {
            None => return Ok(None),
            Some(Err(e)) => return Err(unavailable(url, format!("reading the answer: {e}"))),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    return Ok(Some(data));
                }
            }
        }
    }
}

/// `attempt` up to [`TRIES`] times while it fails on the way; its last error otherwise.
async fn retrying<T, F, Fut>(mut attempt: F) -> Result<T, FetchError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, FetchError>>,
{
    let mut wait = BACKOFF;
    for _ in 1..TRIES {
        match attempt().await {
            Err(FetchError::Unavailable { url, why }) => {
                tracing::info!(%url, %why, "a registry fetch failed on the way; trying again");
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
            done => return done,
        }
    }
    attempt().await
}

fn unavailable(url: &RegistryUrl, why: String) -> FetchError {
    FetchError::Unavailable {
        url: url.url(),
        why,
    }
}

fn http_error(url: &RegistryUrl, why: String) -> FetchError {
    FetchError::Http {
        url: url.url(),
        why,
    }
}

/// A client error with its causes, which hyper keeps apart (`client error (Connect)`, then
/// the connection's own).
fn describe(e: &hyper_util::client::legacy::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

/// The DNS, except for the names a test sends to a stand-in; and nothing but the fixed
/// registries' names either way (a redirect or a lock naming another host never gets here:
/// [`RegistryUrl::parse`] refuses it first).
#[derive(Clone)]
struct Resolve {
    addresses: Arc<HashMap<String, SocketAddr>>,
}

type Addrs = std::vec::IntoIter<SocketAddr>;

impl tower_service::Service<Name> for Resolve {
    type Response = Addrs;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Addrs, std::io::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), std::io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let host = name.as_str().to_string();
        if let Some(addr) = self.addresses.get(&host) {
            let addr = *addr;
            return Box::pin(async move { Ok(vec![addr].into_iter()) });
        }
        Box::pin(async move {
            if !REGISTRIES.contains(&host.as_str()) {
                return Err(std::io::Error::other(format!(
                    "{host} is not one of the fixed registries"
                )));
            }
            let mut gai = GaiResolver::new();
            let addrs = tower_service::Service::call(&mut gai, name).await?;
            Ok(addrs.collect::<Vec<_>>().into_iter())
        })
    }
}

#[cfg(test)]
#[path = "fetch_tests.rs"]
mod tests;
