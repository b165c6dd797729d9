//! The runner's network proxy on its own: the real `srt proxy` (QUEST_RUNNER_SRT or PATH),
//! the runner's decider, the real `curl`, and a loopback upstream. Every refusal is paired
//! with the same request succeeding without the proxy (or through it, for an allowed form),
//! and the network log must show each request the decider was asked about.

use std::net::TcpListener;
use std::process::Command;
use std::time::Duration;

use quest_runner::netproxy::ca::JobCa;
use quest_runner::netproxy::proxy::{JobProxy, ProxySpec};
use quest_runner::netproxy::NetRules;

use crate::support::upstream;
use upstream::upstream;

fn srt() -> std::path::PathBuf {
    quest_runner::binaries::find(quest_runner::binaries::Tool::Srt).expect("srt is installed")
}

/// `curl` with `args`; returns what `-w` printed (the status) and stderr.
fn curl(args: &[&str]) -> (String, String) {
    let out = Command::new("curl")
        .args(["-sS", "-m", "10", "-o", "/dev/null", "-w", "%{http_code}"])
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .output()
        .expect("curl runs");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_decider_allows_reads_refuses_writes_and_logs_each() {
    let (port, seen) = upstream();
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = JobCa::generate("test", Duration::from_secs(3600)).expect("CA");
    let files = quest_runner::sandbox::policy::CaFiles {
        cert: dir.path().join("ca.pem"),
        bundle: dir.path().join("bundle.pem"),
        java_trust_store: dir.path().join("ca.p12"),
    };
    ca.write_trust_files(&files).expect("trust files");
    let bundle = files.bundle.clone();
    let registry = format!("127.0.0.1:{port}");
    let rules = NetRules {
        allowed: vec![registry.clone(), "registry.invalid".into()],
        full_access: Vec::new(),
        read_only_methods: vec!["GET".into(), "HEAD".into()],
    };
    let log_path = dir.path().join("network.log");
    let env: Vec<(String, String)> = std::env::vars().collect();
    let proxy = JobProxy::start(ProxySpec {
        srt: &srt(),
        rules,
        ca: &ca,
        log: std::sync::Arc::new(
            quest_runner::netproxy::log::NetLog::create(&log_path).expect("the network log"),
        ),
        counts: Default::default(),
        stderr_log: dir.path().join("proxy.stderr"),
        listener: TcpListener::bind("127.0.0.1:0").expect("bind").into(),
        adjust: None,
        env_source: &env,
        temp_dir: dir.path(),
    })
    .await
    .expect("the proxy starts");
    let pid = proxy_pid(proxy.port).expect("the proxy listens");
    let via = format!("http://127.0.0.1:{}", proxy.port);
    let url = |p: &str| format!("http://{registry}{p}");

    // The write succeeds without the proxy: its refusal below is the proxy's.
    let direct = curl(&["-X", "POST", "-d", "x", &url("/direct-post")]);
    assert_eq!(direct.0, "200", "{direct:?}");
    let got = curl(&["-x", &via, &url("/read")]);
    assert_eq!(got.0, "200", "GET through the proxy: {got:?}");
    let head = curl(&["-x", &via, "-I", &url("/head")]);
    assert_eq!(head.0, "200", "HEAD through the proxy: {head:?}");
    for method in ["POST", "PUT", "DELETE", "PATCH"] {
        let path = format!("/write-{method}");
        let r = curl(&["-x", &via, "-X", method, "-d", "x", &url(&path)]);
        assert_eq!(r.0, "403", "{method} through the proxy: {r:?}");
    }
    // The refusal names its rule, in the `error` field npm prints with the status.
    let body = Command::new("curl")
        .args(["-sS", "-m", "10", "-x", &via, "-X", "PUT", "-d", "x"])
        .arg(url("/write-body"))
        .output()
        .expect("curl runs");
    let body: serde_json::Value =
        serde_json::from_slice(&body.stdout).expect("the refusal's body is JSON");
    let error = body["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("quest-runner refused this request: read_only: ")
            && error.contains("not PUT"),
        "{body}"
    );
    // The TLS name must be the target: a mismatching Host header is refused (by the proxy).
    let misdirected = curl(&["-x", &via, "-H", "Host: evil.example", &url("/misdirected")]);
    assert!(misdirected.0.starts_with('4'), "{misdirected:?}");
    // HTTPS: terminated with the job's CA, which curl verifies; then decided and allowed (the
    // upstream name does not resolve, so the proxy answers 5xx itself, after the decision).
    let tls = curl(&[
        "-x",
        &via,
        "--cacert",
        bundle.to_str().unwrap_or_default(),
        "https://registry.invalid/tls-path?token=secret",
    ]);
    assert!(tls.0.starts_with('5'), "HTTPS through the proxy: {tls:?}");
    // Without the job's CA, the proxy's certificate is not trusted.
    let untrusted = curl(&["-x", &via, "https://registry.invalid/"]);
    assert_eq!(untrusted.0, "000", "{untrusted:?}");
    // SOCKS to the same port: refused, never a way around the decider.
    let socks = curl(&[
        "--socks5-hostname",
        &format!("127.0.0.1:{}", proxy.port),
        "-X",
        "POST",
        &url("/socks"),
    ]);
    assert_eq!(socks.0, "000", "{socks:?}");
    // Hosts off the allowlist: refused by the proxy itself, before any decider is asked, and
    // still logged (from the proxy's own report of them).
    let unlisted = curl(&["-x", &via, "http://unlisted.invalid/p?token=secret"]);
    assert_eq!(unlisted.0, "403", "{unlisted:?}");
    let unlisted_tls = curl(&["-x", &via, "https://unlisted.invalid/"]);
    assert!(unlisted_tls.1.contains("403"), "{unlisted_tls:?}");

    // srt's scratch files (its trust bundle, which it never removes) went into the TMPDIR the
    // runner gave it, which the job's cleanup removes, not into the runner's /tmp.
    let scratch: Vec<String> = std::fs::read_dir(dir.path())
        .expect("list")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        scratch.iter().any(|n| n.starts_with("srt-ca-")),
        "{scratch:?}"
    );

    let summary = proxy.stop().await;
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(
        seen,
        vec!["POST /direct-post", "GET /read", "HEAD /head"],
        "what reached the upstream"
    );
    let log = std::fs::read_to_string(&log_path).expect("the log");
    let lines: Vec<&str> = log.lines().collect();
    let has = |needle: &str| lines.iter().any(|l| l.contains(needle));
    assert!(has(&format!("GET {registry} /read allowed")), "{log}");
    assert!(has(&format!("HEAD {registry} /head allowed")), "{log}");
    for method in ["POST", "PUT", "DELETE", "PATCH"] {
        assert!(
            has(&format!(
                "{method} {registry} /write-{method} refused 403 read_only"
            )),
            "{log}"
        );
    }
    assert!(has("GET registry.invalid:443 /tls-path allowed"), "{log}");
    assert!(
        has("- unlisted.invalid:80 - refused 403 host_not_allowed"),
        "{log}"
    );
    assert!(
        has("CONNECT unlisted.invalid:443 - refused 403 host_not_allowed"),
        "{log}"
    );
    assert!(
        !log.contains("secret"),
        "queries stay out of the log: {log}"
    );
    let stderr = std::fs::read_to_string(dir.path().join("proxy.stderr")).expect("stderr");
    assert!(
        stderr.contains("srt proxy: serving") && !stderr.contains("secret"),
        "the proxy's stderr keeps its own lines, not its debug lines (full URLs): {stderr}"
    );
    assert_eq!((summary.allowed, summary.refused), (3, 7), "{log}");
    assert_eq!(summary.log, log_path);
    // Stopped: no process is left.
    assert!(
        !crate::support::alive(pid),
        "the proxy ({pid}) is still running"
    );
}

/// The pid of the process listening on `port` (the proxy), from /proc/net/tcp's inode.
fn proxy_pid(port: u16) -> Option<u32> {
    let tcp = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let hex = format!(":{port:04X}");
    let inode = tcp.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(1)?.ends_with(&hex) && f.get(3) == Some(&"0A"))
            .then(|| f.get(9).map(|s| s.to_string()))?
    })?;
    let target = format!("socket:[{inode}]");
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy() == target) {
                return Some(pid);
            }
        }
    }
    None
}
