//! Benchmark of `quest-runner serve`: throughput of N short jobs (a scripted model that ends
//! each turn at once, a cached devShell, a warm bare clone) at concurrency 1, 2 and 4; the
//! runner's own work per job (`agent_started_ms`, median); and the serve process's own
//! resident memory idle and busy (agents not counted; target idle: under 20 MB).
//!
//! `cargo bench --bench serve`. Needs root (the scripted model runs in a network namespace
//! of its own) and the pinned Claude Code and srt (`QUEST_RUNNER_CLAUDE`, `_SRT` or
//! npm/node_modules/.bin: `support::pinned`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use quest_runner::binaries::Tool;
use quest_runner_selftest::model_server::ModelServer;

mod support;

use support::{rss_kb, SampleRepo};

const JOBS: usize = 6;

struct Bench {
    state: PathBuf,
    key: PathBuf,
    repo: PathBuf,
    rev: String,
    claude: PathBuf,
    srt: PathBuf,
}

impl Bench {
    fn command(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_quest-runner"));
        cmd.arg("--state-dir")
            .arg(&self.state)
            .env("QUEST_RUNNER_CLAUDE", &self.claude)
            .env("QUEST_RUNNER_SRT", &self.srt)
            .env("RUST_LOG", "warn");
        cmd
    }

    /// `metrics`: a loopback address for `metrics.listen`, or none (the default: off).
    fn configure(&self, server: &ModelServer, concurrency: usize, metrics: Option<String>) {
        let mut config = serde_json::json!({
            "nix": {"options": {"substituters": ""}},
            "concurrency": concurrency,
            "accounts": {"main": {"agent": "claude", "api_key_file": self.key,
                                   "base_url": server.base_url()}},
        });
        if let Some(listen) = metrics {
            config["metrics"] = serde_json::json!({ "listen": listen });
        }
        std::fs::write(self.state.join("config.json"), config.to_string()).expect("config");
    }

    fn submit(&self, id: &str) {
        let job = serde_json::json!({
            "id": id, "repo": self.repo, "rev": self.rev, "ref": "main",
            "trust": "trusted", "agent": "claude", "account": "main",
            "prompt": "Say done.", "timeout": "5m",
        });
        let path = self.state.join(format!("{id}.job.json"));
        std::fs::write(&path, job.to_string()).expect("job file");
        let out = self
            .command()
            .arg("submit")
            .arg(&path)
            .output()
            .expect("submit");
        assert!(out.status.success(), "submit {id}");
    }

    fn serve(&self, server: &ModelServer) -> Serving {
        let mut cmd = self.command();
        cmd.args(["serve", "--poll", "50ms"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        server.confine(&mut cmd);
        Serving(cmd.spawn().expect("serve"))
    }

    fn done(&self, ids: &[String]) -> usize {
        ids.iter()
            .filter(|id| self.state.join("done").join(format!("{id}.json")).exists())
            .count()
    }

    fn own_ms(&self, id: &str) -> u64 {
        let text = std::fs::read_to_string(self.state.join("done").join(format!("{id}.json")))
            .expect("done entry");
        let v: serde_json::Value = serde_json::from_str(&text).expect("entry");
        v["result"]["agent_started_ms"]
            .as_u64()
            .expect("agent_started_ms")
    }
}

/// A running `serve`, stopped with SIGTERM when dropped, also when the bench fails midway
/// (a failed warm-up once left two runners polling for an hour).
struct Serving(Child);

impl Drop for Serving {
    fn drop(&mut self) {
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let work = tempfile::tempdir().expect("temp dir");
    let repo = SampleRepo::new(work.path());
    let rev = repo.commit("serve");
    let state = work.path().join("state");
    std::fs::create_dir_all(&state).expect("state");
    let key = work.path().join("key");
    std::fs::write(&key, "sk-bench").expect("key");
    let bench = Bench {
        rev,
        repo: repo.src(),
        state,
        key,
        claude: support::pinned::path(Tool::Claude),
        srt: support::pinned::path(Tool::Srt),
    };
    let server = ModelServer::start_isolated(vec![]).expect("model server");

    // Warm-up: the bare clone and the devShell cache.
    bench.configure(&server, 1, None);
    let serve = bench.serve(&server);
    bench.submit("warm");
    let warm = ["warm".to_string()];
    let deadline = Instant::now() + Duration::from_secs(300);
    while bench.done(&warm) < 1 {
        assert!(Instant::now() < deadline, "the warm-up job did not finish");
        let failed = bench.state.join("failed/warm.json");
        assert!(
            !failed.exists(),
            "the warm-up job failed: {}",
            std::fs::read_to_string(&failed).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(serve);

    println!("serve: {JOBS} short jobs (scripted model, cached devShell) per concurrency");
    // The last round repeats concurrency 2 with metrics on: its cost, against the round
    // before it, in the same run.
    for (concurrency, metrics) in [(1, false), (2, false), (4, false), (2, true)] {
        let listen = metrics.then(|| {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            format!("127.0.0.1:{port}")
        });
        bench.configure(&server, concurrency, listen.clone());
        let serve = bench.serve(&server);
        let pid = serve.0.id();
        std::thread::sleep(Duration::from_millis(1000));
        let idle = rss_kb(pid);
        let tag = if metrics { "m" } else { "" };
        let ids: Vec<String> = (0..JOBS)
            .map(|i| format!("c{concurrency}{tag}-{i}"))
            .collect();
        let started = Instant::now();
        for id in &ids {
            bench.submit(id);
        }
        let mut busy = idle;
        let deadline = Instant::now() + Duration::from_secs(600);
        while bench.done(&ids) < JOBS {
            assert!(Instant::now() < deadline, "jobs did not finish");
            busy = busy.max(rss_kb(pid));
            std::thread::sleep(Duration::from_millis(20));
        }
        let elapsed = started.elapsed();
        // Idle again, with the model gateway and its TLS roots loaded by the jobs.
        std::thread::sleep(Duration::from_millis(1000));
        let after = rss_kb(pid);
        let scraped = listen.as_deref().map(|l| scrape(&server, l));
        drop(serve);
        let mut own: Vec<u64> = ids.iter().map(|id| bench.own_ms(id)).collect();
        own.sort();
        if let Some(scraped) = &scraped {
            let ended = scraped
                .lines()
                .filter(|l| l.starts_with("quest_runner_jobs_ended_total"))
                .collect::<Vec<_>>()
                .join("; ");
            println!(
                "  metrics on: /metrics answered {} bytes ({ended})",
                scraped.len()
            );
        }
        let label = if metrics { ", metrics on" } else { "" };
        println!(
            "  concurrency {concurrency}{label}: {:.2} jobs/s ({:.1} s for {JOBS}); runner's own work \
             per job {} ms median (max {}); serve RSS idle {:.1} MB, busy {:.1} MB, idle after \
             the jobs (model gateway started) {:.1} MB",
            JOBS as f64 / elapsed.as_secs_f64(),
            elapsed.as_secs_f64(),
            own[own.len() / 2],
            own[own.len() - 1],
            idle as f64 / 1024.0,
            busy as f64 / 1024.0,
            after as f64 / 1024.0,
        );
    }
    server.kill_confined();
}

/// `GET /metrics` from `listen` with curl, in the network namespace `serve` runs in (the
/// scripted model's), the body (empty when it did not answer).
fn scrape(server: &ModelServer, listen: &str) -> String {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-m", "5", &format!("http://{listen}/metrics")]);
    server.confine(&mut cmd);
    cmd.output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}
