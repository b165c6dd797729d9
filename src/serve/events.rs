//! Job events for an operator's systems (`events` in the config): when a job is queued
//! (`submit`, through a helper of its own that outlives it: see [`deliver_detached`]), when it
//! starts and when it ends (`serve`), the runner POSTs a JSON [`Event`] to each webhook, signed with HMAC-SHA256 over the
//! body (`X-Quest-Signature-256: sha256=<hex>`, as GitHub's `X-Hub-Signature-256`), and runs
//! the configured command with the event on stdin.
//!
//! A job never waits for its events: each receiver has its own task fed through a bounded
//! channel, delivering in order; a full channel drops the event. A webhook is tried
//! [`ATTEMPTS`] times, each bounded by [`ATTEMPT_TIMEOUT`], with a backoff between; what is
//! not delivered (or a command that fails or outlasts its timeout) is logged and counted in
//! `quest_runner_events_failed_total`. The event carries the job's result fields, never its
//! prompt, transcript or any secret.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::metrics::Metrics;
use crate::config::{EventsConfig, Webhook};
use crate::gateway::upstream::HttpClient;
use crate::job::{Job, Trust};
use crate::run::JobResult;

/// The signature header.
pub const SIGNATURE_HEADER: &str = "x-quest-signature-256";
/// Tries of one event at one webhook.
pub const ATTEMPTS: u32 = 3;
/// How long one try may take, connecting to the whole answer.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// The wait before the second try; doubled before each later one.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// Events waiting for one receiver before more are dropped.
const QUEUE: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum EventsError {
    #[error("events.webhooks[{index}].secret_file: reading {path}: {source}")]
    Secret {
        index: usize,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("events.webhooks[{index}].secret_file: {path} is empty")]
    EmptySecret { index: usize, path: String },
    #[error("events.webhooks: the HTTP client: {0}")]
    Client(#[source] crate::gateway::GatewayError),
}

/// Why one try at a receiver failed: logged, and counted once a webhook's tries run out.
#[derive(Debug, thiserror::Error)]
enum Undelivered {
    #[error("the request: {0}")]
    Request(#[source] http::Error),
    #[error("sending: {0}")]
    Send(#[source] hyper_util::client::legacy::Error),
    #[error("the receiver answered {0}")]
    Status(http::StatusCode),
    #[error("no answer within {0:?}")]
    NoAnswer(Duration),
    #[error("no command")]
    NoCommand,
    #[error("starting {program}: {source}")]
    Start {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("no stdin")]
    NoStdin,
    #[error("it exited with {0}")]
    Exited(std::process::ExitStatus),
    #[error("waiting for it: {0}")]
    Wait(#[source] std::io::Error),
    #[error("it ran longer than {0:?}; killed")]
    Killed(Duration),
}

/// What happened to a job.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Queued,
    Started,
    Ended,
}

/// One event: the job's identity and, when it ended, its result's fields.
#[derive(Debug, Clone, Serialize)]
pub struct Event<'a> {
    pub event: Kind,
    /// Seconds since the Unix epoch, when the event was made.
    pub time: u64,
    pub job_id: &'a str,
    pub repo: &'a str,
    pub rev: &'a str,
    pub agent: &'static str,
    pub account: &'a str,
    pub trust: Trust,
    pub attempt: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Ended<'a>>,
}

/// The result of an ended job, without its transcript or its files' paths.
#[derive(Debug, Clone, Serialize)]
pub struct Ended<'a> {
    pub outcome: &'static str,
    pub message: Option<&'a str>,
    pub exit_status: Option<i32>,
    pub signal: Option<i32>,
    pub duration_ms: u64,
    pub head: Option<&'a str>,
    pub commits: &'a [String],
    pub uncommitted: &'a [String],
    pub limit_fired: Option<&'a str>,
    pub disk_used: Option<u64>,
    pub cpu_throttled_ms: Option<u64>,
    pub usage: Option<&'a crate::gateway::Usage>,
    /// The push's outcome: the pushed ref and remote, or its error.
    pub push: Option<&'a crate::deliver::PushRecord>,
}

impl<'a> Event<'a> {
    pub fn started(job: &'a Job, attempt: u32) -> Event<'a> {
        Event {
            event: Kind::Started,
            time: now(),
            job_id: &job.id,
            repo: &job.repo,
            rev: &job.rev,
            agent: job.agent.name(),
            account: &job.account,
            trust: job.trust,
            attempt,
            result: None,
        }
    }

    /// The job as `submit` queued it, before any attempt.
    pub fn queued(job: &'a Job) -> Event<'a> {
        Event {
            event: Kind::Queued,
            ..Event::started(job, 0)
        }
    }

    pub fn ended(job: &'a Job, attempt: u32, r: &'a JobResult) -> Event<'a> {
        let result = Ended {
            outcome: r.outcome.as_str(),
            message: r.message.as_deref(),
            exit_status: r.exit_status,
            signal: r.signal,
            duration_ms: r.duration_ms,
            head: r.head.as_deref(),
            commits: &r.commits,
            uncommitted: &r.uncommitted,
            limit_fired: r.limit_fired.as_deref(),
            disk_used: r.disk_used,
            cpu_throttled_ms: r.cpu_throttled_ms,
            usage: r.usage.as_ref(),
            push: r.push.as_ref(),
        };
        Event {
            event: Kind::Ended,
            result: Some(result),
            ..Event::started(job, attempt)
        }
    }
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `sha256=<hex>` of HMAC-SHA256 over `body` with `secret`: the signature header's value.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, secret);
    let tag = aws_lc_rs::hmac::sign(&key, body);
    let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

/// Where one event goes: a receiver's channel, named for the log.
struct Sink {
    what: String,
    tx: mpsc::Sender<Arc<Bytes>>,
}

/// The receivers' tasks, fed by [`Events::send`].
pub struct Events {
    sinks: Vec<Sink>,
    metrics: Option<Arc<Metrics>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Events {
    /// Reads the webhooks' secrets and starts a task per receiver; `None` when the config
    /// names none.
    pub fn start(
        config: &EventsConfig,
        metrics: Option<Arc<Metrics>>,
    ) -> Result<Option<Events>, EventsError> {
        if !config.is_on() {
            return Ok(None);
        }
        let (mut sinks, mut tasks) = (Vec::new(), Vec::new());
        // One HTTP client for every webhook, made with the first.
        let mut shared_client = None;
        for (index, hook) in config.webhooks.iter().enumerate() {
            let secret = read_secret(index, &hook.secret_file)?;
            let (tx, rx) = mpsc::channel(QUEUE);
            let client = match &shared_client {
                Some(client) => Clone::clone(client),
                None => {
                    let client =
                        crate::gateway::upstream::client(&[]).map_err(EventsError::Client)?;
                    shared_client.insert(client).clone()
                }
            };
            let webhook = WebhookTask {
                hook: hook.clone(),
                secret,
                client,
                metrics: metrics.clone(),
            };
            tasks.push(tokio::spawn(webhook.run(rx)));
            sinks.push(Sink {
                what: format!("webhook {}", hook.url),
                tx,
            });
        }
        if !config.command.is_empty() {
            let (tx, rx) = mpsc::channel(QUEUE);
            let command = CommandTask {
                argv: config.command.clone(),
                timeout: config.timeout(),
                metrics: metrics.clone(),
            };
            tasks.push(tokio::spawn(command.run(rx)));
            sinks.push(Sink {
                what: "the events command".into(),
                tx,
            });
        }
        Ok(Some(Events {
            sinks,
            metrics,
            tasks,
        }))
    }

    /// Hands `event` to every receiver without waiting.
    pub fn send(&self, event: &Event<'_>) {
        match encode(event) {
            Ok(body) => self.send_encoded(event.job_id, Bytes::from(body)),
            Err(e) => tracing::error!("encoding a job event: {e}"),
        }
    }

    /// Waits until every receiver has had every event handed to it (delivered, or given up
    /// on after its tries), then stops them.
    pub async fn finish(self) {
        drop(self.sinks);
        for task in self.tasks {
            let _ = task.await;
        }
    }

    fn send_encoded(&self, job_id: &str, body: Bytes) {
        let body = Arc::new(body);
        for sink in &self.sinks {
            if sink.tx.try_send(body.clone()).is_err() {
                tracing::warn!(job = job_id, "{} is behind: event dropped", sink.what);
                failed(&self.metrics, "dropped");
            }
        }
    }
}

/// `event` as its receivers get it: JSON, with what could steer a terminal or reorder what it
/// shows (a job's message, its model's name: a chat a webhook posts to is read by people) as
/// JSON escapes (`crate::util::text::json_shown`).
fn encode(event: &Event<'_>) -> serde_json::Result<Vec<u8>> {
    serde_json::to_string(event).map(|json| crate::util::text::json_shown(&json).into_bytes())
}

/// Hands `event` to a helper process of the runner's (`quest-runner deliver-event`, `argv`
/// up to its subcommand) that delivers it as `serve` would and then exits: `submit` returns at
/// once, and a receiver that is slow or down costs it nothing. The helper's log goes to `log`.
pub fn deliver_detached(
    argv: &[std::ffi::OsString],
    event: &Event<'_>,
    log: &Path,
) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::process::CommandExt;
    let body = encode(event).map_err(std::io::Error::other)?;
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| std::io::Error::other("no program"))?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let mut child = std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        // Its own group: a Ctrl-C meant for the caller's command does not reach it.
        .process_group(0)
        .spawn()?;
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("no stdin"))?;
    stdin.write_all(&body)?;
    Ok(())
}

/// The helper's side of [`deliver_detached`]: `body` (an encoded event) to every receiver of
/// `config`, each with its tries, then return.
pub async fn deliver_now(config: &EventsConfig, body: Vec<u8>) -> Result<(), EventsError> {
    let Some(events) = Events::start(config, None)? else {
        return Ok(());
    };
    let job_id = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["job_id"].as_str().map(str::to_string))
        .unwrap_or_default();
    events.send_encoded(&job_id, Bytes::from(body));
    events.finish().await;
    Ok(())
}

