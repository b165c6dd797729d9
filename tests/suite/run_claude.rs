//! `quest-runner run` end to end with the real Claude Code, its real sandbox (bubblewrap),
//! the real Nix devShell, and a scripted model on loopback: the model's one tool call uses
//! the devShell and commits in the checkout, and the result's HEAD carries that commit.

use crate::support;

use std::path::{Path, PathBuf};

use quest_runner_selftest::model_server::{ModelServer, Step};
use serde_json::Value;
use support::*;

pub fn agent_binary(var: &str, name: &str) -> PathBuf {
    match std::env::var_os(var) {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("npm/node_modules/.bin")
            .join(name),
    }
}

/// A runner state dir whose config has one Claude account pointed at `server`.
fn claude_runner(server: &ModelServer, key_dir: &Path) -> Runner {
    let runner = Runner::new();
    let key = key_dir.join("anthropic-key");
    std::fs::write(&key, "sk-test-SECRET-KEY-0042").unwrap();
    let config = serde_json::json!({
        "nix": {"options": {"substituters": ""}},
        "accounts": {"main": {"agent": "claude", "api_key_file": key, "base_url": server.base_url()}},
    });
    std::fs::write(runner.state().join("config.json"), config.to_string()).unwrap();
    runner
}

/// Sets the `limits` of `runner`'s config to `limits`.
fn set_limits(runner: &Runner, limits: Value) {
    let path = runner.state().join("config.json");
    let mut config: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    config["limits"] = limits;
    std::fs::write(&path, config.to_string()).unwrap();
}

