//! `serve` on many hosts sharing one PostgreSQL queue, end to end: three runners with state
//! directories of their own (three "hosts"), the real Claude Code in its real sandbox and the
//! scripted model in a private network namespace (the runners reach the database through its
//! socket, which a network namespace does not hide), a real PostgreSQL server the tests start
//! and stop (tests/support/postgres.rs), and a fourth process — a host with no runner and no
//! accounts — that submits, lists, shows, follows and cancels.

use crate::support;
use crate::support::postgres;

use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use postgres::Postgres;
use quest_runner_selftest::model_server::{ModelServer, Step};
use serde_json::{json, Value};
use support::*;

fn agent_binary() -> PathBuf {
    match std::env::var_os("QUEST_RUNNER_CLAUDE") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("npm/node_modules/.bin/claude"),
    }
}

/// One host: a state directory whose config points at the shared queue, and (once started)
/// its `serve`, whose stderr is kept in a file. The serve is SIGKILLed if still running when
/// dropped, and the state directory's cgroup removed.
struct Host {
    name: &'static str,
    runner: Runner,
    serve: Option<Child>,
    pid: i32,
    log: PathBuf,
}

impl Host {
    /// A runner's host: one Claude account pointed at `server` (with `key`), the queue.
    fn runner(
        name: &'static str,
        pg: &Postgres,
        server: &ModelServer,
        key: &Path,
        lease: &str,
    ) -> Host {
        Host::with_config(
            name,
            json!({
                "nix": {"options": {"substituters": ""}},
                "concurrency": 1,
                "accounts": {"main": {"agent": "claude", "api_key_file": key,
                                      "base_url": server.base_url()}},
                "queue": {"postgres": pg.conninfo(), "lease": lease},
            }),
        )
    }

    /// A host that only talks to the queue: no accounts, no runner.
    fn client(pg: &Postgres) -> Host {
        Host::with_config("client", json!({"queue": {"postgres": pg.conninfo()}}))
    }

    fn with_config(name: &'static str, config: Value) -> Host {
        let runner = Runner::new();
        std::fs::write(runner.state().join("config.json"), config.to_string()).unwrap();
        let log = runner.state().join("serve.log");
        Host {
            name,
            runner,
            serve: None,
            pid: 0,
            log,
        }
    }

    fn command(&self) -> std::process::Command {
        self.runner.command()
    }

