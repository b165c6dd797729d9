//! What `isolation: gvisor` costs a job, against `namespace` in the same run, per agent:
//!
//! - time to the first model request, from starting `quest-runner run` (target: + < 300 ms);
//! - the per-command gap as the model sees it: `COMMANDS` calls of `true`, the time from one
//!   model request to the next, median (target: at most 2x, stretch 1.3x);
//! - the host memory a running job's gVisor sandbox holds: the proportional set size of
//!   runsc's processes (Sentry, gofer) while a command sleeps (target: < 64 MiB).
//!
//! `cargo bench --bench gvisor`. Needs root (the scripted model runs in a network namespace
//! of its own), runsc (`scripts/setup`) and the pinned agents (`support::pinned`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/pinned.rs"]
mod pinned;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use quest_runner::binaries::Tool;
use quest_runner_selftest::model_server::{ModelServer, Served, Step};

const ROUNDS: usize = 3;
const COMMANDS: usize = 12;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The main-loop requests' times after `started`.
fn requests(server: &ModelServer, started: Instant) -> Vec<Instant> {
    server
        .exchanges()
        .iter()
        .filter(|e| e.at > started && matches!(e.served, Served::Step(_) | Served::Done))
        .map(|e| e.at)
        .collect()
}

struct Bench {
    server: ModelServer,
    work: tempfile::TempDir,
    runner: PathBuf,
    src: PathBuf,
    rev: String,
    n: usize,
}

