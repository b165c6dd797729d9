//! `quest-runner serve` end to end: real runner processes on a temporary state dir, the real
//! Claude Code in its real sandbox, a scripted model in a private network namespace, jobs fed
//! through `submit` and through files dropped into `queue/`. Fault tests kill the runner with
//! SIGKILL and SIGTERM mid-job and check that no job is lost and nothing is left behind.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use quest_runner::selftest::model_server::{ModelServer, Step};
use serde_json::Value;
use support::*;

fn agent_binary() -> PathBuf {
    match std::env::var_os("QUEST_RUNNER_CLAUDE") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("npm/node_modules/.bin/claude"),
    }
}

/// A state dir whose config has one Claude account pointed at `server`.
fn runner_for(server: &ModelServer, concurrency: usize) -> (Runner, tempfile::TempDir) {
    let runner = Runner::new();
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("anthropic-key");
    std::fs::write(&key, "sk-test-SECRET-KEY-0042").unwrap();
    let config = serde_json::json!({
        "nix": {"options": {"substituters": ""}},
        "concurrency": concurrency,
        "accounts": {"main": {"agent": "claude", "api_key_file": key, "base_url": server.base_url()}},
    });
    std::fs::write(runner.state().join("config.json"), config.to_string()).unwrap();
    (runner, keys)
}

fn job(repo: &Repo, rev: &str, fields: Value) -> Value {
    let mut full = serde_json::json!({
        "repo": repo.src().to_string_lossy(),
        "rev": rev,
        "ref": "main",
        "trust": "trusted",
        "agent": "claude",
        "account": "main",
        "prompt": "Do nothing.",
        "timeout": "3m",
    });
    for (k, v) in fields.as_object().unwrap() {
        full[k] = v.clone();
    }
    full
}

fn submit(runner: &Runner, dir: &Path, job: &Value) -> Output {
    let path = dir.join(format!("job-{}.json", unique_token()));
    std::fs::write(&path, job.to_string()).unwrap();
    runner.command().arg("submit").arg(&path).output().unwrap()
}