fn failed(metrics: &Option<Arc<Metrics>>, why: &'static str) {
    if let Some(m) = metrics {
        m.event_failed(why);
    }
}

/// The file's bytes without a final newline.
fn read_secret(index: usize, path: &Path) -> Result<zeroize::Zeroizing<Vec<u8>>, EventsError> {
    let shown = path.display().to_string();
    let mut bytes = std::fs::read(path).map_err(|source| EventsError::Secret {
        index,
        path: shown.clone(),
        source,
    })?;
    while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        bytes.pop();
    }
    if bytes.is_empty() {
        return Err(EventsError::EmptySecret { index, path: shown });
    }
    Ok(zeroize::Zeroizing::new(bytes))
}

struct WebhookTask {
    hook: Webhook,
    secret: zeroize::Zeroizing<Vec<u8>>,
    client: HttpClient,
    metrics: Option<Arc<Metrics>>,
}

impl WebhookTask {
    async fn run(self, mut rx: mpsc::Receiver<Arc<Bytes>>) {
        while let Some(body) = rx.recv().await {
            let signature = signature(&self.secret, &body);
            let mut backoff = FIRST_BACKOFF;
            for attempt in 1..=ATTEMPTS {
                let tried = tokio::time::timeout(ATTEMPT_TIMEOUT, self.post(&body, &signature));
                let why = match tried.await {
                    Ok(Ok(())) => break,
                    Ok(Err(why)) => why,
                    Err(_) => Undelivered::NoAnswer(ATTEMPT_TIMEOUT),
                };
                if attempt == ATTEMPTS {
                    tracing::warn!(url = %self.hook.url, "job event not delivered after {ATTEMPTS} tries: {why}");
                    failed(&self.metrics, "webhook");
                    break;
                }
                tracing::info!(url = %self.hook.url, attempt, "job event: {why}; trying again in {backoff:?}");
                tokio::time::sleep(backoff).await;
                backoff *= 2;
            }
        }
    }

