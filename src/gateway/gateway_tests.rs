//! The gateway against loopback upstreams: a plain one, and a TLS one with a CA the test
//! makes (production trusts the system's roots instead).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;

use super::*;

const KEY: &str = "sk-real-account-key";

/// What the upstream saw of one request.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    api_key: Option<String>,
    authorization: Option<String>,
    beta: Option<String>,
    body: String,
}

struct Upstream {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// Released to let a held stream finish.
    release: Arc<tokio::sync::Semaphore>,
    token_requests: Arc<AtomicU64>,
    ca: Option<rustls::pki_types::CertificateDer<'static>>,
}

const SSE_START: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m1\",\"model\":\"claude-test\",\"usage\":{\"input_tokens\":100,\"output_tokens\":1,\"cache_creation_input_tokens\":20,\"cache_read_input_tokens\":30}}}\n\n";
const SSE_END: &str = "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":50}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

async fn upstream_answer(
    req: hyper::Request<Incoming>,
    seen: Arc<Mutex<Vec<Seen>>>,
    release: Arc<tokio::sync::Semaphore>,
    token_requests: Arc<AtomicU64>,
) -> hyper::Response<http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>> {
    let h = |n: &str| {
        req.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let mut s = Seen {
        path: req.uri().to_string(),
        api_key: h("x-api-key"),
        authorization: h("authorization"),
        beta: h("anthropic-beta"),
        body: String::new(),
    };
    let body = req.into_body().collect().await.unwrap().to_bytes();
    s.body = String::from_utf8_lossy(&body).into_owned();
    let path = s.path.clone();
    seen.lock().unwrap().push(s);
    let full = |ct: &'static str, text: String| {
        hyper::Response::builder()
            .header("content-type", ct)
            .header("request-id", "req_upstream_1")
            .body(Full::new(Bytes::from(text)).boxed())
            .unwrap()
    };
    if path.starts_with("/oauth/token") {
        token_requests.fetch_add(1, Ordering::SeqCst);
        // Slow enough that concurrent requests overlap the refresh.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        return full(
            "application/json",
            r#"{"access_token":"at-new","refresh_token":"rt-new","expires_in":28800,"scope":"user:inference user:profile"}"#.into(),
        );
    }
    if path.starts_with("/v1/messages?hold") {
        // First event now, the rest once the test releases it: the gateway must not wait.
        let (tx, rx) =
            tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::convert::Infallible>>(4);
        tokio::spawn(async move {
            let _ = tx.send(Ok(Frame::data(Bytes::from(SSE_START)))).await;
            let _permit = release.acquire().await;
            let _ = tx.send(Ok(Frame::data(Bytes::from(SSE_END)))).await;
        });
        let stream = tokio_stream_from(rx);
        return hyper::Response::builder()
            .header("content-type", "text/event-stream")
            .body(StreamBody::new(stream).boxed())
            .unwrap();
    }
    if path.starts_with("/v1/messages") {
        return full("text/event-stream", format!("{SSE_START}{SSE_END}"));
    }
    if path.starts_with("/v1/chat/completions") {
        return full(
            "text/event-stream",
            "data: {\"model\":\"gpt-test\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n".into(),
        );
    }
    full("application/json", r#"{"data":[]}"#.into())
}

/// An mpsc receiver as a stream of frames.
fn tokio_stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> + Send + Sync {
    let (tx2, rx2) = futures::channel::mpsc::unbounded();
    tokio::spawn(async move {
        while let Some(x) = rx.recv().await {
            if tx2.unbounded_send(x).is_err() {
                break;
            }
        }
    });
    rx2
}