/// Writes `job` (with defaults for the fields it leaves out) and returns its path.
fn job_file(dir: &Path, job: serde_json::Value) -> PathBuf {
    let mut full = serde_json::json!({
        "repo": "/nonexistent",
        "rev": "0123456789abcdef0123456789abcdef01234567",
        "ref": "main",
        "trust": "trusted",
        "agent": "claude",
        "account": "main",
        "prompt": "p",
    });
    for (k, v) in job.as_object().unwrap() {
        full[k] = v.clone();
    }
    let path = dir.join(format!("job-{}.json", unique_token()));
    std::fs::write(&path, full.to_string()).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_name_their_reason() {
    let repo = Repo::new();
    let rev = repo.commit(&[("README.md", "x")]);
    let server = ModelServer::start_isolated_if_root(vec![]).expect("model server");
    let keys = tempfile::tempdir().unwrap();
    let runner = claude_runner(&server, keys.path());
    let repo_path = repo.src().to_string_lossy().into_owned();
    let cases = [
        (
            serde_json::json!({"repo": repo_path, "rev": rev, "trust": "untrusted"}),
            4,
            "untrusted revisions are refused",
        ),
        (
            serde_json::json!({"repo": repo_path, "rev": rev, "account": "nobody"}),
            4,
            "unknown account \"nobody\"",
        ),
        (
            serde_json::json!({"repo": repo_path, "rev": rev, "agent": "opencode"}),
            4,
            "is for claude",
        ),
        (
            serde_json::json!({"repo": repo_path, "rev": "abc"}),
            2,
            "\"rev\"",
        ),
        (
            serde_json::json!({"colour": "red"}),
            2,
            "unknown field `colour`",
        ),
        (
            serde_json::json!({"repo": "ssh://-oProxyCommand=touch${IFS}/tmp/qr-pwned/r", "rev": rev}),
            2,
            "starts with '-'",
        ),
    ];
    for (job, code, needle) in cases {
        let file = job_file(keys.path(), job.clone());
        let out = runner
            .command()
            .args(["run", "--job"])
            .arg(&file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{job}: {stderr}");
        assert!(stderr.contains(needle), "{job}: {stderr}");
    }
    assert!(server.exchanges().is_empty(), "no agent ran");

    // Any bad config is bad input (2), named: empty, unreadable (a directory), invalid JSON,
    // and a named file that is missing.
    let file = job_file(
        keys.path(),
        serde_json::json!({"repo": repo_path, "rev": rev}),
    );
    let configs = keys.path().join("configs");
    std::fs::create_dir(&configs).unwrap();
    let empty = configs.join("empty.json");
    std::fs::write(&empty, "").unwrap();
    let invalid = configs.join("invalid.json");
    std::fs::write(&invalid, "{\"accounts\": ").unwrap();
    let dir = configs.join("dir.json");
    std::fs::create_dir(&dir).unwrap();
    // Below the disk reserve no job starts (refused, 4), and the message names the file
    // system, what is free and the reserve.
    let mut reserved: Value =
        serde_json::from_slice(&std::fs::read(runner.state().join("config.json")).unwrap())
            .unwrap();
    reserved["limits"] = serde_json::json!({"disk_reserve": "1000T"});
    let reserved_file = configs.join("reserve.json");
    std::fs::write(&reserved_file, reserved.to_string()).unwrap();
    let out = runner
        .command()
        .arg("--config")
        .arg(&reserved_file)
        .args(["run", "--job"])
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(
        stderr.contains("not enough disk space to start a job: the file system of ")
            && stderr.contains("below the runner's reserve of 1000 TiB"),
        "{stderr}"
    );
    for (config, needle) in [
        (&empty, "it is empty"),
        (&invalid, "EOF while parsing"),
        (&dir, "Is a directory"),
        (&configs.join("absent.json"), "No such file"),
    ] {
        let out = runner
            .command()
            .arg("--config")
            .arg(config)
            .args(["run", "--job"])
            .arg(&file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {stderr}", config.display());
        assert!(
            stderr.contains(&config.display().to_string()) && stderr.contains(needle),
            "{}: {stderr}",
            config.display()
        );
    }
}

/// stdout that cannot be written (here /dev/full, as on a full disk) does not lose the
/// result or panic: the result is in the job's directory, stderr says so, and the exit code
/// is the job's own.
#[test]
fn a_stdout_that_cannot_be_written_keeps_the_result_on_disk() {
    let keys = tempfile::tempdir().unwrap();
    let runner = Runner::new();
    let key = keys.path().join("key");
    std::fs::write(&key, "sk-unused").unwrap();
    let config =
        serde_json::json!({"accounts": {"main": {"agent": "claude", "api_key_file": key}}});
    std::fs::write(runner.state().join("config.json"), config.to_string()).unwrap();
    // The fetch fails: an error after the job's directory exists (exit 1).
    let absent = keys.path().join("no-such-repo");
    std::fs::create_dir(&absent).unwrap();
    let file = job_file(
        keys.path(),
        serde_json::json!({"id": "full-stdout", "repo": absent.to_string_lossy()}),
    );
    let out = runner
        .command()
        .args(["run", "--job"])
        .arg(&file)
        .stdout(
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .unwrap(),
        )
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let kept = runner.state().join("jobs/full-stdout/result.json");
    assert!(
        stderr.contains("writing to stdout") && stderr.contains(&kept.display().to_string()),
        "{stderr}"
    );
    let result: Value = serde_json::from_slice(&std::fs::read(&kept).unwrap()).unwrap();
    assert_eq!(result["outcome"], "error", "{result}");
}

/// A job whose one command hangs, stopped by its timeout or by a signal: either way the
/// agent's whole tree is gone, the workspace removed, and the result says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_and_signals_stop_the_agent_and_clean_up() {
    for how in ["timeout", "SIGTERM", "SIGINT"] {
        let Hanging {
            token,
            repo,
            rev,
            server,
        } = Hanging::new();
        let keys = tempfile::tempdir().unwrap();
        let runner = claude_runner(&server, keys.path());
        let file = job_file(
            keys.path(),
            serde_json::json!({"id": "stuck", "repo": repo.src().to_string_lossy(), "rev": rev,
                               "timeout": if how == "timeout" { "4s" } else { "5m" }}),
        );
        let mut cmd = runner.command();
        cmd.env(
            "QUEST_RUNNER_CLAUDE",
            agent_binary("QUEST_RUNNER_CLAUDE", "claude"),
        )
        .args(["run", "--job"])
        .arg(&file)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
        server.confine(&mut cmd);
        let child = cmd.spawn().unwrap();
        if how != "timeout" {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while processes_with(&format!("hang-{token}")).is_empty() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the command never started"
                );
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            let sig = if how == "SIGTERM" {
                libc::SIGTERM
            } else {
                libc::SIGINT
            };
            unsafe { libc::kill(child.id() as i32, sig) };
        }
        let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let result: Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{how}: {e}: {stderr}"));
        let (code, outcome) = match how {
            "timeout" => (5, "timed_out"),
            "SIGTERM" => (143, "cancelled"),
            _ => (130, "cancelled"),
        };
        assert_eq!(out.status.code(), Some(code), "{how}: {stderr}");
        assert_eq!(result["outcome"], outcome, "{how}");
        assert!(
            processes_with(&token).is_empty(),
            "{how}: the command survived"
        );
        let job_dir = runner.state().join("jobs/stuck");
        assert!(!job_dir.join("checkout").exists(), "{how}: worktree left");
        assert!(
            job_dir.join("result.json").exists(),
            "{how}: no result saved"
        );
        let temp = claude_job_temp_dir(&job_dir);
        assert!(!temp.exists(), "{how}: temp dir {} left", temp.display());
        assert!(
            server.confined_processes().is_empty(),
            "{how}: processes left"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_job_uses_the_devshell_and_commits() {
    let repo = Repo::new();
    let rev = repo.commit(&[
        ("flake.nix", &flake(r#"DEVSHELL_VAR = "from-the-flake";"#)),
        ("AGENTS.md", "Always be brief. INSTRUCTION-MARK\n"),
        // A copy, as repositories keep one for each agent: sent once.
        ("CLAUDE.md", "Always be brief. INSTRUCTION-MARK\n"),
    ]);
    // The command also names what started it (pid 1 of its own PID namespace): srt's helper,
    // which the job's sandbox starts each command with (Claude Code's own sandbox, off, would
    // start it from its own executable's descriptor, named "3"), with no variable of either.
    // And it reaches for a registry on the job's allowlist (none answers in the test's
    // network namespace): the job's proxy starts then (`util::on_demand`), and is stopped
    // through its lifeline at the job's end.
    let server = ModelServer::start_isolated_if_root(vec![Step::bash(
        "echo \"stage=$(cat /proc/1/comm) argv0=${ARGV0-unset} helper=${QUEST_RUNNER_APPLY_SECCOMP-unset}\"; curl -s -m 20 -o /dev/null -w 'registry=%{http_code}\\n' https://registry.npmjs.org/left-pad; echo \"$DEVSHELL_VAR\" > devshell.txt && echo \"$TMPDIR\" > tmpdir.txt && git add devshell.txt tmpdir.txt && git commit -qm 'agent commit' && echo COMMITTED",
    )]).expect("model server");
    let keys = tempfile::tempdir().unwrap();
    let runner = claude_runner(&server, keys.path());
    let job = serde_json::json!({
        "id": "claude-e2e",
        "repo": repo.src().to_string_lossy(),
        "rev": rev,
        "ref": "main",
        "trust": "trusted",
        "agent": "claude",
        "account": "main",
        "prompt": "Record the devShell variable and commit it.",
        "timeout": "3m",
    });
    let job_file = keys.path().join("job.json");
    std::fs::write(&job_file, job.to_string()).unwrap();

    // The runner's TMPDIR, short enough for Claude Code's CLAUDE_CODE_TMPDIR: the job's
    // temp dir goes there.
    let tmpdir = tempfile::Builder::new()
        .prefix("qr")
        .tempdir_in("/tmp")
        .unwrap();
    let mut cmd = runner.command();
    cmd.env(
        "QUEST_RUNNER_CLAUDE",
        agent_binary("QUEST_RUNNER_CLAUDE", "claude"),
    )
    .env("TMPDIR", tmpdir.path())
    .args(["run", "--job"])
    .arg(&job_file);
    server.confine(&mut cmd);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let job_dir = runner.state().join("jobs/claude-e2e");
    let diagnostics = || {
        format!(
            "status {}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}\n--- agent.log ---\n{}\n--- transcript ---\n{}\n--- requests ---\n{}",
            out.status,
            std::fs::read_to_string(job_dir.join("runner/agent.log")).unwrap_or_default(),
            std::fs::read_to_string(job_dir.join("runner/transcript.jsonl")).unwrap_or_default(),
            server.summary()
        )
    };
    assert!(out.status.success(), "{}", diagnostics());
    let result: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(result["outcome"], "succeeded", "{}", diagnostics());
    let head = result["head"].as_str().unwrap().to_string();
    assert_ne!(head, rev);
    assert_eq!(result["commits"].as_array().unwrap().len(), 1);

    // The commit holds what the command saw: the variable of the revision's devShell.
    let bare = std::fs::read_dir(runner.state().join("repos"))
        .unwrap()
        .flatten()
        .find(|e| e.path().extension().is_some_and(|x| x == "git"))
        .unwrap()
        .path();
    let content = git(&bare, &["show", &format!("{head}:devshell.txt")]);
    assert_eq!(content, "from-the-flake");
    let job_tmp = git(&bare, &["show", &format!("{head}:tmpdir.txt")]);
    // (srt gives commands the job's temp dir, CLAUDE_CODE_TMPDIR to the sandbox host.)
    let in_tmpdir = Path::new(job_tmp.trim()).strip_prefix(tmpdir.path());
    assert!(
        in_tmpdir.is_ok_and(|p| p.to_string_lossy().starts_with("quest-job-")),
        "the commands' TMPDIR {job_tmp} is not a job temp dir in {}",
        tmpdir.path().display()
    );
    let results = server.tool_results();
    assert!(
        results.iter().any(|r| r.text.contains("COMMITTED")),
        "{}",
        diagnostics()
    );
    assert!(
        results.iter().any(|r| r
            .text
            .contains("stage=apply-seccomp argv0=unset helper=unset")),
        "{}",
        diagnostics()
    );
    assert!(
        results.iter().any(|r| r.text.contains("registry=")),
        "{}",
        diagnostics()
    );

    let first = server.requests()[0].to_string();
    assert_eq!(
        first.matches("INSTRUCTION-MARK").count(),
        1,
        "the instructions once in the first request: {first}"
    );
    // The key was on every request, put there by the runner's gateway: Claude Code held
    // only the job's token.
    assert_only_the_gateway_sent_the_key(&server, "SECRET-KEY", "sk-test-SECRET-KEY-0042");
    let exchanges = server.exchanges();
    let usage = &result["usage"];
    assert_eq!(
        usage["requests"].as_u64(),
        Some(exchanges.len() as u64),
        "{usage}"
    );
    // By model, as the answers name it (the scripted model echoes Claude Code's choice).
    let by_model: u64 = usage["models"]
        .as_object()
        .unwrap()
        .values()
        .map(|m| m["requests"].as_u64().unwrap())
        .sum();
    assert_eq!(by_model, exchanges.len() as u64, "{usage}");
    let model_log = std::fs::read_to_string(job_dir.join("model.log")).unwrap();
    assert_eq!(model_log.lines().count(), exchanges.len(), "{model_log}");
    assert!(!model_log.contains("SECRET-KEY"));
    let settings = std::fs::read_to_string(job_dir.join("runner/claude/settings.json")).unwrap();
    assert!(!settings.contains("anthropic-key"), "{settings}");
    assert!(!job_dir.join("runner/claude/.credentials.json").exists());
    assert!(!job_dir.join("checkout").exists(), "worktree removed");
    let temp = claude_job_temp_dir(&job_dir);
    assert!(!temp.exists(), "temp dir {} left", temp.display());
    // The network proxy, started by the command's request, ended through its lifeline when
    // the runner was done with it, not killed with the agent's leftovers.
    let proxy_log = std::fs::read_to_string(job_dir.join("runner/netproxy.log")).unwrap();
    assert!(
        proxy_log.contains("stopped (lifeline closed)"),
        "netproxy.log: {proxy_log}"
    );
}

/// The job's network proxy starts when a command first reaches for the network; one that
/// never comes to serve ends the job with its reason (the agent's tree stopped, nothing
/// left), not a job quietly running without network. The `srt` here is a real program that
/// fails on purpose after the agent's command has started; the command asks a registry on
/// the job's allowlist for a page first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_that_never_serves_ends_the_job_with_its_reason() {
    let Hanging {
        token,
        repo,
        rev,
        server,
    } = Hanging::after("(curl -s -m 600 https://registry.npmjs.org/ >/dev/null 2>&1 &)");
    let keys = tempfile::tempdir().unwrap();
    let runner = claude_runner(&server, keys.path());
    // In a package of its own whose library is the real one: the job's commands' sandbox
    // (srt's library, found from the srt binary) starts, the proxy (srt's binary) does not.
    let real = agent_binary("QUEST_RUNNER_SRT", "srt");
    let real_package = quest_runner::binaries::srt_package_dir(&real).unwrap();
    let package = keys.path().join("srt-package");
    std::fs::create_dir_all(package.join("bin")).unwrap();
    for name in ["package.json", "dist", "vendor"] {
        std::os::unix::fs::symlink(real_package.join(name), package.join(name)).unwrap();
    }
    let broken_srt = package.join("bin/srt");
    std::fs::write(
        &broken_srt,
        format!(
            "#!/bin/sh\n[ \"$1\" = --version ] && exec {} --version\n\
             while ! grep -qs '[h]ang-{token}' /proc/[0-9]*/cmdline; do sleep 0.1; done\n\
             echo 'srt proxy: broken on purpose' >&2\nexit 3\n",
            real.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &broken_srt,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let file = job_file(
        keys.path(),
        serde_json::json!({"id": "noproxy", "repo": repo.src().to_string_lossy(), "rev": rev}),
    );
    let mut cmd = runner.command();
    cmd.env(
        "QUEST_RUNNER_CLAUDE",
        agent_binary("QUEST_RUNNER_CLAUDE", "claude"),
    )
    .env("QUEST_RUNNER_SRT", &broken_srt)
    .args(["run", "--job"])
    .arg(&file);
    server.confine(&mut cmd);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let result: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    let message = result["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("network proxy") && message.contains("broken on purpose"),
        "{result}\n{stderr}"
    );
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(
        processes_with(&token).is_empty(),
        "the agent's command survived"
    );
    let job_dir = runner.state().join("jobs/noproxy");
    assert!(!job_dir.join("checkout").exists(), "worktree left");
    let temp = claude_job_temp_dir(&job_dir);
    assert!(!temp.exists(), "temp dir {} left", temp.display());
    assert!(server.confined_processes().is_empty(), "processes left");
}

/// The job's timeout bounds its preparation too, not only the agent: a fetch that never ends
/// (the source's `objects/info/alternates` is a FIFO its upload-pack waits on) and a devShell
/// build that never ends each end the job as timed out, naming the phase, and leave nothing
/// of theirs running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_timeout_bounds_the_fetch_and_the_devshell_build() {
    const FIVE_S: std::time::Duration = std::time::Duration::from_secs(5);
    let server = ModelServer::start_isolated_if_root(vec![]).expect("model server");
    let keys = tempfile::tempdir().unwrap();
    let runner = claude_runner(&server, keys.path());
    let run = |job: serde_json::Value| {
        let file = job_file(keys.path(), job);
        let out = runner
            .command()
            .args(["run", "--job"])
            .arg(&file)
            .output()
            .unwrap();
        let result: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        (out.status.code(), result)
    };

    let stuck = Repo::new();
    let stuck_rev = stuck.commit(&[("README.md", "x")]);
    let alternates = stuck.src().join(".git/objects/info/alternates");
    let made = std::process::Command::new("mkfifo")
        .arg(&alternates)
        .status()
        .unwrap();
    assert!(made.success());
    let upload_pack = stuck.src().to_string_lossy().into_owned();
    let (code, result) = run(serde_json::json!({
        "id": "stuck-fetch", "repo": upload_pack, "rev": stuck_rev, "timeout": "3s",
    }));
    assert_eq!(code, Some(5), "{result}");
    assert_eq!(result["outcome"], "timed_out", "{result}");
    let message = result["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("while preparing the workspace"),
        "{result}"
    );
    assert_no_process_with(&upload_pack, "the stuck fetch", FIVE_S);

    let slow_repo = Repo::new();
    let slow = SlowBuild::new();
    let slow_rev = slow_repo.commit(&[("flake.nix", &flake(&slow.extra))]);
    let watch = slow.watch();
    // The build sleeps for 300 s: 15 s leave the steps before it (fetch, workspace, the
    // flake's evaluation) room on a loaded host (4 s failed once with two suites running).
    let (code, result) = run(serde_json::json!({
        "id": "stuck-build", "repo": slow_repo.src().to_string_lossy(), "rev": slow_rev,
        "timeout": "15s",
    }));
    assert!(watch.seen(), "the slow build never started: {result}");
    assert_eq!(code, Some(5), "{result}");
    assert_eq!(result["outcome"], "timed_out", "{result}");
    let message = result["message"].as_str().unwrap_or_default();
    assert!(message.contains("while building the devShell"), "{result}");
    let builder = format!("sleep-{}", slow.token);
    assert_no_process_with(&builder, "the devShell's builder", FIVE_S);
    assert!(server.exchanges().is_empty(), "no agent ran");
}

/// A job's devShell build past `limits.disk` ends the job as the agent's writes would:
/// `failed`, `limit_fired: "disk"`, the message naming the limit and what held the bytes
/// (the build's outputs in its repository's store), and no agent started (issue 38).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_devshell_build_past_the_disk_limit_ends_the_job_and_says_so() {
    let server = ModelServer::start_isolated_if_root(vec![]).expect("model server");
    let keys = tempfile::tempdir().unwrap();
    let runner = claude_runner(&server, keys.path());
    set_limits(&runner, serde_json::json!({"disk": "16M"}));
    // Three outputs of 8 MiB, each under the limit, from bash's builtins; then a build that
    // goes on, as a large one would. (The limit is well above what nix's own scratch holds,
    // its fetches' caches: up to 4 MiB seen.)
    let system = system();
    let script = "x=x; for i in {1..16}; do x=$x$x; done; for o in $out $o1 $o2; do \
                  for i in {1..128}; do printf '%s' $x; done > $o; done; \
                  h=$((SECONDS+60)); while [ $SECONDS -lt $h ]; do :; done";
    let extra = format!(
        r#"BIG = derivation {{ name = "big-job-{}"; system = "{system}"; builder = "{BUILDER}";
        outputs = [ "out" "o1" "o2" ]; args = [ "-c" "{script}" ]; }};"#,
        unique_token()
    );
    let repo = Repo::new();
    let rev = repo.commit(&[("flake.nix", &flake(&extra))]);
    let file = job_file(
        keys.path(),
        serde_json::json!({"id": "big-build", "repo": repo.src().to_string_lossy(), "rev": rev,
                           "timeout": "3m"}),
    );
    let mut cmd = runner.command();
    cmd.args(["run", "--job"]).arg(&file);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let result: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    assert_eq!(result["outcome"], "failed", "{result}\n{stderr}");
    assert_eq!(result["limit_fired"], "disk", "{result}");
    let message = result["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("the disk limit fired: ")
            && message.contains("over limits.disk (16 MiB): repository store "),
        "{result}"
    );
    assert!(server.exchanges().is_empty(), "no agent ran");
    assert!(
        !runner.state().join("jobs/big-build/checkout").exists(),
        "worktree left"
    );
}

/// An untrusted job whose devShell build fails writes nothing to the host's store (issue 55):
/// Nix 2.8 moved a failed build's output to its logical path, the host's `/nix/store`, where
/// a build stopped at `limits.disk` left a file of the limit's size. The output may appear
/// only in the repository's store, and is gone from there too once the job has ended. The
/// host's store directory is polled from the test's mount namespace, the host's, while the
/// job runs. (`suite::devshell_confined` stops one at the disk limit too.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_jobs_failed_devshell_build_leaves_nothing_in_the_hosts_store() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let server = ModelServer::start_isolated_if_root(vec![]).expect("model server");
    let keys = tempfile::tempdir().unwrap();
    let runner = claude_runner(&server, keys.path());
    set_limits(&runner, serde_json::json!({"disk": "16M"}));
    let config_path = runner.state().join("config.json");
    let mut config: Value = serde_json::from_slice(&std::fs::read(&config_path).unwrap()).unwrap();
    config["allow_untrusted"] = Value::Bool(true);
    std::fs::write(&config_path, config.to_string()).unwrap();
    let system = system();
    let name = format!("h55-failed-{}", unique_token());
    // An output written, then the build failed, as a build stopped at the limit is.
    let script = "echo x > $out; exit 1";
    let extra = format!(
        r#"BIG = derivation {{ name = "{name}"; system = "{system}"; builder = "{BUILDER}";
        args = [ "-c" "{script}" ]; }};"#
    );
    let repo = Repo::new();
    let rev = repo.commit(&[("flake.nix", &flake(&extra))]);
    let file = job_file(
        keys.path(),
        serde_json::json!({"id": "big-host", "repo": repo.src().to_string_lossy(), "rev": rev,
                           "trust": "untrusted", "timeout": "3m"}),
    );
    let named = {
        let name = name.clone();
        move || -> Vec<PathBuf> {
            let store = quest_runner::store_path::store_dir();
            let entries = std::fs::read_dir(store).into_iter().flatten().flatten();
            entries
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().contains(&name))
                .collect()
        }
    };
    let done = Arc::new(AtomicBool::new(false));
    let poller = {
        let (done, named) = (done.clone(), named.clone());
        std::thread::spawn(move || {
            let mut seen = std::collections::BTreeSet::new();
            while !done.load(Ordering::Relaxed) {
                seen.extend(named());
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            seen
        })
    };
    let mut cmd = runner.command();
    cmd.args(["run", "--job"]).arg(&file);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    done.store(true, Ordering::Relaxed);
    let seen = poller.join().unwrap();
    let left = named();
    // What the runner before the fix left is not this test's to keep.
    for path in seen.iter().chain(&left) {
        let _ = std::fs::remove_file(path).or_else(|_| std::fs::remove_dir_all(path));
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let result: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    // A Nix error: the job could not run.
    assert_eq!(result["outcome"], "error", "{result}\n{stderr}");
    assert!(
        seen.is_empty(),
        "the job's build wrote to the host's store: {seen:?}\n{result}"
    );
    assert!(left.is_empty(), "left in the host's store: {left:?}");
    let stores = runner.state().join("devshell/stores");
    let in_repo_store: Vec<PathBuf> = std::fs::read_dir(&stores)
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|d| {
            let dir = quest_runner::devshell::repo_store::real_dir(&d.path());
            std::fs::read_dir(dir).into_iter().flatten().flatten()
        })
        .map(|e| e.path())
        .filter(|p| {
            let n = p.to_string_lossy();
            n.contains(&name) && !n.ends_with(".drv")
                || n.ends_with(".chroot")
                || n.ends_with(".lock")
        })
        .collect();
    assert!(
        in_repo_store.is_empty(),
        "left in the repository's store: {in_repo_store:?}"
    );
}

