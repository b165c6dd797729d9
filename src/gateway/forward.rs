//! One request through the gateway: token, route, caps, credential, forward, meter, log.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE, HOST};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;

use super::credentials::AuthForm;
use super::meter::{Meter, Metered};
use super::{lock, Inner, JobGate};

type OutResponse = Response<BoxBody<Bytes, hyper::Error>>;

/// Serves the gateway's listener until the gateway is dropped (which aborts this task, and
/// with it every connection).
pub(super) async fn accept_loop(listener: tokio::net::TcpListener, inner: Arc<Inner>) {
    crate::util::http1::serve_http1(listener, "model gateway", Default::default(), move |req| {
        let inner = inner.clone();
        async move { handle(&inner, req).await }
    })
    .await
}

/// Headers that belong to one connection, not to the request (RFC 9110 7.6.1), plus those the
/// gateway sets itself.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in named {
        headers.remove(n);
    }
    for n in HOP_BY_HOP {
        headers.remove(*n);
    }
}

/// The error body in the shape both dialects' clients print: Anthropic's `{"type":"error",
/// "error":{"type","message"}}`, which OpenAI-compatible clients read through `error.message`.
fn error(status: StatusCode, kind: &str, message: &str) -> OutResponse {
    let body = serde_json::json!({
        "type": "error",
        "error": {"type": kind, "message": message, "code": kind},
    })
    .to_string();
    let mut r = Response::new(Full::new(Bytes::from(body)).map_err(|n| match n {}).boxed());
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r.headers_mut()
        .insert("x-should-retry", HeaderValue::from_static("false"));
    r
}

/// The job token the agent sent, and how.
fn job_token(headers: &HeaderMap) -> Option<(String, AuthForm)> {
    if let Some(v) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        return Some((v.trim().to_string(), AuthForm::ApiKeyHeader));
    }
    let auth = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = auth.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| (token.trim().to_string(), AuthForm::Bearer))
}

/// What a request asks for, when it is a model endpoint the agents need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Endpoint {
    /// Messages, chat completions, responses: spends tokens.
    Generate,
    CountTokens,
    Models,
}

/// The endpoint of `method path` under the upstream's `base_path`, or why not. Only
/// Anthropic's Messages API (messages, count_tokens, models) and the OpenAI-compatible
/// chat completions, responses and models, with or without a `/v1` the base lacks.
pub(super) fn endpoint(method: &Method, path: &str, base_path: &str) -> Option<Endpoint> {
    let ok_chars = path
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/-._~:@".contains(&b));
    if !ok_chars || path.contains("//") || path.split('/').any(|s| s == "." || s == "..") {
        return None;
    }
    let rest = path.strip_prefix(base_path)?;
    let rest = rest.strip_prefix("/v1").unwrap_or(rest);
    match (method, rest) {
        (&Method::POST, "/messages" | "/chat/completions" | "/responses") => {
            Some(Endpoint::Generate)
        }
        (&Method::POST, "/messages/count_tokens") => Some(Endpoint::CountTokens),
        (&Method::GET, "/models") => Some(Endpoint::Models),
        (&Method::GET, r) => {
            let id = r.strip_prefix("/models/")?;
            (!id.is_empty() && !id.contains('/')).then_some(Endpoint::Models)
        }
        _ => None,
    }
}

/// One request: admitted (a running job's token, a model endpoint, caps not spent), sent
/// upstream with the account's credential, and answered with a body that meters and logs.
async fn handle(inner: &Arc<Inner>, req: Request<Incoming>) -> OutResponse {
    let started = Instant::now();
    let (gate, form, endpoint) = match admit(inner, &req).await {
        Ok(admitted) => admitted,
        Err(refused) => return refused,
    };
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let upstream_req = match upstream_request(inner, &gate, form, req).await {
        Ok(r) => r,
        Err(refused) => return refused,
    };
    let sent = Instant::now();
    let response = match inner.client.request(upstream_req).await {
        Ok(r) => r,
        Err(e) => {
            let what = format!("error 502 upstream:{}", e);
            gate.log_line(&method, &path, &what, None);
            let cause = format!("{} did not answer: {e}", gate.spec.upstream.display());
            *lock(&gate.upstream_error) = Some(format!("{cause} (502 to the agent)"));
            return error(
                StatusCode::BAD_GATEWAY,
                "api_error",
                &format!("quest-runner gateway: {cause}"),
            );
        }
    };
    // Rate limits are the agent's to wait out; they are not why it fails.
    let status = response.status();
    if status != StatusCode::TOO_MANY_REQUESTS {
        *lock(&gate.upstream_error) = (!status.is_success()).then(|| {
            let upstream = gate.spec.upstream.display();
            format!("{upstream} answered {status} to {method} {path}")
        });
    }
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let content_type = parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let request_id = ["request-id", "x-request-id"]
        .iter()
        .find_map(|h| parts.headers.get(*h).and_then(|v| v.to_str().ok()))
        .map(str::to_string);
    let metered = MeteredBody {
        inner: body,
        meter: Some(Meter::new(&content_type)),
        done: Some(Done {
            gate: gate.clone(),
            method,
            path,
            status: parts.status,
            request_id,
            started,
            sent,
            first_byte: None,
            metered: endpoint != Endpoint::Models,
        }),
    };
    Response::from_parts(parts, metered.boxed())
}