impl Upstream {
    async fn start(tls: bool) -> Upstream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let release = Arc::new(tokio::sync::Semaphore::new(0));
        let token_requests = Arc::new(AtomicU64::new(0));
        let (acceptor, ca) = if tls {
            let ca_key = rcgen::KeyPair::generate().unwrap();
            let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
            let leaf_key = rcgen::KeyPair::generate().unwrap();
            let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
                .unwrap()
                .signed_by(&leaf_key, &ca)
                .unwrap();
            let key = rustls::pki_types::PrivateKeyDer::try_from(leaf_key.serialize_der()).unwrap();
            let config = rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::aws_lc_rs::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![leaf.der().clone()], key)
            .unwrap();
            (
                Some(tokio_rustls::TlsAcceptor::from(Arc::new(config))),
                Some(ca.der().clone()),
            )
        } else {
            (None, None)
        };
        let (s, r, t) = (seen.clone(), release.clone(), token_requests.clone());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (s, r, t) = (s.clone(), r.clone(), t.clone());
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let (s, r, t) = (s.clone(), r.clone(), t.clone());
                        async move {
                            Ok::<_, std::convert::Infallible>(upstream_answer(req, s, r, t).await)
                        }
                    });
                    let http = hyper::server::conn::http1::Builder::new();
                    match acceptor {
                        Some(a) => {
                            if let Ok(tls) = a.accept(stream).await {
                                let _ = http.serve_connection(TokioIo::new(tls), service).await;
                            }
                        }
                        None => {
                            let _ = http.serve_connection(TokioIo::new(stream), service).await;
                        }
                    }
                });
            }
        });
        Upstream {
            url: format!("{}://127.0.0.1:{port}", if tls { "https" } else { "http" }),
            seen,
            release,
            token_requests,
            ca,
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

pub(super) struct Fixture {
    pub dir: tempfile::TempDir,
    upstream: Upstream,
    pub gateway: Gateway,
}

pub(super) async fn fixture(tls: bool) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(tls).await;
    let mut options = GatewayOptions::new(dir.path());
    options.extra_roots.extend(upstream.ca.clone());
    options.claude_token_url = format!("{}/oauth/token", upstream.url);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let gateway = Gateway::start(listener, options).unwrap();
    std::fs::write(dir.path().join("key"), format!("{KEY}\n")).unwrap();
    Fixture {
        dir,
        upstream,
        gateway,
    }
}

impl Fixture {
    pub fn open(&self, id: &str, limit: Option<u64>, budget: Option<u64>) -> JobGrant {
        self.open_with(
            id,
            limit,
            budget,
            SecretSource::File(self.dir.path().join("key")),
            "",
        )
    }

    fn open_with(
        &self,
        id: &str,
        limit: Option<u64>,
        budget: Option<u64>,
        secret: SecretSource,
        base: &str,
    ) -> JobGrant {
        self.gateway
            .open(JobSpec {
                job_id: id.into(),
                account: "work".into(),
                upstream: upstream::UpstreamUrl::parse(&format!("{}{base}", self.upstream.url))
                    .unwrap(),
                credential: self.gateway.credential(&secret).unwrap(),
                token_limit: limit,
                budget: budget.map(|b| budget::Budget::new(self.dir.path(), "work", b)),
                log: self.dir.path().join(format!("{id}.log")),
            })
            .unwrap()
    }

    fn log(&self, id: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{id}.log"))).unwrap_or_default()
    }
}

/// A plain HTTP/1.1 client to the gateway.
pub(super) async fn send(
    url: &str,
    method: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, hyper::Response<Incoming>) {
    let client: hyper_util::client::legacy::Client<_, Full<Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http();
    let mut req = hyper::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client
        .request(req.body(Full::new(Bytes::from(body.to_string()))).unwrap())
        .await
        .unwrap();
    (resp.status().as_u16(), resp)
}

async fn text(resp: hyper::Response<Incoming>) -> String {
    String::from_utf8_lossy(&resp.into_body().collect().await.unwrap().to_bytes()).into_owned()
}