/// A job past `limits.disk` is stopped with `limit_fired: "disk"` and nothing left: the
/// kernel refuses one file larger than the limit (RLIMIT_FSIZE: `fallocate -l 10G` dies with
/// SIGXFSZ and allocates nothing), and the watchdog stops the many files that are each under
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_past_its_disk_limit_is_stopped_and_says_so() {
    let repo = Repo::new();
    let rev = repo.commit(&[("README.md", "x")]);
    let token = unique_token();
    let server = ModelServer::start_isolated_if_root(vec![
        Step::bash("fallocate -l 10G big; echo \"fallocate=$?\"; du -k big"),
        Step::bash(format!(
            "i=0; while head -c 4194304 /dev/zero > fill-$i; do i=$((i+1)); done; \
             (exec -a held-{token} sleep 120)"
        )),
    ])
    .expect("model server");
    let keys = tempfile::tempdir().unwrap();
    let runner = claude_runner(&server, keys.path());
    set_limits(&runner, serde_json::json!({"disk": "40M"}));
    let file = job_file(
        keys.path(),
        serde_json::json!({"id": "filler", "repo": repo.src().to_string_lossy(), "rev": rev,
                           "timeout": "3m"}),
    );
    let mut cmd = runner.command();
    cmd.env(
        "QUEST_RUNNER_CLAUDE",
        agent_binary("QUEST_RUNNER_CLAUDE", "claude"),
    )
    .args(["run", "--job"])
    .arg(&file);
    server.confine(&mut cmd);
    let started = std::time::Instant::now();
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let result: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {stderr}\n{}", server.summary()));
    assert_eq!(out.status.code(), Some(1), "{result}\n{stderr}");
    assert_eq!(result["outcome"], "failed", "{result}");
    assert_eq!(result["limit_fired"], "disk", "{result}");
    let message = result["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("the disk limit fired: the job had ")
            && message.contains("over limits.disk (40 MiB): checkout "),
        "{result}"
    );
    let used = result["disk_used"].as_u64().unwrap_or(0);
    assert!(used > 40 << 20, "{result}");
    eprintln!("stopped at {} MiB: {message}", used >> 20);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(100),
        "stopped by the limit, not by the command's end"
    );
    // The kernel's part: the preallocation was refused outright.
    let first = server.tool_results();
    let fallocate = first.first().map(|r| r.text.clone()).unwrap_or_default();
    assert!(
        fallocate.contains("fallocate=153") && fallocate.contains("0\tbig"),
        "fallocate past RLIMIT_FSIZE: {fallocate}"
    );
    assert_no_process_with(
        &format!("held-{token}"),
        "the filling command",
        std::time::Duration::from_secs(5),
    );
    let job_dir = runner.state().join("jobs/filler");
    assert!(!job_dir.join("checkout").exists(), "worktree removed");
    let temp = claude_job_temp_dir(&job_dir);
    assert!(!temp.exists(), "temp dir {} left", temp.display());
}

