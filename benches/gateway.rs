//! The model gateway's cost per request: the same kept-alive client sends the same streamed
//! Messages request to the scripted model directly and through the gateway (token swap, route
//! check, metering, model log), alternating, in one run. Prints the median time to the first
//! body byte and to the last, each way, and what the gateway adds (target: under 1 ms at the
//! median for both). No assertion on time: the figures are for reading.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use quest_runner::gateway::{
    account::SecretSource, upstream::UpstreamUrl, Gateway, GatewayOptions, JobSpec,
};
use quest_runner_selftest::model_server::ModelServer;

const ROUNDS: usize = 3;
const PER_ROUND: usize = 200;

type Client = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    Full<Bytes>,
>;

/// One request: (time to the first body byte, time to the end).
async fn once(client: &Client, url: &str, key: &str) -> (Duration, Duration) {
    let body = r#"{"model":"scripted","stream":true,"max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#;
    let req = hyper::Request::post(url)
        .header("x-api-key", key)
        .header("content-type", "application/json")
        .header("anthropic-version", "2023-06-01")
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .expect("request");
    let started = Instant::now();
    let resp = client.request(req).await.expect("response");
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut first = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.expect("body");
        if frame.data_ref().is_some_and(|d| !d.is_empty()) && first.is_none() {
            first = Some(started.elapsed());
        }
    }
    let total = started.elapsed();
    (first.unwrap_or(total), total)
}

/// This process's resident memory, kB.
fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = ModelServer::start(Vec::new()).expect("scripted model");
    let key_file = dir.path().join("key");
    std::fs::write(&key_file, "sk-bench").expect("key");
    let before = rss_kb();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let gateway = Gateway::start(listener, GatewayOptions::new(dir.path())).expect("gateway");
    let started = rss_kb();
    let grant = gateway
        .open(JobSpec {
            job_id: "bench".into(),
            account: "bench".into(),
            upstream: UpstreamUrl::parse(&server.base_url()).expect("url"),
            credential: gateway
                .credential(&SecretSource::File(key_file))
                .expect("credential"),
            token_limit: None,
            budget: None,
            log: dir.path().join("model.log"),
        })
        .expect("grant");
    let direct = format!("{}/v1/messages?beta=true", server.base_url());
    let via = format!("{}/v1/messages?beta=true", grant.base_url);
    let client: Client =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http();
    // Warm both paths' connections.
    for _ in 0..20 {
        once(&client, &direct, "sk-bench").await;
        once(&client, &via, &grant.token).await;
    }
    println!("gateway: {PER_ROUND} streamed Messages requests each way per round, alternating, kept-alive");
    for round in 1..=ROUNDS {
        let (mut d_first, mut d_total, mut g_first, mut g_total) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for i in 0..PER_ROUND {
            let order = if i % 2 == 0 {
                [true, false]
            } else {
                [false, true]
            };
            for through in order {
                if through {
                    let (f, t) = once(&client, &via, &grant.token).await;
                    g_first.push(f);
                    g_total.push(t);
                } else {
                    let (f, t) = once(&client, &direct, "sk-bench").await;
                    d_first.push(f);
                    d_total.push(t);
                }
            }
        }
        let (df, dt, gf, gt) = (
            median(&mut d_first),
            median(&mut d_total),
            median(&mut g_first),
            median(&mut g_total),
        );
        println!(
            "  round {round}: direct first byte {:.3} ms, whole {:.3} ms; via gateway first byte {:.3} ms, whole {:.3} ms; added: first byte {:.3} ms, per request {:.3} ms (target < 1 ms: {}); ratio {:.2}x",
            ms(df),
            ms(dt),
            ms(gf),
            ms(gt),
            ms(gf.saturating_sub(df)),
            ms(gt.saturating_sub(dt)),
            if gt.saturating_sub(dt) < Duration::from_millis(1)
                && gf.saturating_sub(df) < Duration::from_millis(1)
            {
                "met"
            } else {
                "NOT met"
            },
            gt.as_secs_f64() / dt.as_secs_f64(),
        );
    }
    let after = rss_kb();
    println!(
        "  resident memory: {:.1} MB before the gateway, +{:.1} MB once started (the system's CA roots loaded), +{:.1} MB after {} requests",
        before as f64 / 1024.0,
        started.saturating_sub(before) as f64 / 1024.0,
        after.saturating_sub(before) as f64 / 1024.0,
        ROUNDS * PER_ROUND * 2 + 40
    );
    let usage = grant.usage();
    println!(
        "  metered: {} requests, {} tokens; model.log {} lines",
        usage.requests,
        usage.tokens(),
        std::fs::read_to_string(dir.path().join("model.log"))
            .map(|l| l.lines().count())
            .unwrap_or(0)
    );
}
