//! Job events (`events` in the config) end to end: a real `serve` runs real jobs (refused
//! at once, their agent's binary missing, as tests/suite/queue_entries.rs does: the ended event of
//! a failed job is an ended event) and loopback receivers on 127.0.0.1 check what arrives:
//! the HMAC-SHA256 signature, computed here independently from the secret; a 500 retried and
//! the event delivered once; a receiver that accepts and never answers does not hold the job.

use crate::support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest, Sha256};
use support::serve::{Serve, NO_AGENT};
use support::{free_port, get, unique_token, Repo, Runner};

const SECRET: &str = "webhook-secret-3f9a";
const API_KEY: &str = "sk-test-events-71c2";

/// HMAC-SHA256 (RFC 2104) from sha2 alone: not the runner's code.
fn hmac_sha256_hex(key: &[u8], body: &[u8]) -> String {
    let mut block = [0u8; 64];
    block[..key.len()].copy_from_slice(key);
    let pad = |b: u8| block.iter().map(|k| k ^ b).collect::<Vec<u8>>();
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(body)
        .finalize();
    let outer = Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize();
    outer.iter().map(|b| format!("{b:02x}")).collect()
}

/// One request a receiver read, and the status it answered (None: it never did).
#[derive(Debug, Clone)]
struct Received {
    signature: Option<String>,
    body: Vec<u8>,
    answered: Option<u16>,
}

