//! `serve`'s metrics and health endpoint (`metrics.listen`) end to end: a real runner runs
//! real jobs (the real Claude Code, a scripted model), and a tiny HTTP client reads
//! `/metrics`, `/healthz` and `/readyz` over TCP on 127.0.0.1; where Debian's `prometheus`
//! is installed, a real Prometheus scrapes the endpoint and the test reads the counter back
//! through its HTTP API. A public address is refused when the config is loaded.

use crate::support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use quest_runner_selftest::model_server::ModelServer;
use serde_json::Value;
use support::serve::{claude_binary, Serve};
use support::*;

fn submit_ok(runner: &Runner, dir: &Path, job: &Value) -> String {
    let path = dir.join(format!("job-{}.json", unique_token()));
    std::fs::write(&path, job.to_string()).unwrap();
    let out = runner.command().arg("submit").arg(&path).output().unwrap();
    assert!(
        out.status.success(),
        "submit: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn wait_done(runner: &Runner, id: &str, serve: &Serve) -> Value {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let out = runner.command().args(["show", id]).output().unwrap();
        if out.status.success() {
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            if v["state"] == "done" || v["state"] == "failed" {
                return v;
            }
        }
        assert!(
            Instant::now() < deadline,
            "job {id} did not end\n--- serve log ---\n{}",
            serve.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Polls `path` until it answers (at most 30 s).
fn wait_answer(addr: SocketAddr, path: &str, serve: &Serve) -> (u16, String) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(answer) = get(addr, path) {
            return answer;
        }
        assert!(
            Instant::now() < deadline,
            "{path} never answered\n{}",
            serve.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The value of the sample line `name{labels}` (labels as the encoder writes them).
fn sample(scrape: &str, series: &str) -> Option<f64> {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_exports_job_metrics_and_health_and_prometheus_reads_them() {
    let repo = Repo::new();
    let rev = repo.commit(&[("flake.nix", &flake(r#"METRICS = "yes";"#))]);
    let server = ModelServer::start(vec![]).expect("model server");
    let runner = Runner::new();
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("anthropic-key");
    std::fs::write(&key, "sk-test-SECRET-KEY-0042").unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = serde_json::json!({
        "nix": {"options": {"substituters": ""}},
        "concurrency": 2,
        "accounts": {"main": {"agent": "claude", "api_key_file": key, "base_url": server.base_url(), "budget": 1_000_000}},
        "metrics": {"listen": addr.to_string()},
    });
    std::fs::write(runner.state().join("config.json"), config.to_string()).unwrap();
    let job = serde_json::json!({
        "repo": repo.src().to_string_lossy(), "rev": rev, "ref": "main", "trust": "trusted",
        "agent": "claude", "account": "main", "prompt": "Do nothing.", "timeout": "3m",
    });
    let (runner, keys) = tokio::task::spawn_blocking(move || {
        let serve = Serve::start(&runner, &claude_binary(), keys.path());
        assert_eq!(wait_answer(addr, "/healthz", &serve), (200, "ok\n".into()));
        let (status, body) = get(addr, "/readyz").unwrap();
        assert_eq!(status, 200, "/readyz: {body}\n{}", serve.log());
        let ids = [
            submit_ok(&runner, keys.path(), &job),
            submit_ok(&runner, keys.path(), &job),
        ];
        for id in &ids {
            let v = wait_done(&runner, id, &serve);
            assert_eq!(v["result"]["outcome"], "succeeded", "{v}\n{}", serve.log());
        }
        let (status, scrape) = get(addr, "/metrics").unwrap();
        assert_eq!(status, 200);
        assert_scrape(&scrape);
        prometheus_reads_back(addr, keys.path());
        let (status, _) = get(addr, "/nope").unwrap();
        assert_eq!(status, 404);
        drop(serve);
        (runner, keys)
    })
    .await
    .unwrap();
    drop((runner, keys, server));
}

fn assert_scrape(scrape: &str) {
    let excerpt: Vec<&str> = scrape
        .lines()
        .filter(|l| !l.starts_with('#') && !l.contains("_bucket"))
        .collect();
    eprintln!("scrape excerpt:\n{}", excerpt.join("\n"));
    for line in [
        "# TYPE quest_runner_jobs_started counter",
        "# TYPE quest_runner_jobs_ended counter",
        "# TYPE quest_runner_job_duration_seconds histogram",
        "# TYPE quest_runner_job_phase_seconds histogram",
        "# TYPE quest_runner_devshell_lookups counter",
        "# TYPE quest_runner_jobs_running gauge",
        "# TYPE quest_runner_queue_depth gauge",
        "# TYPE quest_runner_process_resident_memory_bytes gauge",
        "# TYPE quest_runner_running_jobs_memory_bytes gauge",
        "# TYPE quest_runner_running_jobs_cpu_seconds gauge",
    ] {
        assert!(
            scrape.lines().any(|l| l == line),
            "no {line:?} in\n{scrape}"
        );
    }
    let value =
        |series: &str| sample(scrape, series).unwrap_or_else(|| panic!("no {series} in\n{scrape}"));
    assert_eq!(
        value(r#"quest_runner_jobs_started_total{agent="claude"}"#),
        2.0
    );
    assert_eq!(
        value(r#"quest_runner_jobs_ended_total{agent="claude",outcome="succeeded"}"#),
        2.0
    );
    assert_eq!(
        value(r#"quest_runner_job_duration_seconds_count{agent="claude"}"#),
        2.0
    );
    for phase in ["workspace", "devshell", "agent_start"] {
        let series = format!(r#"quest_runner_job_phase_seconds_count{{phase="{phase}"}}"#);
        assert_eq!(value(&series), 2.0, "{series}");
    }
    // The two jobs share one revision: one builds (or finds) the devShell, each looks it up.
    let lookups = ["hit", "miss"].map(|c| {
        sample(
            scrape,
            &format!(r#"quest_runner_devshell_lookups_total{{cache="{c}"}}"#),
        )
    });
    assert_eq!(lookups.iter().flatten().sum::<f64>(), 2.0, "{lookups:?}");
    assert_eq!(value("quest_runner_jobs_running"), 0.0);
    // The jobs' tokens came out of the account's budget.
    let left = value(r#"quest_runner_model_budget_remaining_tokens{account="main"}"#);
    assert!(left > 0.0 && left < 1_000_000.0, "{left}");
    // Both jobs ended: no process of a running job is left to count.
    assert_eq!(value("quest_runner_running_jobs_memory_bytes"), 0.0);
    assert!(
        value("quest_runner_model_requests_total") >= 2.0,
        "{scrape}"
    );
    assert!(value("quest_runner_process_resident_memory_bytes") > 1e6);
    // Both jobs were claimed at once (concurrency 2): the queue is empty.
    assert_eq!(value("quest_runner_queue_depth"), 0.0);
    assert!(!scrape.contains("job_id"), "a job id as a label:\n{scrape}");
}

/// A real Prometheus scrapes `target` and the counter is read back through its query API.
fn prometheus_reads_back(target: SocketAddr, dir: &Path) {
    let Some(prometheus) = find_prometheus() else {
        eprintln!("SKIPPED the Prometheus scrape: no `prometheus` binary (Debian's `prometheus` package, or QUEST_RUNNER_PROMETHEUS)");
        return;
    };
    let web: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let conf = dir.join("prometheus.yml");
    std::fs::write(
        &conf,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: quest-runner\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let log = dir.join("prometheus.log");
    let child = std::process::Command::new(&prometheus)
        .arg(format!("--config.file={}", conf.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address={web}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    struct Kill(Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _child = Kill(child);
    let query = "/api/v1/query?query=quest_runner_jobs_ended_total";
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok((200, body)) = get(web, query) {
            let v: Value = serde_json::from_str(&body).unwrap();
            if let Some(first) = v["data"]["result"].as_array().and_then(|r| r.first()) {
                eprintln!("prometheus {query}: {first}");
                assert_eq!(first["metric"]["outcome"], "succeeded", "{v}");
                assert_eq!(first["metric"]["agent"], "claude", "{v}");
                assert_eq!(first["value"][1], "2", "{v}");
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus never had the series\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn find_prometheus() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("QUEST_RUNNER_PROMETHEUS") {
        return Some(PathBuf::from(p));
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join("prometheus"))
        .find(|p| p.is_file())
}

#[test]
fn a_public_metrics_address_is_refused_at_load_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    let load = |metrics: Value| {
        std::fs::write(&path, serde_json::json!({ "metrics": metrics }).to_string()).unwrap();
        quest_runner::config::Config::load(&path, true)
    };
    let err = load(serde_json::json!({"listen": "0.0.0.0:9477"}))
        .unwrap_err()
        .to_string();
    assert!(err.contains("metrics.listen"), "{err}");
    assert!(err.contains("not a loopback address"), "{err}");
    // Not vacuous: the same address loads when public, and a loopback one does anyway.
    let public = load(serde_json::json!({"listen": "0.0.0.0:9477", "public": true})).unwrap();
    assert_eq!(public.metrics.listen, Some("0.0.0.0:9477".parse().unwrap()));
    load(serde_json::json!({"listen": "[::1]:9477"})).unwrap();
    let err = load(serde_json::json!({"listen": "localhost"}))
        .unwrap_err()
        .to_string();
    assert!(err.contains("metrics.listen"), "{err}");

    // `serve` refuses it before it serves anything.
    let runner = Runner::new();
    std::fs::write(
        runner.state().join("config.json"),
        r#"{"metrics": {"listen": "192.0.2.1:9477"}}"#,
    )
    .unwrap();
    let log = dir.path().join("serve.log");
    let mut child = runner
        .command()
        .arg("serve")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("serve ran with a public metrics address");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("metrics.listen"), "{stderr}");
}

#[test]
fn serve_without_a_usable_nix_is_alive_but_not_ready_and_says_why() {
    let mut runner = Runner::new();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    std::fs::write(
        runner.state().join("config.json"),
        serde_json::json!({
            "nix": {"options": {"substituters": ""}},
            "metrics": {"listen": addr.to_string()},
        })
        .to_string(),
    )
    .unwrap();
    let logs = tempfile::tempdir().unwrap();
    // The control first: with the host's nix the same runner is ready.
    let serve = Serve::start(&runner, &claude_binary(), logs.path());
    assert_eq!(wait_answer(addr, "/healthz", &serve).0, 200);
    assert_eq!(wait_ready(addr, &serve).0, 200, "{}", serve.log());
    let (status, detail) = doctor_serve_line(&runner);
    assert_eq!(status, "ok", "{detail}");
    assert!(detail.contains("takes jobs"), "{detail}");
    drop(serve);
    // None answers: a warning that says so, not a failure (doctor runs before serve, too).
    let (status, detail) = doctor_serve_line(&runner);
    assert_eq!(status, "warn", "{detail}");
    assert!(detail.contains("no serve answers"), "{detail}");

    runner.nix = Some(PathBuf::from("/nonexistent/nix"));
    let serve = Serve::start(&runner, &claude_binary(), logs.path());
    assert_eq!(wait_answer(addr, "/healthz", &serve), (200, "ok\n".into()));
    let (status, why) = wait_ready(addr, &serve);
    assert_eq!(status, 503, "{why}\n{}", serve.log());
    assert!(why.starts_with("devshell: "), "{why}");
    assert!(why.contains("QUEST_RUNNER_NIX"), "{why}");
    // `doctor` reads the same checks from the running serve.
    let (status, detail) = doctor_serve_line(&runner);
    assert_eq!(status, "fail", "{detail}");
    assert!(
        detail.contains("takes no jobs") && detail.contains("devshell: "),
        "{detail}"
    );
}

/// The status and detail of `doctor --json`'s "serve" check.
fn doctor_serve_line(runner: &Runner) -> (String, String) {
    let out = runner
        .command()
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).expect("doctor --json prints JSON");
    let checks = doc["checks"].as_array().unwrap();
    let serve = checks
        .iter()
        .find(|c| c["name"] == "serve")
        .expect("a serve check");
    let field = |k: &str| serve[k].as_str().unwrap_or_default().to_string();
    (field("status"), field("detail"))
}

/// `/readyz` once the serve loop has made its first checks (it looks every second).
fn wait_ready(addr: SocketAddr, serve: &Serve) -> (u16, String) {
    wait_answer(addr, "/readyz", serve);
    std::thread::sleep(Duration::from_millis(1500));
    get(addr, "/readyz").unwrap()
}

/// Idle connections from a local user cannot take the endpoint or the runner's descriptors:
/// `serve` at 256 open files, 600 connections that send nothing, and `/healthz` still answers
/// within seconds while the log says so once, not once per failed accept (issue 40: 1,139
/// idle connections made `/healthz` time out and logged 1,113 "accept: Too many open files").
#[test]
fn idle_connections_do_not_take_the_metrics_endpoint() {
    let runner = Runner::new();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    std::fs::write(
        runner.state().join("config.json"),
        serde_json::json!({
            "nix": {"options": {"substituters": ""}},
            "metrics": {"listen": addr.to_string()},
        })
        .to_string(),
    )
    .unwrap();
    let logs = tempfile::tempdir().unwrap();
    let serve = Serve::start_with(&runner, &claude_binary(), logs.path(), &[], |cmd| {
        use std::os::unix::process::CommandExt;
        // SAFETY: setrlimit only, between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                let limit = libc::rlimit {
                    rlim_cur: 256,
                    rlim_max: 256,
                };
                match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
                    0 => Ok(()),
                    _ => Err(std::io::Error::last_os_error()),
                }
            });
        }
    });
    assert_eq!(wait_answer(addr, "/healthz", &serve).0, 200);
    let flood_began = Instant::now();
    let idle: Vec<std::net::TcpStream> = (0..600)
        .filter_map(|_| std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok())
        .collect();
    assert!(idle.len() > 256, "only {} connections made", idle.len());
    let deadline = Instant::now() + Duration::from_secs(15);
    let answered = loop {
        match get(addr, "/healthz") {
            Ok((200, _)) => break true,
            _ if Instant::now() > deadline => break false,
            _ => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    let waited = flood_began.elapsed();
    std::thread::sleep(Duration::from_secs(5).saturating_sub(waited));
    let log = serve.log();
    let accept_lines = log.lines().filter(|l| l.contains("accept:")).count();
    drop(idle);
    assert!(
        answered,
        "/healthz did not answer within 15 s of the flood\n{log}"
    );
    assert!(
        accept_lines <= 2,
        "{accept_lines} accept errors logged in {waited:?}\n{log}"
    );
}