impl Bench {
    /// A state dir whose config runs both levels' commands under `isolation`.
    fn state(&self, isolation: &str) -> PathBuf {
        let state = self.work.path().join(format!("state-{isolation}"));
        std::fs::create_dir_all(&state).unwrap();
        let key = self.work.path().join("key");
        std::fs::write(&key, "sk-bench").unwrap();
        let auth = self.work.path().join("auth.json");
        std::fs::write(&auth, r#"{"scripted":{"type":"api","key":"sk-bench"}}"#).unwrap();
        let provider = serde_json::json!({"provider": {"scripted": {
            "npm": "@ai-sdk/openai-compatible",
            "options": {"baseURL": format!("{}/v1", self.server.base_url())},
            "models": {"scripted": {"tool_call": true}}}}});
        let config = serde_json::json!({
            "nix": {"options": {"substituters": ""}},
            "isolation": {"trusted": isolation, "untrusted": isolation},
            "accounts": {
                "claude": {"agent": "claude", "api_key_file": key, "base_url": self.server.base_url()},
                "opencode": {"agent": "opencode", "auth_file": auth, "model": "scripted/scripted", "config": provider},
            },
        });
        std::fs::write(state.join("config.json"), config.to_string()).unwrap();
        state
    }

    /// Runs one job of `agent` under `isolation` whose model asks for `steps`; the times of
    /// its model requests from the start of `run`.
    fn job(&mut self, agent: &str, isolation: &str, steps: Vec<Step>) -> (Instant, Vec<Instant>) {
        self.n += 1;
        let job = serde_json::json!({
            "id": format!("gv-{agent}-{}", self.n), "repo": self.src, "rev": self.rev,
            "ref": "main", "trust": "trusted", "agent": agent, "account": agent,
            "prompt": "run the commands",
        });
        let file = self.work.path().join(format!("job-{}.json", self.n));
        std::fs::write(&file, job.to_string()).unwrap();
        self.server.set_script(steps);
        let mut cmd = Command::new(&self.runner);
        cmd.env("RUST_LOG", "warn")
            .arg("--state-dir")
            .arg(self.state(isolation))
            .args(["run", "--job"])
            .arg(&file)
            .stdin(Stdio::null())
            .stderr(Stdio::null());
        self.server.confine(&mut cmd);
        let started = Instant::now();
        let out = cmd.output().expect("run");
        let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        assert_eq!(
            result["outcome"], "succeeded",
            "{agent}/{isolation}: {result:#}"
        );
        (started, requests(&self.server, started))
    }
}

/// The proportional set size of every runsc process now, in bytes.
fn runsc_pss() -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let exe = std::fs::read_link(entry.path().join("exe")).unwrap_or_default();
        if !exe.to_string_lossy().contains("runsc") {
            continue;
        }
        let rollup = std::fs::read_to_string(entry.path().join("smaps_rollup")).unwrap_or_default();
        total += rollup
            .lines()
            .find_map(|l| l.strip_prefix("Pss:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
            * 1024;
    }
    total
}

fn sample_repo(work: &Path) -> (PathBuf, String) {
    let src = work.join("repo");
    std::fs::create_dir_all(&src).unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(["-c", "user.name=b", "-c", "user.email=b@b", "-C"])
            .arg(&src)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    git(&["init", "-q", "-b", "main"]);
    std::fs::write(src.join("README.md"), "bench\n").unwrap();
    git(&["add", "."]);
    git(&["commit", "-qm", "bench"]);
    let rev = git(&["rev-parse", "HEAD"]).trim().to_string();
    (src, rev)
}

fn main() {
    pinned::export(&pinned::ALL);
    let probe = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(quest_runner::sandbox::gvisor::probe());
    if let Some(why) = &probe.fails {
        println!("gvisor: skipped: {why}");
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let (src, rev) = sample_repo(work.path());
    let mut b = Bench {
        server: ModelServer::start_isolated(Vec::new()).expect("model server (needs root)"),
        work,
        runner: PathBuf::from(env!("CARGO_BIN_EXE_quest-runner")),
        src,
        rev,
        n: 0,
    };
    let _ = pinned::path(Tool::Srt);
    println!(
        "isolation gvisor against namespace, median of {ROUNDS}, {COMMANDS} commands a job ({})",
        probe.describe()
    );
    for agent in ["claude", "opencode"] {
        let script = || vec![Step::bash("true"); COMMANDS];
        b.job(agent, "namespace", script()); // warm: bare clone, agent's caches
        b.job(agent, "gvisor", script());
        let (mut first, mut gap) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
        for _ in 0..ROUNDS {
            for (i, isolation) in ["namespace", "gvisor"].into_iter().enumerate() {
                let (started, at) = b.job(agent, isolation, script());
                first[i].push(at[0] - started);
                // The first command may wait for the sandbox's start: left out.
                gap[i].push(median(at.windows(2).skip(1).map(|w| w[1] - w[0]).collect()));
            }
        }
        let [f_ns, f_gv] = first.map(median);
        let [g_ns, g_gv] = gap.map(median);
        let ratio = g_gv.as_secs_f64() / g_ns.as_secs_f64();
        println!(
            "  {agent:<9} first request: namespace {:>7.1} ms, gvisor {:>7.1} ms: {:+.1} ms (target + < 300 ms: {})",
            ms(f_ns),
            ms(f_gv),
            ms(f_gv) - ms(f_ns),
            if f_gv < f_ns + Duration::from_millis(300) { "met" } else { "MISSED" },
        );
        println!(
            "  {agent:<9} per command:   namespace {:>7.1} ms, gvisor {:>7.1} ms: {ratio:.2}x (target <= 2x: {}; stretch 1.3x: {})",
            ms(g_ns),
            ms(g_gv),
            if ratio <= 2.0 { "met" } else { "MISSED" },
            if ratio <= 1.3 { "met" } else { "missed" },
        );
    }
    // The memory of a sandbox while its command runs: sampled from beside the job.
    let sampler = std::thread::spawn(|| {
        let mut most = 0;
        for _ in 0..40 {
            std::thread::sleep(Duration::from_millis(100));
            most = most.max(runsc_pss());
        }
        most
    });
    b.job("opencode", "gvisor", vec![Step::bash("sleep 5")]);
    let most = sampler.join().unwrap();
    println!(
        "  host memory of a running command's gVisor sandbox (runsc's processes, PSS) {:.1} MiB (target < 64 MiB: {})",
        most as f64 / (1 << 20) as f64,
        if most < 64 << 20 { "met" } else { "MISSED" },
    );
}