pub(super) fn messages(grant: &JobGrant, query: &str) -> (String, Vec<(&'static str, String)>) {
    (
        format!("{}/v1/messages{query}", grant.base_url),
        vec![("x-api-key", grant.token.clone())],
    )
}

#[tokio::test]
async fn forwards_with_the_real_key_meters_and_logs_without_secrets() {
    for tls in [false, true] {
        let f = fixture(tls).await;
        let grant = f.open("j1", None, None);
        let (url, h) = messages(&grant, "?beta=true");
        let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (status, resp) = send(&url, "POST", &h, r#"{"model":"m","stream":true}"#).await;
        assert_eq!(status, 200, "tls={tls}");
        assert_eq!(grant.upstream_error(), None);
        let body = text(resp).await;
        assert!(body.contains("message_stop"), "{body}");
        let seen = f.upstream.seen();
        assert_eq!(seen.len(), 1);
        assert_eq!(
            seen[0].api_key.as_deref(),
            Some(KEY),
            "the real key upstream"
        );
        assert_eq!(seen[0].path, "/v1/messages?beta=true");
        assert_eq!(seen[0].body, r#"{"model":"m","stream":true}"#);
        let u = grant.usage();
        assert_eq!(
            (
                u.requests,
                u.input_tokens,
                u.output_tokens,
                u.cache_read_tokens,
                u.cache_write_tokens
            ),
            (1, 100, 50, 30, 20)
        );
        assert_eq!(u.models["claude-test"].requests, 1);
        assert_eq!(u.tokens(), 200);
        let log = f.log("j1");
        assert!(
            log.contains("POST /v1/messages 200 model=claude-test in=100 out=50 cache_read=30 cache_write=20")
                && log.contains("request_id=req_upstream_1"),
            "{log}"
        );
        assert!(!log.contains(KEY) && !log.contains(&grant.token) && !log.contains("beta=true"));
        // An OpenAI-compatible provider: Bearer in, Bearer out.
        let oc = f.open_with(
            "j2",
            None,
            None,
            SecretSource::File(f.dir.path().join("key")),
            "/v1",
        );
        let bearer = format!("Bearer {}", oc.token);
        let (status, resp) = send(
            &format!("{}/chat/completions", oc.base_url),
            "POST",
            &[("authorization", &bearer)],
            "{}",
        )
        .await;
        assert_eq!(status, 200);
        text(resp).await;
        let seen = f.upstream.seen();
        assert_eq!(
            seen[1].authorization.as_deref(),
            Some(format!("Bearer {KEY}").as_str())
        );
        assert_eq!(seen[1].api_key, None);
        assert_eq!(oc.usage().output_tokens, 3);
    }
}

#[tokio::test]
async fn refuses_bad_tokens_other_endpoints_and_tokens_of_ended_jobs() {
    let f = fixture(false).await;
    let grant = f.open("j1", None, None);
    let url = format!("{}/v1/messages", grant.base_url);
    let (status, resp) = send(&url, "POST", &[("x-api-key", "qrgw-guess")], "{}").await;
    assert_eq!(status, 401);
    assert!(text(resp).await.contains("no running job"));
    let (status, _) = send(&url, "POST", &[], "{}").await;
    assert_eq!(status, 401);
    for (method, path) in [
        ("POST", "/v1/files"),
        ("GET", "/api/hello"),
        ("POST", "/api/oauth/claude_cli/create_api_key"),
        ("POST", "/v1/messages/batches"),
    ] {
        let (status, resp) = send(
            &format!("{}{path}", grant.base_url),
            method,
            &[("x-api-key", &grant.token)],
            "{}",
        )
        .await;
        assert_eq!(status, 403, "{method} {path}");
        assert!(text(resp).await.contains("not a model endpoint"));
    }
    let (status, _) = send(
        &format!("{}/v1/models", grant.base_url),
        "GET",
        &[("x-api-key", &grant.token)],
        "",
    )
    .await;
    assert_eq!(status, 200);
    // Only the model list reached the upstream.
    let paths: Vec<String> = f.upstream.seen().into_iter().map(|s| s.path).collect();
    assert_eq!(paths, vec!["/v1/models".to_string()]);
    let token = grant.token.clone();
    drop(grant);
    assert_eq!(f.gateway.open_jobs(), 0);
    let (status, _) = send(&url, "POST", &[("x-api-key", &token)], "{}").await;
    assert_eq!(status, 401, "a job's token is worthless once it ended");
    assert!(f.log("j1").contains("GET /api/hello refused 403"));
}

#[tokio::test]
async fn streams_each_event_as_it_comes() {
    let f = fixture(false).await;
    let grant = f.open("j1", None, None);
    let (url, h) = messages(&grant, "?hold");
    let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, resp) = send(&url, "POST", &h, "{}").await;
    assert_eq!(status, 200);
    let mut body = resp.into_body();
    // The first event arrives while the upstream still holds the rest back.
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("message_start"));
    assert_eq!(grant.usage().requests, 0, "not settled before the end");
    f.upstream.release.add_permits(1);
    let rest = body.collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&rest).contains("message_stop"));
    assert_eq!(grant.usage().output_tokens, 50);
}