/// The job a request belongs to, how it sent its token, and the endpoint it asks for; or the
/// refusal: no token, a token of no running job, not a model endpoint, a spent cap.
async fn admit(
    inner: &Arc<Inner>,
    req: &Request<Incoming>,
) -> Result<(Arc<JobGate>, AuthForm, Endpoint), OutResponse> {
    let Some((token, form)) = job_token(req.headers()) else {
        return Err(error(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "quest-runner gateway: no job token (x-api-key or Authorization: Bearer)",
        ));
    };
    let gate = lock(&inner.jobs).get(&token).cloned();
    let Some(gate) = gate else {
        return Err(error(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "quest-runner gateway: this token belongs to no running job",
        ));
    };
    gate.asked
        .send_if_modified(|asked| !std::mem::replace(asked, true));
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let Some(endpoint) = endpoint(&method, &path, &gate.spec.upstream.base_path) else {
        let message = format!(
            "quest-runner gateway: {method} {path} is not a model endpoint this job may use"
        );
        gate.log_line(&method, &path, "refused 403 not_a_model_endpoint", None);
        lock(&gate.usage).refused += 1;
        return Err(error(StatusCode::FORBIDDEN, "permission_error", &message));
    };
    if endpoint == Endpoint::Generate {
        if let Some(why) = gate.over_cap().await {
            gate.log_line(&method, &path, "refused 400 token_limit", None);
            lock(&gate.usage).refused += 1;
            gate.fired.send_if_modified(|f| {
                let first = f.is_none();
                if first {
                    *f = Some(why.clone());
                }
                first
            });
            return Err(error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                &format!("quest-runner gateway: {why}"),
            ));
        }
    }
    Ok((gate, form, endpoint))
}

/// The request as the upstream gets it: its URI under the account's base, no hop-by-hop
/// headers, no job token, and the account's credential in the form the agent used.
async fn upstream_request(
    inner: &Arc<Inner>,
    gate: &JobGate,
    form: AuthForm,
    req: Request<Incoming>,
) -> Result<Request<BoxBody<Bytes, hyper::Error>>, OutResponse> {
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let (parts, body) = req.into_parts();
    let path_and_query = parts
        .uri
        .path_and_query()
        .map_or(path.as_str(), |p| p.as_str())
        .to_string();
    let uri = match gate.spec.upstream.uri(&path_and_query) {
        Ok(u) => u,
        Err(e) => {
            return Err(error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                &e.to_string(),
            ))
        }
    };
    let mut headers = parts.headers;
    strip_hop_by_hop(&mut headers);
    headers.remove(HOST);
    headers.remove("x-api-key");
    headers.remove(AUTHORIZATION);
    if let Err(e) = gate
        .spec
        .credential
        .apply(&mut headers, form, &inner.client)
        .await
    {
        gate.log_line(&method, &path, "error 502 credential", None);
        return Err(error(
            StatusCode::BAD_GATEWAY,
            "api_error",
            &format!("quest-runner gateway: account {}: {e}", gate.spec.account),
        ));
    }
    let mut upstream_req = Request::new(body.boxed());
    *upstream_req.method_mut() = method;
    *upstream_req.uri_mut() = uri;
    *upstream_req.headers_mut() = headers;
    Ok(upstream_req)
}

impl JobGate {
    /// Why a new request must be refused, if a cap is spent.
    async fn over_cap(&self) -> Option<String> {
        if let Some(why) = self.fired.borrow().clone() {
            return Some(why);
        }
        let used = lock(&self.usage).tokens();
        if let Some(limit) = self.spec.token_limit {
            if used >= limit {
                return Some(format!(
                    "the job's token limit is spent: {used} tokens used of {limit} (limits.tokens)"
                ));
            }
        }
        if let Some(budget) = &self.spec.budget {
            let b = budget.clone();
            let spent = tokio::task::spawn_blocking(move || b.spent())
                .await
                .ok()
                .and_then(Result::ok);
            match spent {
                Some(spent) if spent >= budget.limit => {
                    return Some(format!(
                        "account {}'s daily budget is spent: {spent} tokens used today (UTC) of {} (accounts.{}.budget)",
                        budget.account, budget.limit, budget.account
                    ))
                }
                Some(_) => {}
                None => {
                    return Some(format!(
                        "account {}'s budget could not be read ({})",
                        budget.account,
                        budget.file().display()
                    ))
                }
            }
        }
        None
    }

    /// One line of `model.log`: time, method, path (no query), outcome, then the figures.
    fn log_line(&self, method: &Method, path: &str, outcome: &str, figures: Option<&str>) {
        let time = humantime::format_rfc3339_millis(SystemTime::now());
        let line = format!(
            "{time} {} {} {}{}\n",
            crate::netproxy::log::escape(method.as_str()),
            crate::netproxy::log::escape(path),
            outcome,
            figures.map(|f| format!(" {f}")).unwrap_or_default()
        );
        if let Some(f) = lock(&self.log).as_mut() {
            use std::io::Write;
            let _ = f.write_all(line.as_bytes());
        }
    }
}