/// `limits.tokens`: the request after the one that reaches it is refused by the gateway, with
/// an error Claude Code shows, and the job ends naming the limit and the figure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_limit_refuses_the_next_request_and_ends_the_job() {
    let repo = Repo::new();
    let rev = repo.commit(&[("README.md", "x")]);
    // Each scripted answer is 2 tokens: the limit is spent after the second.
    let server = ModelServer::start_isolated_if_root(
        (0..6)
            .map(|i| Step::bash(format!("echo step-{i}")))
            .collect(),
    )
    .expect("model server");
    let keys = tempfile::tempdir().unwrap();
    let runner = claude_runner(&server, keys.path());
    set_limits(&runner, serde_json::json!({"tokens": 3}));
    let file = job_file(
        keys.path(),
        serde_json::json!({"id": "capped", "repo": repo.src().to_string_lossy(), "rev": rev}),
    );
    let mut cmd = runner.command();
    cmd.env(
        "QUEST_RUNNER_CLAUDE",
        agent_binary("QUEST_RUNNER_CLAUDE", "claude"),
    )
    .args(["run", "--job"])
    .arg(&file);
    server.confine(&mut cmd);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let job_dir = runner.state().join("jobs/capped");
    let model_log = std::fs::read_to_string(job_dir.join("model.log")).unwrap_or_default();
    let diagnostics = format!(
        "{stdout}\n--- stderr ---\n{}\n--- model.log ---\n{model_log}\n--- requests ---\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.summary()
    );
    assert_eq!(out.status.code(), Some(1), "{diagnostics}");
    let result: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(result["outcome"], "failed", "{diagnostics}");
    assert_eq!(result["limit_fired"], "tokens", "{diagnostics}");
    let message = result["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("token limit is spent") && message.contains("of 3 (limits.tokens)"),
        "{diagnostics}"
    );
    assert!(
        result["usage"]["tokens"].is_null(),
        "usage keeps its own fields"
    );
    assert!(
        result["usage"]["refused"].as_u64() >= Some(1),
        "{diagnostics}"
    );
    assert!(
        model_log.contains("refused 400 token_limit"),
        "{diagnostics}"
    );
    assert!(
        server.steps_served() < 6,
        "the job went on after the cap: {diagnostics}"
    );
    // Claude Code was told why.
    let transcript =
        std::fs::read_to_string(job_dir.join("runner/transcript.jsonl")).unwrap_or_default();
    assert!(
        transcript.contains("token limit"),
        "{diagnostics}\n{transcript}"
    );
    assert!(server.confined_processes().is_empty(), "processes left");
}