impl Received {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// A loopback HTTP receiver: answers each request with the next status of `script` (the
/// last repeats); `None` in it means: read the request and never answer.
struct Receiver {
    addr: SocketAddr,
    got: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    fn start(script: Vec<Option<u16>>) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let got = Arc::new(Mutex::new(Vec::new()));
        let seen = got.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for (n, stream) in listener.incoming().enumerate() {
                let Ok(stream) = stream else { return };
                let status = script[n.min(script.len() - 1)];
                if let Some(kept) = serve_one(stream, status, &seen) {
                    held.push(kept);
                }
            }
        });
        Receiver { addr, got }
    }

    fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    fn got(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    /// Waits until `n` requests have arrived.
    fn wait_for(&self, n: usize, limit: Duration, log: &dyn Fn() -> String) -> Vec<Received> {
        let deadline = Instant::now() + limit;
        while self.got().len() < n {
            assert!(
                Instant::now() < deadline,
                "{} request(s) of {n} in {limit:?}: {:?}\n{}",
                self.got().len(),
                self.got(),
                log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.got()
    }
}

/// Reads one request and answers `status` (closing), or keeps the connection unanswered.
fn serve_one(
    stream: TcpStream,
    status: Option<u16>,
    seen: &Mutex<Vec<Received>>,
) -> Option<TcpStream> {
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let (mut length, mut signature) = (0usize, None);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').unwrap_or((line, ""));
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().ok()?,
            "x-quest-signature-256" => signature = Some(value.trim().to_string()),
            _ => {}
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    seen.lock().unwrap().push(Received {
        signature,
        body,
        answered: status,
    });
    let Some(code) = status else {
        return Some(stream);
    };
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 {code} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    None
}

/// Sets the config's `events`.
fn set_events(runner: &Runner, events: Value) {
    let path = runner.state().join("config.json");
    let mut config: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    config["events"] = events;
    std::fs::write(&path, config.to_string()).unwrap();
}

/// A state dir whose config has one Claude account, a webhook secret file, and a repository.
fn setup() -> (Runner, tempfile::TempDir, Repo, String) {
    let runner = Runner::new();
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("anthropic-key");
    std::fs::write(&key, API_KEY).unwrap();
    std::fs::write(keys.path().join("webhook-secret"), format!("{SECRET}\n")).unwrap();
    let config = serde_json::json!({
        "nix": {"options": {"substituters": ""}},
        "concurrency": 1,
        "accounts": {"main": {"agent": "claude", "api_key_file": key}},
    });
    std::fs::write(runner.state().join("config.json"), config.to_string()).unwrap();
    let repo = Repo::new();
    let rev = repo.commit(&[("README.md", "x")]);
    (runner, keys, repo, rev)
}

fn secret_file(keys: &tempfile::TempDir) -> PathBuf {
    keys.path().join("webhook-secret")
}

/// Drops job `id` into the directory queue, its prompt `prompt`.
fn drop_job(runner: &Runner, repo: &Repo, rev: &str, id: &str, prompt: &str) {
    let text = serde_json::json!({
        "id": id, "repo": repo.src().to_string_lossy(), "rev": rev, "trust": "trusted",
        "agent": "claude", "account": "main", "prompt": prompt,
    });
    let queue = runner.state().join("queue");
    std::fs::create_dir_all(&queue).unwrap();
    std::fs::write(queue.join(".incoming"), text.to_string()).unwrap();
    std::fs::rename(queue.join(".incoming"), queue.join(format!("{id}.json"))).unwrap();
}

/// The job's `show` once it is done, within `limit`.
fn wait_done(runner: &Runner, id: &str, serve: &Serve, limit: Duration) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let out = runner.command().args(["show", id]).output().unwrap();
        if out.status.success() {
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            // A job refused at once ends `failed`.
            if v["state"] == "done" || v["state"] == "failed" {
                return v;
            }
        }
        assert!(
            Instant::now() < deadline,
            "job {id} not ended in {limit:?}\n{}",
            serve.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn events_are_signed_with_the_secret_and_carry_the_result_not_the_prompt() {
    let receiver = Receiver::start(vec![Some(200)]);
    let dir = tempfile::tempdir().unwrap();
    let hooked = dir.path().join("hook.out");
    // Slower than the webhook: the `ended` event is still the command's when serve is told to
    // stop, and must reach it all the same.
    let script = format!(
        "sleep 1; cat >> {}; echo >> {}",
        hooked.display(),
        hooked.display()
    );
    let (runner, keys, repo, rev) = setup();
    set_events(
        &runner,
        serde_json::json!({
            "webhooks": [{"url": receiver.url(), "secret_file": secret_file(&keys)}],
            "command": ["/bin/sh", "-c", script],
            "timeout": "5s",
        }),
    );
    let mut serve = Serve::start(&runner, Path::new(NO_AGENT), dir.path());
    let prompt = format!("PROMPT-{}", unique_token());
    drop_job(&runner, &repo, &rev, "signed", &prompt);
    let got = receiver.wait_for(2, Duration::from_secs(30), &|| serve.log());
    serve.stop();
    for r in &got {
        let want = format!("sha256={}", hmac_sha256_hex(SECRET.as_bytes(), &r.body));
        assert_eq!(r.signature.as_deref(), Some(want.as_str()), "{r:?}");
        let text = String::from_utf8_lossy(&r.body);
        for secret in [SECRET, API_KEY, &prompt] {
            assert!(!text.contains(secret), "{secret} in the event: {text}");
        }
    }
    let kinds: Vec<Value> = got.iter().map(|r| r.json()["event"].clone()).collect();
    assert_eq!(kinds, ["started", "ended"], "{got:?}");
    let ended = got[1].json();
    assert_eq!(ended["job_id"], "signed");
    assert_eq!(ended["rev"], rev.as_str());
    assert_eq!(ended["result"]["outcome"], "refused", "{ended}");
    assert!(ended["result"].get("push").is_some(), "{ended}");
    assert!(ended["result"].get("transcript").is_none(), "{ended}");
    // A wrong secret would not match.
    let forged = format!("sha256={}", hmac_sha256_hex(b"other", &got[1].body));
    assert_ne!(got[1].signature.as_deref(), Some(forged.as_str()));
    let hooked = std::fs::read_to_string(&hooked).unwrap();
    let lines: Vec<Value> = hooked
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{hooked}");
    assert_eq!(lines[1]["event"], "ended");
    println!(
        "signature verified: {}",
        got[1].signature.as_deref().unwrap_or("")
    );
    println!("ended event: {ended}");
    println!("the command read {} events on stdin", lines.len());
}

#[test]
fn a_500_is_retried_and_the_event_delivered_once() {
    // The first request fails with a 500; every later one is accepted.
    let receiver = Receiver::start(vec![Some(500), Some(200)]);
    let (runner, keys, repo, rev) = setup();
    set_events(
        &runner,
        serde_json::json!({"webhooks": [{"url": receiver.url(), "secret_file": secret_file(&keys)}]}),
    );
    let mut serve = Serve::start(&runner, Path::new(NO_AGENT), keys.path());
    drop_job(&runner, &repo, &rev, "retried", "Do nothing.");
    let got = receiver.wait_for(3, Duration::from_secs(30), &|| serve.log());
    // Nothing more comes: each event was delivered once.
    std::thread::sleep(Duration::from_secs(3));
    serve.stop();
    let got_now = receiver.got();
    let seen: Vec<(String, Option<u16>)> = got_now
        .iter()
        .map(|r| (r.json()["event"].as_str().unwrap().to_string(), r.answered))
        .collect();
    let want = [
        ("started".to_string(), Some(500)),
        ("started".to_string(), Some(200)),
        ("ended".to_string(), Some(200)),
    ];
    assert_eq!(seen, want, "{got:?}\n{}", serve.log());
    assert_eq!(
        got_now[0].body, got_now[1].body,
        "the retry sends the same event"
    );
    let log = serve.log();
    assert!(log.contains("500"), "{log}");
    println!("requests (event, answer): {seen:?}");
}

#[test]
fn a_receiver_that_never_answers_does_not_hold_the_job() {
    let receiver = Receiver::start(vec![None]);
    let (runner, keys, repo, rev) = setup();
    set_events(
        &runner,
        serde_json::json!({"webhooks": [{"url": receiver.url(), "secret_file": secret_file(&keys)}]}),
    );
    let mut serve = Serve::start(&runner, Path::new(NO_AGENT), keys.path());
    let started = Instant::now();
    drop_job(&runner, &repo, &rev, "held", "Do nothing.");
    // One try at the webhook alone takes 5 s; the job is done well before.
    let shown = wait_done(&runner, "held", &serve, Duration::from_secs(4));
    let took = started.elapsed();
    // The first try may reach the receiver after the job's end (the delivery is queued, and
    // a loaded host runs it late); it never answers it, so no second try comes for 5 s.
    let got = receiver.wait_for(1, Duration::from_secs(4), &|| serve.log());
    assert_eq!(
        got.len(),
        1,
        "the receiver still holds the first try: {got:?}"
    );
    assert_eq!(got[0].json()["event"], "started");
    assert_eq!(shown["result"]["outcome"], "refused", "{shown}");
    // A second job is not held either.
    let second = Instant::now();
    drop_job(&runner, &repo, &rev, "held2", "Do nothing.");
    wait_done(&runner, "held2", &serve, Duration::from_secs(4));
    let took2 = second.elapsed();
    let stopped = serve.stop();
    println!(
        "job done {took:?} after it was queued, a second in {took2:?}, with the receiver \
         holding its first request; serve stopped {stopped:?} after SIGTERM"
    );
}

/// `submit` sends the `queued` event, signed, through a helper of its own: it returns at once,
/// though one receiver reads the request and never answers, and the other receiver gets it.
#[test]
fn submit_sends_the_queued_event_without_waiting_for_a_receiver() {
    let (runner, keys, repo, rev) = setup();
    let hanging = Receiver::start(vec![None]);
    let answering = Receiver::start(vec![Some(200)]);
    set_events(
        &runner,
        serde_json::json!({"webhooks": [
            {"url": hanging.url(), "secret_file": secret_file(&keys)},
            {"url": answering.url(), "secret_file": secret_file(&keys)},
        ]}),
    );
    let job = keys.path().join("job.json");
    let text = serde_json::json!({
        "repo": repo.src().to_string_lossy(), "rev": rev, "trust": "trusted",
        "agent": "claude", "account": "main", "prompt": "PROMPT-not-in-the-event",
    });
    std::fs::write(&job, text.to_string()).unwrap();
    let out = runner.command().arg("submit").arg(&job).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    // submit has exited; the hanging receiver gets the request afterwards and never answers.
    let log = || std::fs::read_to_string(runner.state().join("events.log")).unwrap_or_default();
    let held = hanging.wait_for(1, Duration::from_secs(20), &log);
    assert_eq!(held[0].answered, None);
    let got = answering.wait_for(1, Duration::from_secs(20), &log);
    let event = got[0].json();
    assert_eq!(event["event"], "queued", "{event}");
    assert_eq!(event["job_id"], id.as_str());
    assert_eq!(event["attempt"], 0);
    let want = format!(
        "sha256={}",
        hmac_sha256_hex(SECRET.as_bytes(), &got[0].body)
    );
    assert_eq!(got[0].signature.as_deref(), Some(want.as_str()));
    assert!(!String::from_utf8_lossy(&got[0].body).contains("PROMPT-not-in-the-event"));
    println!("queued event: {event}");
}

/// A receiver that answers every try with a 500: each event is tried three times and then
/// counted as not delivered, in the metrics `serve` exports.
#[test]
fn an_event_never_delivered_is_counted_in_the_metrics() {
    let receiver = Receiver::start(vec![Some(500)]);
    let (runner, keys, repo, rev) = setup();
    set_events(
        &runner,
        serde_json::json!({"webhooks": [{"url": receiver.url(), "secret_file": secret_file(&keys)}]}),
    );
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let path = runner.state().join("config.json");
    let mut config: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    config["metrics"] = serde_json::json!({"listen": addr.to_string()});
    std::fs::write(&path, config.to_string()).unwrap();
    let mut serve = Serve::start(&runner, Path::new(NO_AGENT), keys.path());
    drop_job(&runner, &repo, &rev, "undelivered", "Do nothing.");
    // started and ended, three tries each (1 s, then 2 s apart).
    receiver.wait_for(6, Duration::from_secs(40), &|| serve.log());
    let series = r#"quest_runner_events_failed_total{kind="webhook"}"#;
    let deadline = Instant::now() + Duration::from_secs(10);
    let counted = loop {
        let (_, scrape) = get(addr, "/metrics").unwrap_or_default();
        let value = scrape
            .lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse::<f64>().ok());
        if value == Some(2.0) || Instant::now() > deadline {
            break value;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    serve.stop();
    assert_eq!(counted, Some(2.0), "{}", serve.log());
    assert_eq!(receiver.got().len(), 6, "no fourth try");
    println!("{series} {}", counted.unwrap_or_default());
}