/// What starts a job's commands' sandbox once its agent is up: the job's own first request,
/// as it arrives (the upstream still holds its answer), not another job's.
#[tokio::test]
async fn a_jobs_first_request_is_seen_as_it_arrives() {
    let f = fixture(false).await;
    let (one, other) = (f.open("j1", None, None), f.open("j2", None, None));
    let first = tokio::spawn(one.first_request());
    let (url, h) = messages(&other, "");
    let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, resp) = send(&url, "POST", &h, "{}").await;
    assert_eq!(status, 200);
    text(resp).await;
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(!first.is_finished(), "another job's request");

    let (url, h) = messages(&one, "?hold");
    let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, resp) = send(&url, "POST", &h, "{}").await;
    assert_eq!(status, 200);
    tokio::time::timeout(std::time::Duration::from_secs(10), first)
        .await
        .expect("seen while the answer is held")
        .unwrap();
    assert_eq!(one.usage().requests, 0, "before the request settled");
    f.upstream.release.add_permits(1);
    text(resp).await;
}

#[tokio::test]
async fn the_token_limit_refuses_the_next_request_and_fires_once() {
    let f = fixture(false).await;
    let grant = f.open("j1", Some(150), None);
    let fired = grant.limit_fired();
    let (url, h) = messages(&grant, "");
    let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, resp) = send(&url, "POST", &h, "{}").await;
    assert_eq!(status, 200);
    text(resp).await;
    assert!(
        fired.borrow().is_none(),
        "under the cap before this request"
    );
    let (status, resp) = send(&url, "POST", &h, "{}").await;
    assert_eq!(status, 400);
    let error = text(resp).await;
    assert!(
        error.contains("token limit is spent: 200 tokens used of 150"),
        "{error}"
    );
    assert!(fired.borrow().as_deref().unwrap().contains("200 tokens"));
    assert_eq!(f.upstream.seen().len(), 1, "the refused request never left");
    let u = grant.usage();
    assert_eq!((u.requests, u.refused), (1, 1));
    assert!(f.log("j1").contains("refused 400 token_limit"));
}

#[tokio::test]
async fn the_daily_budget_is_shared_by_jobs_and_kept_in_the_state_dir() {
    let f = fixture(false).await;
    let a = f.open("a", None, Some(300));
    let b = f.open("b", None, Some(300));
    for grant in [&a, &b] {
        let (url, h) = messages(grant, "");
        let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (status, resp) = send(&url, "POST", &h, "{}").await;
        assert_eq!(status, 200);
        text(resp).await;
    }
    // The count is written off the response's path; wait for it.
    let counter = budget::Budget::new(f.dir.path(), "work", 300);
    for _ in 0..200 {
        if counter.spent().unwrap() == 400 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(counter.spent().unwrap(), 400);
    // A third job of the account (a new runner would read the same file) is refused.
    let c = f.open("c", None, Some(300));
    let (url, h) = messages(&c, "");
    let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, resp) = send(&url, "POST", &h, "{}").await;
    assert_eq!(status, 400);
    let error = text(resp).await;
    assert!(
        error.contains("daily budget is spent: 400 tokens used today (UTC) of 300"),
        "{error}"
    );
}