/// What is settled once a response's body has ended (or its reader went away).
struct Done {
    gate: Arc<JobGate>,
    method: Method,
    path: String,
    status: StatusCode,
    request_id: Option<String>,
    started: Instant,
    sent: Instant,
    first_byte: Option<Duration>,
    /// Model answers are metered; model lists are only logged.
    metered: bool,
}

impl Done {
    fn settle(self, found: Metered) {
        let wait = self.sent.elapsed();
        let model = found.model.clone().unwrap_or_else(|| "-".to_string());
        if self.metered {
            lock(&self.gate.usage).record(&model, &found.tokens, wait);
            let total = found.tokens.total();
            if let Some(budget) = self.gate.spec.budget.clone().filter(|_| total > 0) {
                let add = move || {
                    if let Err(e) = budget.add(total) {
                        tracing::warn!("counting {total} tokens against the budget: {e}");
                    }
                };
                // The count's fsync stays off the response's path (a body dropped outside the
                // runtime, at shutdown, counts inline).
                match tokio::runtime::Handle::try_current() {
                    Ok(rt) => drop(rt.spawn_blocking(add)),
                    Err(_) => add(),
                }
            }
        }
        let t = found.tokens;
        let figures = format!(
            "model={} in={} out={} cache_read={} cache_write={}{} first_byte_ms={} ms={} request_id={}",
            crate::netproxy::log::escape(&model),
            t.input,
            t.output,
            t.cache_read,
            t.cache_write,
            if self.metered && !found.seen && self.status.is_success() {
                " unmetered"
            } else {
                ""
            },
            self.first_byte.map_or(-1, |d| d.as_millis() as i64),
            self.started.elapsed().as_millis(),
            crate::netproxy::log::escape(self.request_id.as_deref().unwrap_or("-")),
        );
        self.gate.log_line(
            &self.method,
            &self.path,
            self.status.as_str(),
            Some(&figures),
        );
    }
}

/// The upstream body, passed on frame by frame as it arrives, read by the meter on the way.
struct MeteredBody {
    inner: Incoming,
    meter: Option<Meter>,
    done: Option<Done>,
}

impl MeteredBody {
    fn finish(&mut self) {
        if let (Some(meter), Some(done)) = (self.meter.take(), self.done.take()) {
            done.settle(meter.finish());
        }
    }
}

impl Drop for MeteredBody {
    fn drop(&mut self) {
        // The agent went away mid-answer: what it was sent still counts.
        self.finish();
    }
}

impl Body for MeteredBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let this = &mut *self;
                    if let Some(done) = this.done.as_mut() {
                        done.first_byte
                            .get_or_insert_with(|| done.started.elapsed());
                    }
                    if let Some(m) = this.meter.as_mut() {
                        m.feed(data);
                    }
                }
            }
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => self.finish(),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_model_endpoints_pass() {
        let post = Method::POST;
        let get = Method::GET;
        assert_eq!(
            endpoint(&post, "/v1/messages", ""),
            Some(Endpoint::Generate)
        );
        assert_eq!(
            endpoint(&post, "/v1/messages/count_tokens", ""),
            Some(Endpoint::CountTokens)
        );
        assert_eq!(endpoint(&get, "/v1/models", ""), Some(Endpoint::Models));
        assert_eq!(
            endpoint(&get, "/v1/models/claude-x", ""),
            Some(Endpoint::Models)
        );
        assert_eq!(
            endpoint(&post, "/v1/chat/completions", "/v1"),
            Some(Endpoint::Generate)
        );
        assert_eq!(
            endpoint(&post, "/api/v1/responses", "/api/v1"),
            Some(Endpoint::Generate)
        );
        for (m, p, base) in [
            (&get, "/v1/messages", ""),
            (&post, "/v1/models", ""),
            (&post, "/v1/files", ""),
            (&post, "/api/oauth/claude_cli/create_api_key", ""),
            (&get, "/api/hello", ""),
            (&post, "/v1/messages/batches", ""),
            (&post, "/v1/../v1/messages", ""),
            (&post, "/v1//messages", ""),
            (&post, "/v1/messages%2f", ""),
            (&post, "/other/chat/completions", "/v1"),
            (&get, "/v1/models/a/b", ""),
        ] {
            assert_eq!(endpoint(m, p, base), None, "{m} {p} under {base:?}");
        }
    }

    #[test]
    fn tokens_come_from_either_header() {
        let mut h = HeaderMap::new();
        h.insert("x-api-key", HeaderValue::from_static("t1"));
        assert_eq!(
            job_token(&h),
            Some(("t1".to_string(), AuthForm::ApiKeyHeader))
        );
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, HeaderValue::from_static("Bearer t2"));
        assert_eq!(job_token(&h), Some(("t2".to_string(), AuthForm::Bearer)));
        h.insert(AUTHORIZATION, HeaderValue::from_static("Basic xx"));
        assert_eq!(job_token(&h), None);
    }
}