/// A temp dir outside every directory the policy hides whole (/tmp, /root, /home, ...), where
/// a private file is hidden with a directory of its own rather than by an ancestor: the target
/// dir's when the checkout is not under one of them, else /var/cache (a fresh machine's
/// checkout is under /root). `None` for a user who can write neither (the daemon's test user
/// on a fresh machine).
fn dir_outside_hidden_ones() -> Option<tempfile::TempDir> {
    use quest_runner::sandbox::policy::system_denied_reads;
    let hidden = system_denied_reads(quest_runner::sandbox::Platform::current());
    [env!("CARGO_TARGET_TMPDIR"), "/var/cache"]
        .into_iter()
        .filter_map(|base| std::fs::canonicalize(base).ok())
        .filter(|base| !hidden.iter().any(|h| base.starts_with(h)))
        .find_map(|base| tempfile::tempdir_in(base).ok())
}

/// An account file the sandbox cannot hide as a whole directory (hidden by its name alone, a
/// file is readable to running jobs again once it is replaced) is refused where the config is
/// loaded (exit 2) and by `doctor`, naming the file, the directory and the fix; one it can
/// hide shows in `policy` with the directories that hide it.
#[test]
fn secrets_the_sandbox_cannot_hide_are_refused() {
    let Some(keys) = dir_outside_hidden_ones() else {
        eprintln!(
            "SKIPPED secrets_the_sandbox_cannot_hide_are_refused: this user can write no \
             directory outside those the policy hides whole"
        );
        return;
    };
    let keys_dir = std::fs::canonicalize(keys.path()).unwrap();
    let runner = Runner::new();
    let job = job_file(&keys_dir, serde_json::json!({"repo": keys_dir}));
    let config = runner.state().join("config.json");
    let write_config = |key: &Path| {
        let c = serde_json::json!({"accounts": {"main": {"agent": "claude", "api_key_file": key}}});
        std::fs::write(&config, c.to_string()).unwrap();
    };
    // In /etc by name, and through a link whose target is in /etc.
    let link = keys_dir.join("linked-key");
    std::os::unix::fs::symlink("/etc/hostname", &link).unwrap();
    for (key, dir) in [
        (Path::new("/etc/qr-test-anthropic-key"), "/etc"),
        (&link, "/etc"),
    ] {
        write_config(key);
        let out = runner
            .command()
            .args(["run", "--job"])
            .arg(&job)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {stderr}", key.display());
        let named = format!("accounts.main.api_key_file = {}", key.display());
        for needle in [named.as_str(), &format!(" {dir} is "), "Fix: move it"] {
            assert!(stderr.contains(needle), "{needle:?} in {stderr}");
        }
        let out = runner.command().arg("doctor").output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout
            .lines()
            .find(|l| l.contains("config and secrets"))
            .unwrap_or_default();
        assert!(
            line.starts_with("FAIL") && line.contains(&named),
            "{stdout}"
        );
        assert_ne!(out.status.code(), Some(0), "{stdout}");
    }

    // A directory of its own: hidden whole, in `policy` and in doctor.
    let key = keys_dir.join("secrets/anthropic-key");
    std::fs::create_dir(keys_dir.join("secrets")).unwrap();
    std::fs::write(&key, "sk-unused").unwrap();
    write_config(&key);
    let out = runner
        .command()
        .args(["policy", "--job"])
        .arg(&job)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    let private = &shown["policy"]["private"];
    let files: Vec<&str> = private
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["file"].as_str().unwrap())
        .collect();
    assert!(files.contains(&key.to_str().unwrap()), "{private:#}");
    let deny = shown["rendered"]["srt_settings"]["filesystem"]["denyRead"].to_string();
    let dir = keys_dir.join("secrets").display().to_string();
    assert!(deny.contains(&format!("\"{dir}\"")), "{deny}");
    assert!(!deny.contains(&format!("\"{}\"", key.display())), "{deny}");
    let out = runner.command().arg("doctor").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.contains("config and secrets"))
        .unwrap_or_default();
    assert!(line.starts_with("ok") && line.contains(&dir), "{stdout}");
}