fn submit_ok(runner: &Runner, dir: &Path, job: &Value) -> String {
    let out = submit(runner, dir, job);
    assert!(
        out.status.success(),
        "submit: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A running `quest-runner serve`, its stderr kept in a file; SIGKILLed if still running
/// when dropped.
struct Serve {
    child: Option<Child>,
    log: PathBuf,
}

impl Serve {
    fn start(runner: &Runner, server: &ModelServer, log_dir: &Path) -> Serve {
        let log = log_dir.join(format!("serve-{}.log", unique_token()));
        let mut cmd = runner.command();
        cmd.env("QUEST_RUNNER_CLAUDE", agent_binary())
            .args(["serve", "--poll", "100ms"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        server.confine(&mut cmd);
        Serve {
            child: Some(cmd.spawn().unwrap()),
            log,
        }
    }

    fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    /// Waits (at most 30 s) until the runner's log mentions `needle`.
    fn wait_log(&self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.log().contains(needle) {
            assert!(
                Instant::now() < deadline,
                "no {needle:?} in the log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends `sig` and waits for the exit, which must come within 10 s.
    fn stop(&mut self, sig: i32) -> (std::process::ExitStatus, Duration) {
        let mut child = self.child.take().unwrap();
        let started = Instant::now();
        unsafe { libc::kill(child.id() as i32, sig) };
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return (status, started.elapsed());
            }
            if started.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "serve did not exit within 10 s of signal {sig}:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn show(runner: &Runner, id: &str) -> Value {
    let out = runner.command().args(["show", id]).output().unwrap();
    assert!(
        out.status.success(),
        "show {id}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Waits until job `id` is in `state` (as `show` reports it).
fn wait_state(runner: &Runner, id: &str, state: &str, serve: &Serve, limit: Duration) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let out = runner.command().args(["show", id]).output().unwrap();
        if out.status.success() {
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            if v["state"] == state {
                return v;
            }
        }
        assert!(
            Instant::now() < deadline,
            "job {id} never reached {state}; now {}\n--- serve log ---\n{}",
            String::from_utf8_lossy(&out.stdout),
            serve.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn wait_for_process(token: &str, serve: &Serve) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while processes_with(token).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the agent's command never started\n{}",
            serve.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The private temp dir a job attempt used, from its Claude settings.
fn temp_dir_of(job_dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(job_dir.join("runner/claude/settings.json")).unwrap();
    let settings: Value = serde_json::from_str(&text).unwrap();
    settings["sandbox"]["filesystem"]["allowWrite"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| PathBuf::from(v.as_str().unwrap()))
        .find(|p| p.to_string_lossy().starts_with("/tmp/quest-job-"))
        .expect("a quest-job temp dir")
}

fn assert_clean(runner: &Runner, id: &str) {
    let job_dir = runner.state().join("jobs").join(id);
    assert!(!job_dir.join("checkout").exists(), "{id}: worktree left");
    assert!(
        !job_dir.join("workspace.json").exists(),
        "{id}: workspace record left"
    );
    if job_dir.join("runner/claude/settings.json").exists() {
        let temp = temp_dir_of(&job_dir);
        assert!(!temp.exists(), "{id}: temp dir {} left", temp.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_runs_jobs_side_by_side_sharing_one_devshell_build() {
    let repo = Repo::new();
    let rev = repo.commit(&[("flake.nix", &flake(r#"SHARED = "yes";"#))]);
    let server = ModelServer::start_isolated(vec![]).expect("model server");
    let (mut runner, keys) = runner_for(&server, 2);
    let (nix, count) = counting_nix(keys.path());
    runner.nix = Some(nix);
    let ids: Vec<String> = ["s1", "s2", "s3"]
        .iter()
        .map(|id| {
            submit_ok(
                &runner,
                keys.path(),
                &job(&repo, &rev, serde_json::json!({"id": id})),
            )
        })
        .chain([submit_ok(
            &runner,
            keys.path(),
            &job(&repo, &rev, serde_json::json!({})),
        )])
        .collect();
    assert_eq!(&ids[..3], ["s1", "s2", "s3"]);
    let listed = runner.command().args(["jobs", "--json"]).output().unwrap();
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert!(listed
        .as_array()
        .unwrap()
        .iter()
        .all(|j| j["state"] == "queued"));

    let mut serve = Serve::start(&runner, &server, keys.path());
    let started = Instant::now();
    let ids_c = ids.clone();
    let runner = tokio::task::spawn_blocking(move || {
        for id in &ids_c {
            let v = wait_state(&runner, id, "done", &serve, Duration::from_secs(240));
            assert_eq!(v["result"]["outcome"], "succeeded", "{v}");
            assert_eq!(v["attempts"].as_array().unwrap().len(), 1);
            assert_clean(&runner, id);
        }
        let elapsed = started.elapsed();
        let (status, took) = serve.stop(libc::SIGTERM);
        assert!(status.success(), "serve exit {status}:\n{}", serve.log());
        eprintln!("4 jobs at concurrency 2: {elapsed:?}; stopped in {took:?}");
        runner
    })
    .await
    .unwrap();
    assert_eq!(
        runs(&count),
        1,
        "one devShell build for four jobs at one revision"
    );

    let out = runner.command().args(["jobs"]).output().unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        table.lines().filter(|l| l.contains(" done ")).count(),
        4,
        "{table}"
    );
    let logs = runner.command().args(["logs", "s1"]).output().unwrap();
    assert!(logs.status.success());
    let transcript = runner
        .command()
        .args(["logs", "s1", "--transcript"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&transcript.stdout).contains("\"type\""),
        "the transcript is the agent's event stream"
    );
    let gc = runner
        .command()
        .args(["gc", "--older-than", "0s"])
        .output()
        .unwrap();
    let gc: Value = serde_json::from_slice(&gc.stdout).unwrap();
    assert_eq!(gc["removed"].as_array().unwrap().len(), 4, "{gc}");
    assert!(!runner.state().join("jobs/s1").exists());
    assert!(server.confined_processes().is_empty(), "processes left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_with_a_message_and_the_queue_keeps_working() {
    let repo = Repo::new();
    let rev = repo.commit(&[("README.md", "x")]);
    let server = ModelServer::start_isolated(vec![]).expect("model server");
    let (runner, keys) = runner_for(&server, 1);
    let dir = keys.path();

    let malformed = dir.join("malformed.json");
    std::fs::write(&malformed, "{\"repo\": ").unwrap();
    let out = runner
        .command()
        .arg("submit")
        .arg(&malformed)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid job"));

    let cases = [
        (serde_json::json!({"id": "a/b"}), "\"id\""),
        (serde_json::json!({"id": ".."}), "\"id\""),
        (serde_json::json!({"id": "../../etc"}), "\"id\""),
        (serde_json::json!({"account": "nobody"}), "\"nobody\""),
        (
            serde_json::json!({"colour": "red"}),
            "unknown field `colour`",
        ),
        (serde_json::json!({"rev": "abc"}), "\"rev\""),
    ];
    for (fields, needle) in cases {
        let out = submit(&runner, dir, &job(&repo, &rev, fields.clone()));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{fields}: {stderr}");
        assert!(stderr.contains(needle), "{fields}: {stderr}");
    }
    submit_ok(
        &runner,
        dir,
        &job(&repo, &rev, serde_json::json!({"id": "good"})),
    );
    let out = submit(
        &runner,
        dir,
        &job(&repo, &rev, serde_json::json!({"id": "good"})),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already taken"));

    // Files other programs drop into queue/: a broken one, one whose id is not its name, and
    // a good one (written under a dot-name, then renamed).
    let queue = runner.state().join("queue");
    std::fs::write(queue.join("broken.json"), "not json").unwrap();
    std::fs::write(
        queue.join("liar.json"),
        job(&repo, &rev, serde_json::json!({"id": "other"})).to_string(),
    )
    .unwrap();
    std::fs::write(
        queue.join(".dropped.tmp"),
        job(&repo, &rev, serde_json::json!({})).to_string(),
    )
    .unwrap();
    std::fs::rename(queue.join(".dropped.tmp"), queue.join("dropped.json")).unwrap();

    let serve = Serve::start(&runner, &server, dir);
    // SIGHUP reloads the config: once ready, a bad config is refused and the old one kept,
    // a good one is taken.
    serve.wait_log("serving");
    let config_path = runner.state().join("config.json");
    let good_config = std::fs::read_to_string(&config_path).unwrap();
    std::fs::write(&config_path, "{\"concurrency\": 0}").unwrap();
    unsafe { libc::kill(serve.pid(), libc::SIGHUP) };
    serve.wait_log("keeping the current config");
    std::fs::write(
        &config_path,
        good_config.replace("\"concurrency\":1", "\"concurrency\":2"),
    )
    .unwrap();
    unsafe { libc::kill(serve.pid(), libc::SIGHUP) };
    serve.wait_log("configuration reloaded");
    let runner = tokio::task::spawn_blocking(move || {
        for id in ["good", "dropped"] {
            let v = wait_state(&runner, id, "done", &serve, Duration::from_secs(180));
            assert_eq!(v["result"]["outcome"], "succeeded", "{v}");
        }
        drop(serve);
        runner
    })
    .await
    .unwrap();
    let listed = runner.command().args(["jobs", "--json"]).output().unwrap();
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let rejected: Vec<&Value> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["state"] == "rejected")
        .collect();
    assert_eq!(rejected.len(), 2, "{listed}");
    assert!(rejected
        .iter()
        .any(|j| j["message"].as_str().unwrap().contains("invalid job")));
    assert!(rejected
        .iter()
        .any(|j| j["message"].as_str().unwrap().contains("differs")));
    let out = runner.command().args(["show", "../x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    server.kill_confined();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_runner_is_recovered_on_restart_and_the_job_completes() {
    let token = unique_token();
    let repo = Repo::new();
    let rev = repo.commit(&[("README.md", "x")]);
    let server = ModelServer::start_isolated(vec![Step::bash(format!(
        "echo started > started.txt; (exec -a hang-{token} tail -f /dev/null)"
    ))])
    .expect("model server");
    let (runner, keys) = runner_for(&server, 1);
    submit_ok(
        &runner,
        keys.path(),
        &job(&repo, &rev, serde_json::json!({"id": "k"})),
    );
    let log_dir = keys.path().to_path_buf();
    let server_pids = {
        let serve = Serve::start(&runner, &server, &log_dir);
        wait_for_process(&format!("hang-{token}"), &serve);
        unsafe { libc::kill(serve.pid(), libc::SIGKILL) };
        drop(serve);
        server.confined_processes()
    };
    assert_eq!(
        show(&runner, "k")["state"],
        "running",
        "left running by the dead runner"
    );
    eprintln!(
        "left after kill -9: {} confined processes",
        server_pids.len()
    );

    let serve = Serve::start(&runner, &server, &log_dir);
    let (runner, mut serve, v) = tokio::task::spawn_blocking(move || {
        let v = wait_state(&runner, "k", "done", &serve, Duration::from_secs(180));
        (runner, serve, v)
    })
    .await
    .unwrap();
    assert_eq!(v["result"]["outcome"], "succeeded", "{v}");
    let attempts = v["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{v}");
    assert!(
        attempts[0]["reason"].as_str().unwrap().contains("died"),
        "{v}"
    );
    assert!(
        processes_with(&token).is_empty(),
        "the first attempt's command survived"
    );
    assert_clean(&runner, "k");
    let first = runner.state().join("serve/attempts/k/1");
    assert!(
        !first.join("checkout").exists(),
        "the first attempt's worktree is gone"
    );
    let temp = temp_dir_of(&first);
    assert!(
        !temp.exists(),
        "the first attempt's temp dir {} is left",
        temp.display()
    );
    let (status, _) = serve.stop(libc::SIGTERM);
    assert!(status.success(), "{}", serve.log());
    assert!(server.confined_processes().is_empty(), "processes left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_requeues_a_running_job_and_cancel_stops_it() {
    let token = unique_token();
    let repo = Repo::new();
    let rev = repo.commit(&[("README.md", "x")]);
    let hang = |t: &str| Step::bash(format!("(exec -a hang-{t} tail -f /dev/null)"));
    let server = ModelServer::start_isolated(vec![hang(&token)]).expect("model server");
    let (runner, keys) = runner_for(&server, 1);
    submit_ok(
        &runner,
        keys.path(),
        &job(&repo, &rev, serde_json::json!({"id": "t"})),
    );
    let log_dir = keys.path().to_path_buf();

    let mut serve = Serve::start(&runner, &server, &log_dir);
    wait_for_process(&format!("hang-{token}"), &serve);
    let (status, took) = serve.stop(libc::SIGTERM);
    assert!(status.success(), "{}", serve.log());
    eprintln!("SIGTERM with a running job: exited in {took:?}");
    let v = show(&runner, "t");
    assert_eq!(v["state"], "queued", "{v}");
    assert!(
        v["attempts"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("SIGTERM"),
        "{v}"
    );
    let first: Value = serde_json::from_str(
        &std::fs::read_to_string(runner.state().join("serve/attempts/t/1/result.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(first["outcome"], "cancelled", "{first}");
    assert!(first["message"].as_str().unwrap().contains("interrupted"));
    assert!(
        processes_with(&token).is_empty(),
        "the command survived SIGTERM"
    );

    let token2 = unique_token();
    server.set_script(vec![hang(&token2)]);
    let serve = Serve::start(&runner, &server, &log_dir);
    wait_for_process(&format!("hang-{token2}"), &serve);
    let out = runner.command().args(["cancel", "t"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (runner, serve) = tokio::task::spawn_blocking(move || {
        let v = wait_state(&runner, "t", "cancelled", &serve, Duration::from_secs(30));
        assert!(
            v["result"]["message"].as_str().unwrap().contains("cancel"),
            "{v}"
        );
        (runner, serve)
    })
    .await
    .unwrap();
    assert!(
        processes_with(&token2).is_empty(),
        "the command survived cancel"
    );
    assert_clean(&runner, "t");
    let out = runner.command().args(["cancel", "t"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "cancelling a finished job is refused"
    );
    drop(serve);
    server.kill_confined();
}
