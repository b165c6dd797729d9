//! Added latency per request through the runner's decider, against srt's built-in proxy, in
//! one run: the same sandboxed `curl` (srt, bwrap) makes the same requests to a loopback
//! upstream, once through srt's own proxy (allowlist only) and once through the runner's
//! `srt proxy` and decider. Prints the medians and the added milliseconds (target < 2 ms),
//! for plain HTTP and for HTTPS, the registries' case: srt's own proxy tunnels HTTPS
//! untouched, the runner's terminates it with the job's CA, decides, and opens its own TLS
//! connection upstream, so the difference is the price of seeing the method and path.
//!
//! `cargo bench --bench netproxy` (needs bwrap, socat, curl, node and the pinned srt,
//! `QUEST_RUNNER_SRT` or npm/node_modules/.bin: `scripts/setup`, `support/pinned.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::TcpListener;
use std::time::Duration;

use quest_runner::netproxy::ca::JobCa;
use quest_runner::netproxy::proxy::{JobProxy, ProxySpec};
use quest_runner::netproxy::NetRules;

/// Requests per round, over one kept-alive connection; rounds alternate the two proxies.
const REQUESTS: usize = 100;
const ROUNDS: usize = 3;

// Shared with the tests, of which this bench uses a part.
#[path = "support/pinned.rs"]
mod pinned;
#[allow(dead_code)]
#[path = "../tests/support/upstream.rs"]
mod upstream;

/// Per-request times (ms) of `REQUESTS` GETs by one sandboxed curl, with `proxy_port` as the
/// sandbox's external proxy (or srt's own when `None`).
fn sandboxed_times(
    srt: &std::path::Path,
    upstream: u16,
    proxy_port: Option<u16>,
    tls: Option<&std::path::Path>,
) -> Vec<f64> {
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
    let scheme = if tls.is_some() { "https" } else { "http" };
    let urls: Vec<String> = (0..REQUESTS)
        .map(|i| format!("{scheme}://127.0.0.1:{upstream}/r{i}"))
        .collect();
    let cacert = tls
        .map(|ca| format!("--cacert {} ", ca.display()))
        .unwrap_or_default();
    let script = format!(
        "NO_PROXY= no_proxy= curl -s {cacert}-w '\\n%{{time_total}}\\n' {}",
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

/// A loopback HTTPS upstream (node, keep-alive) with a self-signed certificate for
/// 127.0.0.1: its port, its certificate's file, and the server (killed when dropped).
struct TlsUpstream {
    port: u16,
    cert: std::path::PathBuf,
    server: std::process::Child,
    _dir: tempfile::TempDir,
}

impl TlsUpstream {
    fn start() -> TlsUpstream {
        use std::io::BufRead;
        let dir = tempfile::tempdir().expect("tempdir");
        let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()])
            .expect("upstream certificate");
        let cert = dir.path().join("upstream.pem");
        let key = dir.path().join("upstream.key");
        std::fs::write(&cert, made.cert.pem()).expect("cert");
        std::fs::write(&key, made.signing_key.serialize_pem()).expect("key");
        let js = "const fs=require('fs');const s=require('https').createServer(\
                  {key:fs.readFileSync(process.argv[1]),cert:fs.readFileSync(process.argv[2])},\
                  (q,r)=>{q.resume();q.on('end',()=>r.end('ok'))});\
                  s.keepAliveTimeout=60000;\
                  s.listen(0,'127.0.0.1',()=>console.log(s.address().port));";
        let mut server = std::process::Command::new("node")
            .args(["-e", js])
            .arg(&key)
            .arg(&cert)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("node runs");
        let mut line = String::new();
        std::io::BufReader::new(server.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the upstream's port");
        TlsUpstream {
            port: line.trim().parse().expect("a port"),
            cert,
            server,
            _dir: dir,
        }
    }
}

impl Drop for TlsUpstream {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The runner's proxy for the loopback upstreams, its CA's file, and the medians of both
/// proxies over `ROUNDS` alternating rounds against `upstream`.
fn compare(
    rt: &tokio::runtime::Runtime,
    srt: &std::path::Path,
    upstream: u16,
    upstream_cert: Option<&std::path::Path>,
) -> (f64, f64, usize, quest_runner::netproxy::NetworkSummary) {
    let ca = JobCa::generate("bench", Duration::from_secs(3600)).expect("CA");
    let dir = tempfile::tempdir().expect("tempdir");
    let ca_file = dir.path().join("job-ca.pem");
    std::fs::write(&ca_file, &ca.cert_pem).expect("CA file");
    let mut env: Vec<(String, String)> = std::env::vars().collect();
    if let Some(cert) = upstream_cert {
        // The proxy verifies its upstream: the bench's self-signed one is an extra root.
        env.push(("NODE_EXTRA_CA_CERTS".into(), cert.display().to_string()));
    }
    let proxy = rt
        .block_on(JobProxy::start(ProxySpec {
            srt,
            rules: NetRules {
                allowed: vec![format!("127.0.0.1:{upstream}")],
                full_access: Vec::new(),
                read_only_methods: vec!["GET".into(), "HEAD".into()],
            },
            ca: &ca,
            log: std::sync::Arc::new(
                quest_runner::netproxy::log::NetLog::create(&dir.path().join("network.log"))
                    .expect("the network log"),
            ),
            counts: Default::default(),
            stderr_log: dir.path().join("proxy.stderr"),
            listener: TcpListener::bind("127.0.0.1:0").expect("bind").into(),
            adjust: None,
            env_source: &env,
            temp_dir: dir.path(),
        }))
        .expect("the proxy starts");
    let (mut builtin, mut decided) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        // The first request of each run opens the connection: left out of both.
        builtin.extend(
            sandboxed_times(srt, upstream, None, upstream_cert)
                .into_iter()
                .skip(1),
        );
        decided.extend(
            sandboxed_times(
                srt,
                upstream,
                Some(proxy.port),
                upstream_cert.map(|_| ca_file.as_path()),
            )
            .into_iter()
            .skip(1),
        );
    }
    let summary = rt.block_on(proxy.stop());
    let n = builtin.len();
    (median(&mut builtin), median(&mut decided), n, summary)
}

fn main() {
    let srt = pinned::path(quest_runner::binaries::Tool::Srt);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (plain, _) = upstream::upstream();
    let tls = TlsUpstream::start();
    for (name, port, cert) in [
        ("http", plain, None),
        ("https", tls.port, Some(tls.cert.as_path())),
    ] {
        let (b, d, n, summary) = compare(&rt, &srt, port, cert);
        let added = d - b;
        println!("per request, {name} keep-alive, median of {n} ({ROUNDS} rounds):");
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
}
