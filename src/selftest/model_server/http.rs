//! The scripted model's HTTP/1.1, on hyper as the gateway's is: keep-alive connections,
//! `Content-Length` or chunked request bodies (bounded), `Expect: 100-continue`; each request
//! is answered by [`super::script::respond`] with one whole response.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use super::script::respond;
use super::wire::{Request, Response};
use super::State;

const MAX_BODY: usize = 64 * 1024 * 1024;

/// Serves every connection `listener` accepts until aborted (its connections with it);
/// `via_host` marks the requests of the host-side listener.
pub(super) async fn accept_loop(listener: TcpListener, state: Arc<Mutex<State>>, via_host: bool) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let state = state.clone();
                    let service = hyper::service::service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(answer(&state, req, via_host).await) }
                    });
                    conns.spawn(async move {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .keep_alive(true)
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
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

async fn answer(
    state: &Arc<Mutex<State>>,
    req: hyper::Request<Incoming>,
    via_host: bool,
) -> hyper::Response<Full<Bytes>> {
    let (head, body) = req.into_parts();
    let body = match Limited::new(body, MAX_BODY).collect().await {
        Ok(collected) => collected.to_bytes().to_vec(),
        Err(e) => {
            eprintln!("model server: bad request: {e}");
            return plain(hyper::StatusCode::BAD_REQUEST);
        }
    };
    let header = |name: &str| head.headers.get(name).and_then(|v| v.to_str().ok());
    let key = header("x-api-key").map(str::to_string).or_else(|| {
        header("authorization")
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(|t| t.trim().to_string())
    });
    let request = Request {
        method: head.method.as_str().to_string(),
        path: head
            .uri
            .path_and_query()
            .map_or_else(|| head.uri.path().to_string(), |p| p.as_str().to_string()),
        body,
        key,
        via_host,
    };
    let response = respond(state, &request);
    reply(response, head.method == hyper::Method::HEAD)
}

fn reply(response: Response, head_only: bool) -> hyper::Response<Full<Bytes>> {
    let status = response
        .status
        .split(' ')
        .next()
        .and_then(|code| code.parse::<u16>().ok())
        .and_then(|code| hyper::StatusCode::from_u16(code).ok())
        .unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    let length = response.body.len();
    let body = match head_only {
        true => Bytes::new(),
        false => Bytes::from(response.body),
    };
    let mut out = hyper::Response::new(Full::new(body));
    *out.status_mut() = status;
    let headers = out.headers_mut();
    headers.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(response.content_type),
    );
    headers.insert(
        hyper::header::CONTENT_LENGTH,
        hyper::header::HeaderValue::from(length),
    );
    headers.insert(
        hyper::header::CACHE_CONTROL,
        hyper::header::HeaderValue::from_static("no-cache"),
    );
    headers.insert(
        "request-id",
        hyper::header::HeaderValue::from_static("req_scripted"),
    );
    out
}

fn plain(status: hyper::StatusCode) -> hyper::Response<Full<Bytes>> {
    let mut out = hyper::Response::new(Full::new(Bytes::new()));
    *out.status_mut() = status;
    out
}