/// The job checks again, following links as they are when it starts: a link switched into a
/// directory commands need after the config was loaded refuses the job before anything runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_refuses_a_secret_its_link_now_puts_in_a_needed_directory() {
    use quest_runner::config::{Account, ClaudeAccount, Config};
    use quest_runner::run::{Cancel, Outcome};
    let keys = tempfile::tempdir().unwrap();
    let keys_dir = std::fs::canonicalize(keys.path()).unwrap();
    std::fs::create_dir(keys_dir.join("v1")).unwrap();
    std::fs::write(keys_dir.join("v1/key"), "sk-unused").unwrap();
    let link = keys_dir.join("key");
    std::os::unix::fs::symlink(keys_dir.join("v1/key"), &link).unwrap();
    let mut config = Config::default();
    config.accounts.insert(
        "main".into(),
        Account::Claude(ClaudeAccount {
            api_key_file: Some(link.clone()),
            ..Default::default()
        }),
    );
    let path = keys_dir.join("config.json");
    std::fs::write(&path, serde_json::to_string(&config).unwrap()).unwrap();
    let loaded = Config::load(&path, true).expect("loads while the link points at v1/");
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", &link).unwrap();

    let state = tempfile::tempdir().unwrap();
    let runner =
        quest_runner::run::Runner::new(quest_runner::state::StateDir::at(state.path()), loaded);
    let job = quest_runner::job::Job {
        id: "refused-secret".into(),
        repo: "/nonexistent".into(),
        rev: "0123456789abcdef0123456789abcdef01234567".into(),
        git_ref: None,
        trust: quest_runner::job::Trust::Trusted,
        agent: quest_runner::job::AgentKind::Claude,
        account: "main".into(),
        prompt: "p".into(),
        timeout: std::time::Duration::from_secs(60),
    };
    let result = runner.run(&job, std::future::pending::<Cancel>()).await;
    assert_eq!(result.outcome, Outcome::Refused, "{:?}", result.message);
    let message = result.message.unwrap_or_default();
    assert!(
        message.contains(&format!("accounts.main.api_key_file = {}", link.display()))
            && message.contains(" /etc is "),
        "{message}"
    );
    assert!(!state.path().join("repos").exists(), "nothing was fetched");
}