    fn start(&mut self, server: &ModelServer, args: &[&str]) {
        assert!(self.serve.is_none());
        let mut cmd = self.command();
        cmd.env("QUEST_RUNNER_CLAUDE", agent_binary())
            .args(["serve", "--poll", "100ms"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.log)
                    .unwrap(),
            );
        server.confine(&mut cmd);
        let child = cmd.spawn().unwrap();
        self.pid = child.id() as i32;
        self.serve = Some(child);
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (at most 60 s) until the log mentions `needle` `times` times.
    fn wait_log(&self, needle: &str, times: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.log().matches(needle).count() < times {
            assert!(
                Instant::now() < deadline,
                "{}: no {needle:?} in the log:\n{}",
                self.name,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM; the exit must be clean and within 10 s.
    fn stop(&mut self) {
        let mut child = self.serve.take().unwrap();
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "{}: serve did not exit within 10 s:\n{}",
                    self.name,
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "{}: {status}\n{}", self.name, self.log());
    }

    fn kill(&mut self) {
        let mut child = self.serve.take().unwrap();
        let _ = child.kill();
        let _ = child.wait();
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command().args(args).output().unwrap()
    }

    fn submit(&self, job: &Value) -> Output {
        let path = self
            .runner
            .state()
            .join(format!("job-{}.json", unique_token()));
        std::fs::write(&path, job.to_string()).unwrap();
        self.command().arg("submit").arg(&path).output().unwrap()
    }

    fn submit_ok(&self, job: &Value) -> String {
        let out = self.submit(job);
        assert!(
            out.status.success(),
            "submit: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn show(&self, id: &str) -> Value {
        let out = self.run(&["show", id]);
        assert!(
            out.status.success(),
            "show {id}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Some(mut child) = self.serve.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        use quest_runner::serve::{cgroup, limits::Limits};
        if let Some(group) = cgroup::probe(&Limits::default(), self.runner.state()).cgroup {
            let _ = cgroup::kill_and_remove(&group.base);
        }
    }
}

fn job(repo: &Repo, rev: &str, fields: Value) -> Value {
    let mut full = json!({
        "repo": repo.src().to_string_lossy(), "rev": rev, "ref": "main", "trust": "trusted",
        "agent": "claude", "account": "main", "prompt": "Do nothing.", "timeout": "3m",
    });
    for (k, v) in fields.as_object().unwrap() {
        full[k] = v.clone();
    }
    full
}

/// Waits until every job of `ids` has ended (as `client` sees it); returns them.
fn wait_ended(client: &Host, ids: &[String], hosts: &[&Host], limit: Duration) -> Vec<Value> {
    let deadline = Instant::now() + limit;
    loop {
        let shown: Vec<Value> = ids.iter().map(|id| client.show(id)).collect();
        if shown
            .iter()
            .all(|v| ["done", "failed", "cancelled"].contains(&v["state"].as_str().unwrap()))
        {
            return shown;
        }
        if Instant::now() > deadline {
            let logs: Vec<String> = hosts
                .iter()
                .map(|h| format!("--- {} ---\n{}", h.name, h.log()))
                .collect();
            panic!(
                "jobs not ended within {limit:?}: {shown:#?}\n{}",
                logs.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Runner hosts named `names` (lease `lease`), their `serve`s started with `args`, serving.
fn serving_hosts(
    names: &[&'static str],
    pg: &Postgres,
    server: &ModelServer,
    key: &Path,
    lease: &str,
    args: &[&str],
) -> Vec<Host> {
    let mut hosts: Vec<Host> = names
        .iter()
        .map(|n| Host::runner(n, pg, server, key, lease))
        .collect();
    for h in &mut hosts {
        h.start(server, args);
    }
    for h in &hosts {
        h.wait_log("serving", 1);
    }
    hosts
}

/// Waits until a process's command line mentions `token` (`present`), or none does.
fn wait_for_process(token: &str, present: bool, limit: Duration) {
    let deadline = Instant::now() + limit;
    while processes_with(token).is_empty() == present {
        assert!(
            Instant::now() < deadline,
            "{token}: still {} after {limit:?}",
            if present { "absent" } else { "running" }
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn key_file(dir: &Path) -> PathBuf {
    let key = dir.join("anthropic-key");
    std::fs::write(&key, "sk-test-SECRET-KEY-0042").unwrap();
    key
}

/// Three hosts, many jobs: each runs exactly once, the hosts share them, everything about
/// them is seen from a fourth host, and a job's command cannot reach the queue's database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hosts_share_the_queue_and_run_each_job_once() {
    let pg = Postgres::start();
    let token = unique_token();
    // The command a job will try: connect to the queue's socket.
    let probe = format!(
        "import socket\ntry:\n    s = socket.socket(socket.AF_UNIX)\n    s.connect({:?})\n    print('CONNECTED-{token}')\nexcept OSError as e:\n    print('REFUSED-{token}', e)\n",
        pg.socket().display().to_string()
    );
    let unconfined = std::process::Command::new("python3")
        .arg("-c")
        .arg(&probe)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&unconfined.stdout).contains(&format!("CONNECTED-{token}")),
        "unconfined, the probe reaches the database: {unconfined:?}"
    );
    let script = format!("python3 - <<'EOF'\n{probe}EOF");
    let server = ModelServer::start_isolated(vec![Step::bash(script)]).expect("model server");
    let repo = Repo::new();
    let rev = repo.commit(&[("README.md", "x")]);
    let keys = tempfile::tempdir().unwrap();
    let key = key_file(keys.path());
    let hosts = serving_hosts(&["a", "b", "c"], &pg, &server, &key, "30s", &[]);
    let client = Host::client(&pg);

    // Bad submits, from the host without accounts: refused with the reason, nothing queued.
    let out = client.submit(&job(&repo, &rev, json!({"account": "nobody"})));
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("\"nobody\"") && stderr.contains("main"),
        "{stderr}"
    );
    for (fields, needle) in [
        (json!({"id": "../x"}), "\"id\""),
        (json!({"rev": "abc"}), "\"rev\""),
        (json!({"colour": "red"}), "unknown field `colour`"),
    ] {
        let out = client.submit(&job(&repo, &rev, fields.clone()));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{fields}: {stderr}");
        assert!(stderr.contains(needle), "{fields}: {stderr}");
    }
    // A bad row another program wrote straight into the table: set aside by a runner.
    pg.sql(&format!(
        "INSERT INTO quest_runner.jobs (id, spec) VALUES ('bad-row', '{}')",
        job(&repo, &rev, json!({"colour": "red"}))
    ));

    // The probe: the job's command tries the database's socket.
    client.submit_ok(&job(&repo, &rev, json!({"id": "probe"})));
    let ids: Vec<String> = (0..9).map(|i| format!("m{i}")).collect();
    for id in &ids {
        client.submit_ok(&job(&repo, &rev, json!({ "id": id })));
    }
    let duplicate = client.submit(&job(&repo, &rev, json!({"id": "m0"})));
    assert_eq!(duplicate.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&duplicate.stderr).contains("already taken"));

    let all: Vec<String> = std::iter::once("probe".to_string())
        .chain(ids.clone())
        .collect();
    let (client, hosts, shown) = tokio::task::spawn_blocking(move || {
        let refs: Vec<&Host> = hosts.iter().collect();
        let shown = wait_ended(&client, &all, &refs, Duration::from_secs(600));
        (client, hosts, shown)
    })
    .await
    .unwrap();

    let mut by_host: std::collections::BTreeMap<i64, usize> = Default::default();
    for v in &shown {
        assert_eq!(v["state"], "done", "{v:#}");
        assert_eq!(v["result"]["outcome"], "succeeded", "{v:#}");
        let attempts = v["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 1, "ran once: {v:#}");
        *by_host
            .entry(attempts[0]["runner_pid"].as_i64().unwrap())
            .or_default() += 1;
    }
    let names: Vec<(&str, usize)> = hosts
        .iter()
        .map(|h| (h.name, by_host.get(&(h.pid as i64)).copied().unwrap_or(0)))
        .collect();
    eprintln!("jobs per host: {names:?}");
    assert!(by_host.len() >= 2, "the hosts shared the jobs: {names:?}");
    assert_eq!(
        pg.sql("SELECT count(*) FROM quest_runner.attempts WHERE outcome = 'succeeded'"),
        "10",
        "no job ran twice"
    );

    // The probe's command ran in the job's sandbox, and could not reach the database.
    let results: Vec<String> = server.tool_results().into_iter().map(|r| r.text).collect();
    let probed = results
        .iter()
        .find(|t| t.contains(&token))
        .unwrap_or_else(|| panic!("the probe never ran: {results:?}"));
    assert!(
        probed.contains(&format!("REFUSED-{token}"))
            && !probed.contains(&format!("CONNECTED-{token}")),
        "a job's command reached the queue's database: {probed}"
    );

    // The bad row, listed with its reason.
    let listed = client.run(&["jobs", "--json"]);
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let bad = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["id"] == "bad-row")
        .unwrap();
    assert_eq!(bad["state"], "rejected", "{bad}");
    assert!(
        bad["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `colour`"),
        "{bad}"
    );

    // Logs from the fourth host, wherever the job ran.
    let transcript = client.run(&["logs", "m0", "--transcript"]);
    assert!(transcript.status.success());
    assert!(
        String::from_utf8_lossy(&transcript.stdout).contains("\"type\""),
        "the transcript is the agent's event stream"
    );
    // The job's model log too (the runner's, shipped beside the agent's streams), and the
    // rendered activity.
    let model = client.run(&["logs", "m0", "--model"]);
    assert!(
        model.status.success() && !model.stdout.is_empty(),
        "{model:?}"
    );
    let activity = client.run(&["logs", "m0"]);
    assert!(
        String::from_utf8_lossy(&activity.stdout).contains("start  model "),
        "{activity:?}"
    );
    let followed = client.run(&["logs", "m1", "--follow"]);
    assert!(followed.status.success(), "a finished job's --follow ends");
    let table = client.run(&["jobs"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert_eq!(
        table.lines().filter(|l| l.contains(" done ")).count(),
        10,
        "{table}"
    );

    let gc = client.run(&["gc", "--older-than", "0s"]);
    let gc: Value = serde_json::from_slice(&gc.stdout).unwrap();
    assert_eq!(gc["removed"].as_array().unwrap().len(), 11, "{gc}");

    let mut hosts = hosts;
    for h in &mut hosts {
        h.stop();
    }
    assert_eq!(
        pg.sql("SELECT count(*) FROM quest_runner.runners"),
        "0",
        "clean stops leave the list"
    );
    assert!(server.confined_processes().is_empty(), "processes left");
}

/// A runner killed with SIGKILL mid-job: another host runs the job to the end as its second
/// attempt once the lease has expired, the first attempt recorded as lost with where it
/// ran; the killed host's next start stops what its dead process left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_runners_job_is_finished_by_another_host_after_its_lease() {
    let pg = Postgres::start();
    let Hanging {
        token,
        repo,
        rev,
        server,
    } = Hanging::new();
    let keys = tempfile::tempdir().unwrap();
    let key = key_file(keys.path());
    let mut a = serving_hosts(&["a"], &pg, &server, &key, "3s", &[]).remove(0);
    a.submit_ok(&job(&repo, &rev, json!({"id": "k"})));
    let hang = format!("hang-{token}");
    wait_for_process(&hang, true, Duration::from_secs(120));
    // Started once the job is taken: only a takeover can give it to them.
    let recover = ["--recover-every", "500ms"];
    let others = serving_hosts(&["b", "c"], &pg, &server, &key, "3s", &recover);
    let dead_pid = a.pid;
    a.kill();
    let killed_at = Instant::now();

    let client = Host::client(&pg);
    let (client, others, v) = tokio::task::spawn_blocking(move || {
        let refs: Vec<&Host> = others.iter().collect();
        let v = wait_ended(&client, &["k".to_string()], &refs, Duration::from_secs(240)).remove(0);
        (client, others, v)
    })
    .await
    .unwrap();
    eprintln!(
        "taken over and finished {:?} after the kill",
        killed_at.elapsed()
    );
    assert_eq!(v["state"], "done", "{v:#}");
    assert_eq!(v["result"]["outcome"], "succeeded", "{v:#}");
    let attempts = v["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{v:#}");
    assert_eq!(attempts[0]["outcome"], "lost", "{v:#}");
    assert_eq!(attempts[0]["runner_pid"], dead_pid, "{v:#}");
    assert!(
        attempts[0]["reason"]
            .as_str()
            .unwrap()
            .contains("stopped renewing its lease"),
        "{v:#}"
    );
    let second = attempts[1]["runner_pid"].as_i64().unwrap() as i32;
    assert!(others.iter().any(|h| h.pid == second), "{v:#}");
    assert!(others
        .iter()
        .any(|h| h.log().contains("stopped renewing its lease")));

    // The killed host starts again: whatever its dead process left of the job is stopped.
    a.start(&server, &[]);
    a.wait_log("serving", 2);
    wait_for_process(&hang, false, Duration::from_secs(30));
    let mut others = others;
    a.stop();
    for h in &mut others {
        h.stop();
    }
    drop(client);
    assert!(server.confined_processes().is_empty(), "processes left");
}

/// PostgreSQL stopped while jobs run, for longer than their lease, and started again: the
/// runners keep their jobs running, record their ends once it is back, lose none and run
/// none twice, and take new jobs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stopped_mid_run_loses_no_job_and_runs_none_twice() {
    let mut pg = Postgres::start();
    let token = unique_token();
    let pause = format!("pause-{token}");
    let step = || Step::bash(format!("(exec -a {pause} sleep 6)"));
    let server = ModelServer::start_isolated(vec![step(), step(), step()]).expect("model server");
    let repo = Repo::new();
    let rev = repo.commit(&[("README.md", "x")]);
    let keys = tempfile::tempdir().unwrap();
    let key = key_file(keys.path());
    let recover = ["--recover-every", "500ms"];
    let hosts = serving_hosts(&["a", "b", "c"], &pg, &server, &key, "4s", &recover);
    let client = Host::client(&pg);
    let ids: Vec<String> = (0..3).map(|i| format!("p{i}")).collect();
    for id in &ids {
        client.submit_ok(&job(&repo, &rev, json!({ "id": id })));
    }
    wait_for_process(&pause, true, Duration::from_secs(120));
    pg.stop();
    let stopped_at = Instant::now();
    // Down for three leases at least, and until a job has ended meanwhile.
    let retried = || {
        hosts
            .iter()
            .filter(|h| h.log().contains("retried until the database is back"))
            .count()
    };
    std::thread::sleep(Duration::from_secs(12));
    while retried() == 0 {
        assert!(
            stopped_at.elapsed() < Duration::from_secs(120),
            "no job ended while the database was down"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for h in &hosts {
        assert!(h.serve.is_some());
    }
    assert!(
        hosts
            .iter()
            .all(|h| h.log().contains("lost the queue database")),
        "every runner noticed"
    );
    let retried = retried();
    pg.start_again();
    eprintln!(
        "PostgreSQL was down {:?}; {retried} runner(s) kept a job's end meanwhile",
        stopped_at.elapsed()
    );

    let (client, hosts, shown) = tokio::task::spawn_blocking(move || {
        let refs: Vec<&Host> = hosts.iter().collect();
        let shown = wait_ended(&client, &ids, &refs, Duration::from_secs(300));
        (client, hosts, shown)
    })
    .await
    .unwrap();
    for v in &shown {
        assert_eq!(v["state"], "done", "{v:#}");
        assert_eq!(v["result"]["outcome"], "succeeded", "{v:#}");
        assert_eq!(
            v["attempts"].as_array().unwrap().len(),
            1,
            "ran once: {v:#}"
        );
    }
    assert_eq!(
        pg.sql("SELECT count(*) FROM quest_runner.attempts"),
        "3",
        "none ran twice"
    );

    // And the queue goes on.
    client.submit_ok(&job(&repo, &rev, json!({"id": "after"})));
    let (client, mut hosts, shown) = tokio::task::spawn_blocking(move || {
        let refs: Vec<&Host> = hosts.iter().collect();
        let shown = wait_ended(
            &client,
            &["after".to_string()],
            &refs,
            Duration::from_secs(180),
        );
        (client, hosts, shown)
    })
    .await
    .unwrap();
    assert_eq!(shown[0]["state"], "done", "{:#}", shown[0]);
    for h in &mut hosts {
        assert!(!h
            .runner
            .state()
            .join("serve/pg-pending")
            .read_dir()
            .is_ok_and(|mut d| d.next().is_some()));
        h.stop();
    }
    drop(client);
    assert!(server.confined_processes().is_empty(), "processes left");
}

/// `quest-runner cancel` from a fourth process reaches the running job's runner through
/// NOTIFY (leases are renewed only every 20 s here, so a renewal cannot be what brings it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_from_a_fourth_process_stops_a_running_job_at_once() {
    let pg = Postgres::start();
    let Hanging {
        token,
        repo,
        rev,
        server,
    } = Hanging::new();
    let keys = tempfile::tempdir().unwrap();
    let key = key_file(keys.path());
    let hosts = serving_hosts(&["a", "b", "c"], &pg, &server, &key, "60s", &[]);
    let client = Host::client(&pg);
    client.submit_ok(&job(&repo, &rev, json!({"id": "x"})));
    let hang = format!("hang-{token}");
    wait_for_process(&hang, true, Duration::from_secs(120));
    // A fourth process follows the job's event stream meanwhile: it keeps following while
    // the job runs, and ends once the job has.
    let mut follower = client
        .command()
        .args(["logs", "x", "--transcript", "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        follower.try_wait().unwrap().is_none(),
        "--follow ended while the job runs"
    );
    let asked = Instant::now();
    let out = client.run(&["cancel", "x"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("cancel requested"));
    let reached = loop {
        if hosts.iter().any(|h| h.log().contains("cancel requested")) {
            break asked.elapsed();
        }
        assert!(
            asked.elapsed() < Duration::from_secs(30),
            "the cancel never reached the runner"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    while !processes_with(&hang).is_empty() {
        assert!(
            asked.elapsed() < Duration::from_secs(60),
            "the job's command survived the cancel"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let stopped = asked.elapsed();
    eprintln!("cancel from a fourth process: reached the runner in {reached:?}, the job's command gone in {stopped:?}");
    assert!(
        reached < Duration::from_secs(15),
        "by NOTIFY, not by a renewal (every 20 s): {reached:?}"
    );
    let (client, mut hosts, v) = tokio::task::spawn_blocking(move || {
        let refs: Vec<&Host> = hosts.iter().collect();
        let v = wait_ended(&client, &["x".to_string()], &refs, Duration::from_secs(60)).remove(0);
        (client, hosts, v)
    })
    .await
    .unwrap();
    assert_eq!(v["state"], "cancelled", "{v:#}");
    assert!(
        v["result"]["message"].as_str().unwrap().contains("cancel"),
        "{v:#}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while follower.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "--follow did not end with the job"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let followed = follower.wait_with_output().unwrap();
    assert!(
        followed.status.success(),
        "{}",
        String::from_utf8_lossy(&followed.stderr)
    );
    let text = String::from_utf8_lossy(&followed.stdout);
    assert!(
        text.contains("\"type\"") && text.contains(&hang),
        "followed the job's event stream: {text}"
    );
    let out = client.run(&["cancel", "x"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a finished job's cancel is refused"
    );
    for h in &mut hosts {
        h.stop();
    }
    assert!(server.confined_processes().is_empty(), "processes left");
}