#[tokio::test]
async fn a_claude_login_is_refreshed_once_for_concurrent_jobs_and_written_back() {
    let f = fixture(true).await;
    let creds = f.dir.path().join(".credentials.json");
    std::fs::write(
        &creds,
        r#"{"claudeAiOauth":{"accessToken":"at-old","refreshToken":"rt-old","expiresAt":1000,"scopes":["user:inference"],"subscriptionType":"max"},"other":1}"#,
    )
    .unwrap();
    let grants: Vec<JobGrant> = (0..4)
        .map(|i| {
            f.open_with(
                &format!("j{i}"),
                None,
                None,
                SecretSource::ClaudeLogin(creds.clone()),
                "",
            )
        })
        .collect();
    let sends = grants.iter().map(|g| {
        let url = format!("{}/v1/messages", g.base_url);
        let token = g.token.clone();
        async move {
            let (status, resp) = send(
                &url,
                "POST",
                &[("x-api-key", &token), ("anthropic-beta", "tools-x")],
                "{}",
            )
            .await;
            text(resp).await;
            status
        }
    });
    let statuses = futures::future::join_all(sends).await;
    assert_eq!(statuses, vec![200; 4]);
    assert_eq!(f.upstream.token_requests.load(Ordering::SeqCst), 1);
    let token_req = f
        .upstream
        .seen()
        .into_iter()
        .find(|s| s.path.starts_with("/oauth/token"))
        .unwrap();
    let sent: serde_json::Value = serde_json::from_str(&token_req.body).unwrap();
    assert_eq!(sent["grant_type"], "refresh_token");
    assert_eq!(sent["refresh_token"], "rt-old");
    assert_eq!(sent["client_id"], credentials::CLAUDE_CLIENT_ID);
    for s in f
        .upstream
        .seen()
        .iter()
        .filter(|s| s.path == "/v1/messages")
    {
        assert_eq!(s.authorization.as_deref(), Some("Bearer at-new"));
        assert_eq!(s.api_key, None);
        assert_eq!(s.beta.as_deref(), Some("tools-x,oauth-2025-04-20"));
    }
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&creds).unwrap()).unwrap();
    assert_eq!(written["claudeAiOauth"]["accessToken"], "at-new");
    assert_eq!(written["claudeAiOauth"]["refreshToken"], "rt-new");
    assert_eq!(written["claudeAiOauth"]["subscriptionType"], "max");
    assert_eq!(written["other"], 1);
    assert!(written["claudeAiOauth"]["expiresAt"].as_u64().unwrap() > 1000);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&creds).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // No temp file or lock is left beside it or in the state dir.
    let beside: Vec<_> = std::fs::read_dir(f.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with(".tmp"))
        .collect();
    assert!(beside.is_empty(), "{beside:?}");
}

#[tokio::test]
async fn an_unreadable_secret_fails_the_job_when_it_opens() {
    let f = fixture(false).await;
    let missing = f.dir.path().join("absent");
    for secret in [
        SecretSource::File(missing.clone()),
        SecretSource::ClaudeLogin(missing.clone()),
        SecretSource::AuthJson {
            file: missing.clone(),
            provider: "p".into(),
        },
    ] {
        let err = f.gateway.credential(&secret).unwrap_err();
        assert!(
            matches!(&err, CredentialError::Read { path, .. } if *path == missing),
            "{err}"
        );
        assert!(err.to_string().contains("absent"), "{err}");
    }
    std::fs::write(&missing, "  \n").unwrap();
    let err = f
        .gateway
        .credential(&SecretSource::File(missing))
        .unwrap_err();
    assert!(matches!(err, CredentialError::Empty { .. }), "{err}");
    assert!(err.to_string().contains("is empty"), "{err}");
}
