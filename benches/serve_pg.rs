//! Benchmark of the PostgreSQL queue (`cargo bench --bench serve_pg`), against a real
//! PostgreSQL the bench starts (tests/support/postgres.rs) and three `serve` processes with
//! state directories of their own ("hosts"). For this bench only, the agent is a no-op
//! stand-in (a script that exits 0), and jobs are untrusted (no devShell, no network proxy):
//! what is measured is the queue and the runner's own work around a job, not a model.
//!
//! - Claim latency: with the runners idle, one job at a time is inserted and the time from
//!   its insert to its claim is read from the database's own clock (`submitted_at` to the
//!   attempt's `started_at`); median and 90th percentile of 40 (target: median < 50 ms).
//! - Throughput: 240 jobs queued at once, run by the three runners (concurrency 4 each);
//!   and the queue alone — three in-process queues claiming and finishing 3,000 jobs with no
//!   run between — which is what the database can do here (target: >= 500 jobs/min, the
//!   database the limit; the bench says which is).
//! - Idle: each runner's CPU time over 10 s of waiting (LISTEN, no polling) and its RSS
//!   (target: CPU ~0, RSS < 20 MB).

#![allow(clippy::unwrap_used, clippy::expect_used)]

// Shared with the tests, of which this bench uses a part.
#[allow(dead_code)]
#[path = "../tests/support/postgres.rs"]
mod postgres;
mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use postgres::Postgres;
use quest_runner::config::{Config, QueueConfig};
use quest_runner::run::{JobResult, Outcome};
use quest_runner::serve::pg::{admin, target::PgTarget, PgQueue};
use quest_runner::serve::JobSource;
use quest_runner::state::StateDir;
use support::{rss_kb, SampleRepo};

const LATENCY_SAMPLES: usize = 40;
const SERVE_JOBS: usize = 240;
const QUEUE_JOBS: usize = 3000;
/// Jobs each runner runs at once in the throughput run.
const CONCURRENCY: usize = 4;

struct Hosts {
    pg: Postgres,
    work: tempfile::TempDir,
    repo: PathBuf,
    rev: String,
    agent: PathBuf,
}

/// A `serve`, SIGTERMed when dropped (also when the bench fails midway).
struct Serving(Child);

impl Drop for Serving {
    fn drop(&mut self) {
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

impl Hosts {
    fn config(&self, concurrency: usize) -> serde_json::Value {
        serde_json::json!({
            "nix": {"options": {"substituters": ""}},
            "concurrency": concurrency,
            "allow_untrusted": true,
            "accounts": {"main": {"agent": "claude", "api_key_file": self.work.path().join("key")}},
            "queue": {"postgres": self.pg.conninfo()},
        })
    }

    fn state(&self, host: usize) -> PathBuf {
        self.work.path().join(format!("host-{host}"))
    }

    fn serve(&self, host: usize, concurrency: usize) -> Serving {
        let state = self.state(host);
        std::fs::create_dir_all(&state).expect("state dir");
        std::fs::write(
            state.join("config.json"),
            self.config(concurrency).to_string(),
        )
        .expect("config");
        let child = Command::new(env!("CARGO_BIN_EXE_quest-runner"))
            .arg("--state-dir")
            .arg(&state)
            .args(["serve"])
            .env("QUEST_RUNNER_CLAUDE", &self.agent)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(
                std::fs::File::create(self.work.path().join(format!("serve-{host}.log")))
                    .expect("log"),
            )
            .spawn()
            .expect("serve");
        Serving(child)
    }

    fn spec(&self, id: &str) -> quest_runner::job::JobSpec {
        serde_json::from_value(serde_json::json!({
            "id": id, "repo": self.repo, "rev": self.rev, "ref": "main", "trust": "untrusted",
            "agent": "claude", "account": "main", "prompt": "p", "timeout": "5m",
        }))
        .expect("spec")
    }

    fn count(&self, sql: &str) -> usize {
        self.pg.sql(sql).parse().unwrap_or(0)
    }
}

fn queue_config(pg: &Postgres) -> Config {
    let mut config: Config = serde_json::from_value(serde_json::json!({
        "accounts": {"main": {"agent": "claude", "api_key_file": "/run/k"}}
    }))
    .expect("config");
    config.queue = Some(QueueConfig {
        postgres: pg.conninfo(),
        password_file: None,
        lease: None,
    });
    config
}

fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command's closing parenthesis: state is field 3; utime, stime are 14, 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| {
        fields
            .get(i - 3)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    get(14) + get(15)
}

fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let pg = Postgres::start();
    let work = tempfile::tempdir().expect("temp dir");
    std::fs::write(work.path().join("key"), "sk-bench").expect("key");
    let agent = work.path().join("no-op-agent");
    std::fs::write(&agent, "#!/bin/sh\nexec cat >/dev/null\n").expect("stand-in");
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let repo = SampleRepo::new(work.path());
    let rev = repo.commit("serve-pg");
    let hosts = Hosts {
        pg,
        repo: repo.src(),
        rev,
        agent,
        work,
    };
    let target =
        PgTarget::from_config(queue_config(&hosts.pg).queue.as_ref().unwrap()).expect("target");
    let client = admin::connect(&target).await.expect("connect");
    let config = queue_config(&hosts.pg);
    let timeout = Duration::from_secs(300);

