//! HTTP/1.1 on hyper for the suite's stand-in servers (the scripted model, the package
//! registry): each request's body read whole (bounded), answered by a handler with one whole
//! response, through the core's one accept loop. The server and every connection stop when
//! the task running [`serve`] is aborted.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{HeaderName, HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use tokio::net::TcpListener;

/// A request, its body read whole.
pub struct StubRequest {
    pub method: String,
    /// The request target as sent: path and query.
    pub target: String,
    pub headers: hyper::HeaderMap,
    pub body: Vec<u8>,
}

impl StubRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// A whole response.
pub struct StubResponse {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    /// Headers besides the content type and length.
    pub headers: &'static [(&'static str, &'static str)],
}

/// Serves every connection `listener` accepts with `handler`, until the task running it is
/// aborted (`quest_runner::util::http1`, the gateway's loop). A body over `max_body` bytes is
/// answered 413 without reaching the handler.
pub async fn serve<F>(listener: TcpListener, max_body: usize, handler: Arc<F>)
where
    F: Fn(StubRequest) -> StubResponse + Send + Sync + 'static,
{
    quest_runner::util::http1::serve_http1(
        listener,
        "stand-in server",
        Default::default(),
        move |req| {
            let handler = handler.clone();
            async move { answer(req, max_body, &*handler).await }
        },
    )
    .await
}

async fn answer<F>(
    req: hyper::Request<hyper::body::Incoming>,
    max_body: usize,
    handler: &F,
) -> hyper::Response<Full<Bytes>>
where
    F: Fn(StubRequest) -> StubResponse,
{
    let (head, body) = req.into_parts();
    let body = match Limited::new(body, max_body).collect().await {
        Ok(collected) => collected.to_bytes().to_vec(),
        Err(e) => {
            eprintln!("stand-in server: request body refused: {e}");
            let mut out = hyper::Response::new(Full::new(Bytes::new()));
            *out.status_mut() = hyper::StatusCode::PAYLOAD_TOO_LARGE;
            return out;
        }
    };
    let head_only = head.method == hyper::Method::HEAD;
    let response = handler(StubRequest {
        method: head.method.as_str().to_string(),
        target: head
            .uri
            .path_and_query()
            .map_or_else(|| head.uri.path().to_string(), |p| p.as_str().to_string()),
        headers: head.headers,
        body,
    });
    let length = response.body.len();
    let body = match head_only {
        true => Bytes::new(),
        false => Bytes::from(response.body),
    };
    let mut out = hyper::Response::new(Full::new(body));
    *out.status_mut() = hyper::StatusCode::from_u16(response.status)
        .unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    let headers = out.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static(response.content_type),
    );
    headers.insert(CONTENT_LENGTH, HeaderValue::from(length));
    for (name, value) in response.headers {
        headers.insert(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        );
    }
    out
}
