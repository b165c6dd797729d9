//! The operator's endpoint of `serve` (`metrics.listen`), on hyper as the model gateway is:
//! `/metrics` (Prometheus' text format), `/healthz` (alive) and `/readyz` (taking jobs, or
//! why not). Every answer is read from what the serve loop already knows, so a scrape costs
//! the loop nothing and a slow scraper holds nothing of it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};

use super::metrics::Metrics;

#[derive(Debug, thiserror::Error)]
#[error("metrics.listen: cannot listen on {addr}: {source}")]
pub struct ListenError {
    addr: SocketAddr,
    #[source]
    source: std::io::Error,
}

/// What a `serve` on `addr` says at `/readyz`: its status code and body. A plain blocking
/// HTTP/1.1 request, bounded in time, for `doctor` (which has no runtime of its own).
pub fn ask_ready(addr: SocketAddr) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET /readyz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    // A bounded answer: the readiness lines are short.
    stream.take(64 * 1024).read_to_end(&mut raw)?;
    let raw = String::from_utf8_lossy(&raw);
    let status = raw.split_whitespace().nth(1).and_then(|s| s.parse().ok());
    let Some(status) = status else {
        return Err(std::io::Error::other("not an HTTP answer"));
    };
    let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Ok((status, body.trim().to_string()))
}

/// Binds `addr` and answers on it until the runtime ends.
pub async fn start(addr: SocketAddr, metrics: Arc<Metrics>) -> Result<SocketAddr, ListenError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ListenError { addr, source })?;
    let bound = listener.local_addr().unwrap_or(addr);
    tokio::spawn(accept_loop(listener, metrics));
    Ok(bound)
}

/// What the endpoint allows: any local user can connect, and a scrape is one short request,
/// so a few dozen connections of a few seconds each; idle ones beyond would take the
/// descriptors the jobs need (1,139 of them once made every accept fail).
const BOUNDS: crate::util::http1::Bounds = crate::util::http1::Bounds {
    limit: Some(Duration::from_secs(10)),
    header_read: Some(Duration::from_secs(3)),
    connections: Some(64),
};

async fn accept_loop(listener: tokio::net::TcpListener, metrics: Arc<Metrics>) {
    crate::util::http1::serve_http1(listener, "metrics", BOUNDS, move |req| {
        let answered = answer(&metrics, &req);
        std::future::ready(answered)
    })
    .await
}

fn answer<B>(metrics: &Metrics, req: &Request<B>) -> Response<Full<Bytes>> {
    if req.method() != hyper::Method::GET && req.method() != hyper::Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n".into());
    }
    match req.uri().path() {
        "/metrics" => {
            let mut response = text(StatusCode::OK, metrics.render());
            response.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            response
        }
        "/healthz" => text(StatusCode::OK, "ok\n".into()),
        "/readyz" => match metrics.not_ready() {
            None => text(StatusCode::OK, "ready\n".into()),
            Some(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
        },
        _ => text(StatusCode::NOT_FOUND, "not found\n".into()),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
}
