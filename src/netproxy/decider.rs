//! The decider's end of `srt proxy`'s protocol (sandbox-runtime's `docs/srt-proxy.md`).
//!
//! Frames are a 4-byte big-endian length and one strict JSON object whose `t` names it. The
//! proxy says hello, the decider answers with the allowlist, then each request (`req`) gets one
//! verdict: `allow`, or `deny` with a status and a reason. The proxy is strict about what it
//! reads (no nulls, no empty optional fields, no unknown fields) and any violation kills the
//! link, so verdicts are written from fixed shapes here. The decider never asks for bodies.
//!
//! The loop ends when the proxy closes its end; the proxy stops when this end closes.

use std::sync::Arc;
use std::time::SystemTime;

use serde::Deserialize;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::log::{self, Counts, Entry, NetLog};
use super::rules::{Decision, NetRules, Request};

/// The protocol version this decider speaks.
pub const PROTO: u32 = 1;
/// The proxy sends no frame larger than this.
const MAX_FRAME: usize = 1 << 20;
/// A deny's reason is at most this many bytes.
const MAX_REASON: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub enum DeciderError {
    #[error("reading from the proxy: {0}")]
    Read(std::io::Error),
    #[error("writing to the proxy: {0}")]
    Write(std::io::Error),
    #[error("the proxy sent a frame of {0} bytes (at most {MAX_FRAME})")]
    Oversized(usize),
    #[error("the proxy sent a frame that is not one of its messages: {0}")]
    BadFrame(serde_json::Error),
    #[error("the proxy speaks protocol {0}; this decider speaks {PROTO}")]
    Proto(u32),
    #[error("the proxy sent {0} before its hello")]
    NoHello(&'static str),
}

#[derive(Debug, Deserialize)]
#[serde(tag = "t", rename_all = "lowercase")]
enum FromProxy {
    Hello { proto: u32 },
    Req(Req),
    Body { id: u64 },
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Req {
    id: u64,
    method: String,
    host: String,
    port: u16,
    host_header: Option<String>,
    sni: Option<String>,
    path: String,
}

/// Answers the proxy on `stream` until it closes its end. `ready` fires once the hellos are
/// exchanged.
pub async fn serve(
    mut stream: tokio::net::UnixStream,
    rules: NetRules,
    log: Arc<NetLog>,
    counts: Arc<Counts>,
    ready: tokio::sync::oneshot::Sender<()>,
) -> Result<(), DeciderError> {
    let mut ready = Some(ready);
    loop {
        let Some(frame) = read_frame(&mut stream).await? else {
            return Ok(());
        };
        let msg: FromProxy = serde_json::from_slice(&frame).map_err(DeciderError::BadFrame)?;
        match msg {
            FromProxy::Hello { proto } => {
                if proto != PROTO {
                    return Err(DeciderError::Proto(proto));
                }
                let hello = json!({
                    "t": "hello",
                    "proto": PROTO,
                    "allowedDomains": rules.allowed,
                    "deniedDomains": [],
                });
                write_frame(&mut stream, &hello).await?;
                if let Some(tx) = ready.take() {
                    let _ = tx.send(());
                }
            }
            FromProxy::Req(_) | FromProxy::Body { .. } if ready.is_some() => {
                return Err(DeciderError::NoHello("a request"));
            }
            FromProxy::Req(req) => {
                let decision = rules.decide(&Request {
                    method: &req.method,
                    host: &req.host,
                    port: req.port,
                    host_header: req.host_header.as_deref(),
                    sni: req.sni.as_deref(),
                });
                write_frame(&mut stream, &verdict(req.id, &decision)).await?;
                log::count(&counts, &decision);
                log.record(
                    SystemTime::now(),
                    &Entry {
                        method: &req.method,
                        host: &req.host,
                        port: req.port,
                        path: &req.path,
                    },
                    &decision,
                );
            }
            // Bodies come only after a need_body, which this decider never sends.
            FromProxy::Body { id } => tracing::warn!(id, "the proxy sent an unasked-for body"),
        }
    }
}

/// The verdict frame for `decision`, in the exact shape the proxy accepts.
pub fn verdict(id: u64, decision: &Decision) -> serde_json::Value {
    match decision {
        Decision::Allow => json!({"t": "verdict", "id": id, "action": "allow"}),
        Decision::Deny { status, reason } => json!({
            "t": "verdict",
            "id": id,
            "action": "deny",
            "status": (*status).clamp(400, 599),
            "reason": refusal_body(reason),
        }),
    }
}

/// The body the client gets with a refusal (the proxy sends the verdict's reason as it is):
/// one line of JSON whose `error` names the rule. npm prints a registry's `error` with the
/// status (`403 Forbidden - PUT https://… - quest-runner refused this request: read_only: …`),
/// other clients show the text as it is, and a 403 is an answer no client retries — so a
/// refused command fails at once and says why.
pub(super) fn refusal_body(reason: &str) -> String {
    let reason = clean_reason(reason);
    let mut body =
        json!({ "error": format!("quest-runner refused this request: {reason}") }).to_string();
    // JSON escapes can lengthen it past the limit: the bare reason then, which always fits.
    if body.len() > MAX_REASON {
        body = reason;
    }
    body
}

/// Non-empty, no control characters, at most [`MAX_REASON`] bytes: what the proxy accepts.
fn clean_reason(reason: &str) -> String {
    let mut out: String = reason
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if out.trim().is_empty() {
        out = "refused".into();
    }
    while out.len() > MAX_REASON {
        out.pop();
    }
    out
}

async fn read_frame(stream: &mut tokio::net::UnixStream) -> Result<Option<Vec<u8>>, DeciderError> {
    let mut len = [0u8; 4];
    match stream.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(DeciderError::Read(e)),
    }
    let n = u32::from_be_bytes(len) as usize;
    if n > MAX_FRAME {
        return Err(DeciderError::Oversized(n));
    }
    let mut body = vec![0; n];
    stream
        .read_exact(&mut body)
        .await
        .map_err(DeciderError::Read)?;
    Ok(Some(body))
}

async fn write_frame(
    stream: &mut tokio::net::UnixStream,
    msg: &serde_json::Value,
) -> Result<(), DeciderError> {
    let body = msg.to_string().into_bytes();
    let mut frame = Vec::with_capacity(body.len() + 4);
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    stream.write_all(&frame).await.map_err(DeciderError::Write)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_have_the_proxys_shapes() {
        assert_eq!(
            verdict(3, &Decision::Allow).to_string(),
            r#"{"action":"allow","id":3,"t":"verdict"}"#
        );
        let v = verdict(
            4,
            &Decision::Deny {
                status: 200,
                reason: "a\nb".into(),
            },
        );
        assert_eq!(v["status"], 400);
        let body: serde_json::Value = serde_json::from_str(v["reason"].as_str().unwrap()).unwrap();
        assert_eq!(body["error"], "quest-runner refused this request: a b");
        let v = verdict(
            5,
            &Decision::Deny {
                status: 403,
                reason: String::new(),
            },
        );
        assert!(v["reason"]
            .as_str()
            .unwrap()
            .ends_with("request: refused\"}"));
        // Never past the proxy's limit, however the reason escapes.
        let v = verdict(
            6,
            &Decision::Deny {
                status: 403,
                reason: "\"".repeat(2000),
            },
        );
        let reason = v["reason"].as_str().unwrap();
        assert!(reason.len() <= MAX_REASON && !reason.chars().any(char::is_control));
    }
}
