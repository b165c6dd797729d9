//! Added latency per request through the runner's decider, against srt's built-in proxy, in
//! one run: the same sandboxed `curl` (srt, bwrap) makes the same requests to a loopback
//! upstream, once through srt's own proxy (allowlist only) and once through the runner's
//! `srt proxy` and decider. Prints the medians and the added milliseconds (target < 2 ms).
//!
//! `cargo bench --bench netproxy` (needs srt, bwrap, socat and curl: `scripts/setup`).

use std::net::TcpListener;
use std::time::Duration;

use quest_runner::netproxy::ca::JobCa;
use quest_runner::netproxy::proxy::{JobProxy, ProxySpec};
use quest_runner::netproxy::NetRules;

/// Requests per round, over one kept-alive connection; rounds alternate the two proxies.
const REQUESTS: usize = 100;
const ROUNDS: usize = 3;

#[path = "../tests/support/upstream.rs"]
mod upstream;

/// Per-request times (ms) of `REQUESTS` GETs by one sandboxed curl, with `proxy_port` as the
/// sandbox's external proxy (or srt's own when `None`).
fn sandboxed_times(srt: &std::path::Path, upstream: u16, proxy_port: Option<u16>) -> Vec<f64> {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut network = serde_json::json!({
        "allowedDomains": [format!("127.0.0.1:{upstream}")],
        "deniedDomains": [],
    });
    if let Some(port) = proxy_port {
        network["httpProxyPort"] = port.into();
        network["socksProxyPort"] = port.into();
    }
    let settings = serde_json::json!({
        "network": network,
        "filesystem": {"denyRead": [], "allowWrite": [dir.path()], "denyWrite": []},
    });
    let file = dir.path().join("srt.json");
    std::fs::write(&file, settings.to_string()).expect("settings");
    let urls: Vec<String> = (0..REQUESTS)
        .map(|i| format!("http://127.0.0.1:{upstream}/r{i}"))
        .collect();
    let script = format!(
        "NO_PROXY= no_proxy= curl -s -w '\\n%{{time_total}}\\n' {}",
        urls.join(" ")
    );
    let out = std::process::Command::new(srt)
        .arg("--settings")
        .arg(&file)
        .args(["-c", &script])
        .env("TMPDIR", dir.path())
        .output()
        .expect("srt runs");
    let times: Vec<f64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse::<f64>().ok())
        .map(|s| s * 1000.0)
        .collect();
    assert_eq!(
        times.len(),
        REQUESTS,
        "curl answered: {} {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    times
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let srt = quest_runner::binaries::find(quest_runner::binaries::Tool::Srt).expect("srt");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (upstream, _) = upstream::upstream();
    let ca = JobCa::generate("bench", Duration::from_secs(3600)).expect("CA");
    let dir = tempfile::tempdir().expect("tempdir");
    let env: Vec<(String, String)> = std::env::vars().collect();
    let proxy = rt
        .block_on(JobProxy::start(ProxySpec {
            srt: &srt,
            rules: NetRules {
                allowed: vec![format!("127.0.0.1:{upstream}")],
                full_access: Vec::new(),
                read_only_methods: vec!["GET".into(), "HEAD".into()],
            },
            ca: &ca,
            log: dir.path().join("network.log"),
            stderr_log: dir.path().join("proxy.stderr"),
            listener: TcpListener::bind("127.0.0.1:0").expect("bind"),
            adjust: None,
            env_source: &env,
        }))
        .expect("the proxy starts");
    let (mut builtin, mut decided) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        // The first request of each run opens the connection: left out of both.
        builtin.extend(sandboxed_times(&srt, upstream, None).into_iter().skip(1));
        decided.extend(
            sandboxed_times(&srt, upstream, Some(proxy.port))
                .into_iter()
                .skip(1),
        );
    }
    let summary = rt.block_on(proxy.stop());
    let b = median(&mut builtin);
    let d = median(&mut decided);
    let added = d - b;
    println!(
        "per request, http keep-alive, median of {} ({} rounds):",
        builtin.len(),
        ROUNDS
    );
    println!("  srt's built-in proxy             {b:8.3} ms");
    println!("  runner's proxy and decider       {d:8.3} ms");
    println!(
        "  added by the decider             {added:8.3} ms   target < 2 ms  {}",
        if added < 2.0 { "met" } else { "MISSED" }
    );
    println!(
        "  decider: {} allowed, {} refused",
        summary.allowed, summary.refused
    );
}