    println!("serve_pg: 3 runners (state dirs of their own), a no-op agent, untrusted jobs");
    let serving: Vec<Serving> = (0..3).map(|h| hosts.serve(h, CONCURRENCY)).collect();
    let pids: Vec<u32> = serving.iter().map(|s| s.0.id()).collect();
    wait_until("the runners register", Duration::from_secs(60), || {
        hosts.count("SELECT count(*) FROM quest_runner.runners") == 3
    });
    // Warm-up: every runner clones the repository once.
    for i in 0..6 {
        admin::submit(&client, hosts.spec(&format!("warm{i}")), &config, timeout)
            .await
            .expect("submit");
    }
    wait_until("the warm-up jobs end", Duration::from_secs(300), || {
        hosts.count("SELECT count(*) FROM quest_runner.jobs WHERE finished_at IS NOT NULL") == 6
    });
    let failed = hosts.pg.sql("SELECT string_agg(id || ': ' || coalesce(result->>'message', ''), '; ') FROM quest_runner.jobs WHERE state <> 'done'");
    assert!(failed.is_empty(), "warm-up jobs failed: {failed}");

    // Idle: nothing queued, the runners wait on LISTEN.
    std::thread::sleep(Duration::from_secs(2));
    let before: Vec<u64> = pids.iter().map(|p| cpu_ticks(*p)).collect();
    let idle_for = Duration::from_secs(10);
    std::thread::sleep(idle_for);
    let ticks_per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let idle_cpu: Vec<f64> = pids
        .iter()
        .zip(&before)
        .map(|(p, b)| (cpu_ticks(*p) - b) as f64 / ticks_per_s * 1000.0)
        .collect();
    let rss: Vec<f64> = pids.iter().map(|p| rss_kb(*p) as f64 / 1024.0).collect();
    println!(
        "  idle (10 s, waiting on LISTEN): CPU {} ms per runner ({:.3}% of a core at most); RSS {} MB (target < 20)",
        idle_cpu.iter().map(|c| format!("{c:.0}")).collect::<Vec<_>>().join(" / "),
        idle_cpu.iter().cloned().fold(0.0, f64::max) / idle_for.as_secs_f64() / 10.0,
        rss.iter().map(|r| format!("{r:.1}")).collect::<Vec<_>>().join(" / "),
    );

    // Claim latency, runners idle: insert one job, wait for it to end, next.
    for i in 0..LATENCY_SAMPLES {
        let id = format!("lat{i}");
        admin::submit(&client, hosts.spec(&id), &config, timeout)
            .await
            .expect("submit");
        wait_until("a latency job ends", Duration::from_secs(120), || {
            hosts.pg.sql(&format!(
                "SELECT finished_at IS NOT NULL FROM quest_runner.jobs WHERE id = '{id}'"
            )) == "t"
        });
    }
    let mut latency: Vec<f64> = hosts
        .pg
        .sql("SELECT extract(epoch FROM a.started_at - j.submitted_at) * 1000 FROM quest_runner.jobs j JOIN quest_runner.attempts a ON a.job_id = j.id WHERE j.id LIKE 'lat%'")
        .lines()
        .map(|l| l.parse().expect("ms"))
        .collect();
    latency.sort_by(|a, b| a.total_cmp(b));
    let median = latency[latency.len() / 2];
    println!(
        "  claim latency (insert -> claimed, database clock, {LATENCY_SAMPLES} jobs): median {median:.1} ms, p90 {:.1} ms, max {:.1} ms; median / 50 ms target = {:.2}",
        latency[latency.len() * 9 / 10],
        latency[latency.len() - 1],
        median / 50.0
    );