/// A runner killed outright mid-job (kill -9: no handler runs) takes every helper it started
/// along: the job's network bridge (root's, on the runner's side), its proxy, the agent and
/// its command. Once, the bridge lived on under pid 1 for ever (issue 40).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_the_runner_started_outlives_its_kill_9() {
    let Hanging {
        token,
        repo,
        rev,
        server,
    } = Hanging::new();
    let keys = tempfile::tempdir().unwrap();
    let runner = claude_runner(&server, keys.path());
    let file = job_file(
        keys.path(),
        serde_json::json!({"id": "killed", "repo": repo.src().to_string_lossy(), "rev": rev}),
    );
    let mut cmd = runner.command();
    cmd.env(
        "QUEST_RUNNER_CLAUDE",
        agent_binary("QUEST_RUNNER_CLAUDE", "claude"),
    )
    .args(["run", "--job"])
    .arg(&file)
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null());
    server.confine(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while processes_with(&format!("hang-{token}")).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the command never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let state = runner.state().to_string_lossy().into_owned();
    let helpers = processes_with(&state);
    assert!(!helpers.is_empty(), "no helper names the state dir");
    child.kill().unwrap();
    child.wait().unwrap();
    // Bounded: a parent-death signal is immediate; a second or two for the trees to go.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let left = loop {
        let left: Vec<String> = processes_with(&state)
            .into_iter()
            .chain(processes_with(&format!("hang-{token}")))
            .chain(server.confined_processes().into_iter().map(|p| p as u32))
            .filter_map(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            // A zombie (no command line) is gone but for its parent's wait.
            .filter(|c| !c.is_empty())
            .collect();
        if left.is_empty() || std::time::Instant::now() > deadline {
            break left;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    // Whatever is left must not outlive the test either.
    server.kill_confined();
    for pid in processes_with(&format!("hang-{token}")) {
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    assert!(left.is_empty(), "survived the runner's kill -9: {left:#?}");
    // What the next runner's start does: the killed job's workspace swept (a root runner's
    // checkout is still mounted), so nothing of it outlives the test either.
    let state = quest_runner::state::StateDir::at(runner.state());
    assert_eq!(quest_runner::workspace::sweep_abandoned(&state), 1);
    let checkout = runner.state().join("jobs/killed/checkout");
    let mounted = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(checkout.to_string_lossy().as_ref()));
    assert!(
        !mounted && !checkout.exists(),
        "the killed job's checkout is left"
    );
}

/// An agent installed in a hidden tree brings itself into the namespace, not its neighbours:
/// a launcher in the state dir, run as the job's agent, cannot read the runner's config or a
/// file beside it, which it reads unconfined (issue 40: the agent's own process read
/// `config.json` and another job's files).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_installed_in_the_state_dir_does_not_bring_the_state_dir() {
    let repo = Repo::new();
    let rev = repo.commit(&[("README.md", "x")]);
    let server = ModelServer::start_isolated_if_root(vec![]).expect("model server");
    let keys = tempfile::tempdir().unwrap();
    let runner = claude_runner(&server, keys.path());
    let secret = runner.state().join("neighbour-secret");
    std::fs::write(&secret, "NEIGHBOUR-SECRET-40\n").unwrap();
    let launcher = runner.state().join("claude-launcher");
    let real = agent_binary("QUEST_RUNNER_CLAUDE", "claude");
    std::fs::write(
        &launcher,
        format!(
            "#!/bin/sh\nd=$(dirname \"$0\")\necho \"READ: $(cat \"$d/neighbour-secret\" \"$d/config.json\" 2>&1)\" >&2\nexec {} \"$@\"\n",
            real.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Unconfined, the launcher reads both.
    let plain = std::process::Command::new(&launcher)
        .arg("--version")
        .output()
        .unwrap();
    let plain = String::from_utf8_lossy(&plain.stderr).to_string();
    assert!(
        plain.contains("NEIGHBOUR-SECRET-40") && plain.contains("api_key_file"),
        "{plain}"
    );
    let file = job_file(
        keys.path(),
        serde_json::json!({"id": "launcher", "repo": repo.src().to_string_lossy(), "rev": rev}),
    );
    let mut cmd = runner.command();
    cmd.env("QUEST_RUNNER_CLAUDE", &launcher)
        .args(["run", "--job"])
        .arg(&file);
    server.confine(&mut cmd);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let log = std::fs::read_to_string(runner.state().join("jobs/launcher/runner/agent.log"))
        .unwrap_or_default();
    assert!(
        log.contains("READ: "),
        "the launcher did not run: {log}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !log.contains("NEIGHBOUR-SECRET-40") && !log.contains("api_key_file"),
        "the agent read the state dir: {log}"
    );
}