    /// One POST; a 2xx answer is delivery.
    async fn post(&self, body: &Bytes, signature: &str) -> Result<(), Undelivered> {
        let request = http::Request::post(&self.hook.url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::USER_AGENT, "quest-runner")
            .header(SIGNATURE_HEADER, signature)
            .body(Full::new(body.clone()).map_err(|e| match e {}).boxed())
            .map_err(Undelivered::Request)?;
        let answer = self
            .client
            .request(request)
            .await
            .map_err(Undelivered::Send)?;
        let status = answer.status();
        // Read to the end, so the connection can be used again.
        let _ = answer.into_body().collect().await;
        if status.is_success() {
            Ok(())
        } else {
            Err(Undelivered::Status(status))
        }
    }
}

struct CommandTask {
    argv: Vec<String>,
    timeout: Duration,
    metrics: Option<Arc<Metrics>>,
}

impl CommandTask {
    async fn run(self, mut rx: mpsc::Receiver<Arc<Bytes>>) {
        while let Some(body) = rx.recv().await {
            if let Err(why) = self.run_once(&body).await {
                tracing::warn!(command = ?self.argv, "the events command: {why}");
                failed(&self.metrics, "command");
            }
        }
    }

    /// Runs the command with `body` on stdin, killing it at the timeout.
    async fn run_once(&self, body: &[u8]) -> Result<(), Undelivered> {
        let (program, args) = self.argv.split_first().ok_or(Undelivered::NoCommand)?;
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| Undelivered::Start {
                program: program.clone(),
                source,
            })?;
        let mut stdin = child.stdin.take().ok_or(Undelivered::NoStdin)?;
        let run = async {
            // A command that does not read its stdin still gets its exit judged.
            let _ = stdin.write_all(body).await;
            drop(stdin);
            child.wait().await
        };
        match tokio::time::timeout(self.timeout, run).await {
            Ok(Ok(status)) if status.success() => Ok(()),
            Ok(Ok(status)) => Err(Undelivered::Exited(status)),
            Ok(Err(e)) => Err(Undelivered::Wait(e)),
            Err(_) => Err(Undelivered::Killed(self.timeout)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_is_githubs_hmac_sha256() {
        // RFC 4231 test case 2.
        let sig = signature(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            sig,
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    /// The ended event has the push's outcome (issue 29) and the result's fields, never the
    /// prompt or the transcript's path.
    #[test]
    fn the_ended_event_has_the_pushed_ref_and_not_the_prompt() {
        let job = crate::run::result::tests::job();
        let mut result = JobResult::new(&job);
        result.head = Some("c0ffee".into());
        result.transcript = Some("/state/jobs/j1/transcript.jsonl".into());
        result.push = Some(crate::deliver::PushRecord {
            remote: "https://git.example.org/r.git".into(),
            branch: "refs/heads/quest/j1".into(),
            commit: "c0ffee".into(),
            pushed: true,
            error: None,
        });
        let v = serde_json::to_value(Event::ended(&job, 2, &result)).unwrap();
        assert_eq!(v["event"], "ended");
        assert_eq!(v["attempt"], 2);
        assert_eq!(v["result"]["head"], "c0ffee");
        assert_eq!(v["result"]["push"]["branch"], "refs/heads/quest/j1");
        assert_eq!(v["result"]["push"]["pushed"], true);
        let text = v.to_string();
        assert!(
            !text.contains("transcript") && !text.contains("\"prompt\""),
            "{text}"
        );
        let started = serde_json::to_value(Event::started(&job, 1)).unwrap();
        assert!(started.get("result").is_none(), "{started}");
    }

    /// A job's text reaches receivers with bidi controls and C1 controls as JSON escapes: the
    /// same data, nothing that reorders what a person reading a posted event sees (issue 40).
    #[test]
    fn an_events_job_text_is_escaped_as_json() {
        let job = crate::run::result::tests::job();
        let mut result = JobResult::new(&job);
        let message = "done \u{202e}gnp.exe\u{2067} \u{9d}8;;x\u{9c}\u{200b}";
        result.message = Some(message.into());
        let body = String::from_utf8(encode(&Event::ended(&job, 1, &result)).unwrap()).unwrap();
        assert!(!body.chars().any(crate::util::text::is_unsafe), "{body:?}");
        assert!(body.contains("\\u202e"), "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["result"]["message"], message);
    }
}