    // Throughput through serve.
    let ids: Vec<String> = (0..SERVE_JOBS).map(|i| format!("t{i}")).collect();
    let started = Instant::now();
    for id in &ids {
        admin::submit(&client, hosts.spec(id), &config, timeout)
            .await
            .expect("submit");
    }
    wait_until("the throughput jobs end", Duration::from_secs(1800), || {
        hosts.count(
            "SELECT count(*) FROM quest_runner.jobs WHERE id LIKE 't%' AND finished_at IS NOT NULL",
        ) == SERVE_JOBS
    });
    let elapsed = started.elapsed();
    let done =
        hosts.count("SELECT count(*) FROM quest_runner.jobs WHERE id LIKE 't%' AND state = 'done'");
    let per_host = hosts.pg.sql("SELECT string_agg(n::text, ' / ') FROM (SELECT count(*) n FROM quest_runner.attempts WHERE job_id LIKE 't%' GROUP BY runner ORDER BY runner) x");
    let own: Vec<f64> = hosts
        .pg
        .sql("SELECT (result->>'agent_started_ms')::float8 FROM quest_runner.jobs WHERE id LIKE 't%' AND result ? 'agent_started_ms'")
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect();
    let mut own_sorted = own.clone();
    own_sorted.sort_by(|a, b| a.total_cmp(b));
    let serve_rate = SERVE_JOBS as f64 / elapsed.as_secs_f64() * 60.0;
    println!(
        "  serve, 3 runners x concurrency {CONCURRENCY}: {SERVE_JOBS} jobs in {:.1} s = {serve_rate:.0} jobs/min ({done} done; per runner {per_host}); runner's own work before the agent {:.0} ms median per job",
        elapsed.as_secs_f64(),
        own_sorted.get(own_sorted.len() / 2).copied().unwrap_or(0.0),
    );
    drop(serving);

    // The queue alone: three queues in this process claim and finish, nothing in between.
    let ids: Vec<String> = (0..QUEUE_JOBS).map(|i| format!("q{i}")).collect();
    for id in &ids {
        admin::submit(&client, hosts.spec(id), &config, timeout)
            .await
            .expect("submit");
    }
    let mut queues = Vec::new();
    for h in 0..3 {
        let dir = hosts.work.path().join(format!("queue-{h}"));
        std::fs::create_dir_all(&dir).expect("dir");
        let q = PgQueue::open(
            target.clone(),
            &StateDir::at(&dir),
            &config,
            Duration::from_secs(30),
            timeout,
        )
        .await
        .expect("queue");
        queues.push(Arc::new(q));
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for q in &queues {
        for _ in 0..2 {
            let q = q.clone();
            tasks.push(tokio::spawn(async move {
                let mut n = 0;
                while let Some(c) = q.claim().await.expect("claim") {
                    let result = JobResult {
                        outcome: Outcome::Succeeded,
                        message: Some(String::new()),
                        ..JobResult::new(&c.job)
                    };
                    q.finish(c, result).await.expect("finish");
                    n += 1;
                }
                n
            }));
        }
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("task");
    }
    let elapsed = started.elapsed();
    let queue_rate = total as f64 / elapsed.as_secs_f64() * 60.0;
    println!(
        "  the queue alone (claim + finish, 3 queues x 2 tasks): {total} jobs in {:.1} s = {queue_rate:.0} jobs/min",
        elapsed.as_secs_f64()
    );
    println!(
        "  throughput / 500 jobs/min target: serve {:.2}, queue alone {:.2}; the limit with serve is {}",
        serve_rate / 500.0,
        queue_rate / 500.0,
        if queue_rate > 2.0 * serve_rate {
            "the runner's own per-job work (workspace, sandbox checks, git), not the database"
        } else {
            "the database"
        }
    );
    drop(queues);
    drop(client);
}
