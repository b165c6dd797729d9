//! The scripted model's HTTP: [`crate::stub_http`] (hyper), each request answered by
//! [`super::script::respond`] with one whole response.

use std::sync::{Arc, Mutex};

use tokio::net::TcpListener;

use super::script::respond;
use super::wire::Request;
use super::State;
use crate::stub_http::{self, StubRequest, StubResponse};

const MAX_BODY: usize = 64 * 1024 * 1024;

/// Serves every connection `listener` accepts until aborted (its connections with it);
/// `via_host` marks the requests of the host-side listener.
pub(super) async fn accept_loop(listener: TcpListener, state: Arc<Mutex<State>>, via_host: bool) {
    let handler = move |req: StubRequest| {
        let key = req.header("x-api-key").map(str::to_string).or_else(|| {
            req.header("authorization")
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(|t| t.trim().to_string())
        });
        let request = Request {
            method: req.method,
            path: req.target,
            body: req.body,
            key,
            via_host,
        };
        let response = respond(&state, &request);
        StubResponse {
            status: status_code(response.status),
            content_type: response.content_type,
            body: response.body,
            headers: &[
                ("cache-control", "no-cache"),
                ("request-id", "req_scripted"),
            ],
        }
    };
    stub_http::serve(listener, MAX_BODY, Arc::new(handler)).await;
}

/// `"200 OK"` → 200.
fn status_code(status: &str) -> u16 {
    status
        .split(' ')
        .next()
        .and_then(|code| code.parse().ok())
        .unwrap_or(500)
}
