//! `quest-runner run` end to end with the real opencode, every command under the real srt,
//! the real Nix devShell, and a scripted model on loopback: the model's one tool call uses the
//! devShell and commits in the checkout, and the result's HEAD carries that commit.

use crate::support;

use std::path::{Path, PathBuf};

use quest_runner_selftest::model_server::{ModelServer, Step};
use serde_json::Value;
use support::*;

fn pinned(var: &str, name: &str) -> PathBuf {
    match std::env::var_os(var) {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("npm/node_modules/.bin")
            .join(name),
    }
}

/// A runner whose config has one opencode account, `oc`, pointed at `server`, its auth.json
/// (holding `key`) in `secrets`.
fn opencode_runner(server: &ModelServer, secrets: &Path, key: &str) -> Runner {
    let auth = secrets.join("auth.json");
    std::fs::write(
        &auth,
        serde_json::json!({"scripted": {"type": "api", "key": key}}).to_string(),
    )
    .unwrap();
    let runner = Runner::new();
    let config = serde_json::json!({
        "nix": {"options": {"substituters": ""}},
        "accounts": {"oc": {
            "agent": "opencode",
            "auth_file": auth,
            "model": "scripted/scripted",
            "config": {"provider": {"scripted": {
                "npm": "@ai-sdk/openai-compatible",
                "options": {"baseURL": format!("{}/v1", server.base_url())},
                "models": {"scripted": {"tool_call": true}},
            }}},
        }},
    });
    std::fs::write(runner.state().join("config.json"), config.to_string()).unwrap();
    runner
}

/// `quest-runner run` of `job` (written into `dir`) with the pinned opencode and srt, inside
/// the scripted model's network namespace.
fn run_command(
    runner: &Runner,
    server: &ModelServer,
    dir: &Path,
    job: &Value,
) -> std::process::Command {
    let job_file = dir.join("job.json");
    std::fs::write(&job_file, job.to_string()).unwrap();
    let mut cmd = runner.command();
    cmd.env(
        "QUEST_RUNNER_OPENCODE",
        pinned("QUEST_RUNNER_OPENCODE", "opencode"),
    )
    .env("QUEST_RUNNER_SRT", pinned("QUEST_RUNNER_SRT", "srt"))
    .args(["run", "--job"])
    .arg(&job_file);
    server.confine(&mut cmd);
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_job_uses_the_devshell_and_commits() {
    let repo = Repo::new();
    let rev = repo.commit(&[
        ("flake.nix", &flake(r#"DEVSHELL_VAR = "from-the-flake";"#)),
        ("AGENTS.md", "Always be brief. INSTRUCTION-MARK\n"),
        // A copy, as repositories keep one for each agent: sent once.
        ("CLAUDE.md", "Always be brief. INSTRUCTION-MARK\n"),
    ]);
    let server = ModelServer::start_isolated_if_root(vec![Step::bash(
        "echo \"$DEVSHELL_VAR\" > devshell.txt && echo \"$TMPDIR\" > tmpdir.txt && git add devshell.txt tmpdir.txt && git commit -qm 'agent commit' && echo COMMITTED",
    )])
    .expect("model server");
    let secrets = tempfile::tempdir().unwrap();
    let runner = opencode_runner(&server, secrets.path(), "sk-test-SECRET-AUTH-7");
    let job = serde_json::json!({
        "id": "opencode-e2e",
        "repo": repo.src().to_string_lossy(),
        "rev": rev,
        "ref": "main",
        "trust": "trusted",
        "agent": "opencode",
        "account": "oc",
        "prompt": "Record the devShell variable and commit it.",
        "timeout": "3m",
    });
    // The runner's TMPDIR, short enough for CLAUDE_CODE_TMPDIR (srt reads it too): the job's
    // temp dir goes there.
    let tmpdir = tempfile::Builder::new()
        .prefix("qr")
        .tempdir_in("/tmp")
        .unwrap();
    let mut cmd = run_command(&runner, &server, secrets.path(), &job);
    cmd.env("TMPDIR", tmpdir.path());
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let job_dir = runner.state().join("jobs/opencode-e2e");
    let diagnostics = || {
        format!(
            "status {}\n--- stdout ---\n{stdout}\n--- stderr ---\n{}\n--- agent.log (tail) ---\n{}\n--- requests ---\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(job_dir.join("runner/agent.log"))
                .unwrap_or_default()
                .chars()
                .rev()
                .take(3000)
                .collect::<String>()
                .chars()
                .rev()
                .collect::<String>(),
            server.summary()
        )
    };
    assert!(out.status.success(), "{}", diagnostics());
    let result: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(result["outcome"], "succeeded", "{}", diagnostics());
    // `logs` renders what the agent did: its tool call and the command's output.
    let logs = runner
        .command()
        .args(["logs", "opencode-e2e"])
        .output()
        .unwrap();
    let rendered = String::from_utf8_lossy(&logs.stdout);
    eprintln!("logs opencode-e2e:\n{rendered}");
    assert!(
        rendered.contains("tool   bash: echo \"$DEVSHELL_VAR\"") && rendered.contains("COMMITTED"),
        "{rendered}\n{}",
        diagnostics()
    );
    let head = result["head"].as_str().unwrap().to_string();
    assert_eq!(
        result["commits"].as_array().unwrap().len(),
        1,
        "{}",
        diagnostics()
    );
    let bare = std::fs::read_dir(runner.state().join("repos"))
        .unwrap()
        .flatten()
        .find(|e| e.path().extension().is_some_and(|x| x == "git"))
        .unwrap()
        .path();
    assert_eq!(
        git(&bare, &["show", &format!("{head}:devshell.txt")]),
        "from-the-flake"
    );
    let job_tmp = git(&bare, &["show", &format!("{head}:tmpdir.txt")]);
    assert_eq!(Path::new(job_tmp.trim()).parent(), Some(tmpdir.path()));
    assert!(server
        .tool_results()
        .iter()
        .any(|r| r.text.contains("COMMITTED")));
    // opencode held only the job's token; the gateway put the key on every request.
    assert_only_the_gateway_sent_the_key(&server, "SECRET-AUTH", "sk-test-SECRET-AUTH-7");
    let exchanges = server.exchanges();
    let runner_files = job_dir.join("runner/opencode");
    assert!(!runner_files.join("data/opencode/auth.json").exists());
    let config =
        std::fs::read_to_string(runner_files.join("config/opencode/opencode.json")).unwrap();
    assert!(!config.contains("SECRET-AUTH"), "{config}");
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(job_dir.join("result.json")).unwrap())
            .unwrap();
    let completions = exchanges
        .iter()
        .filter(|e| e.path.ends_with("/chat/completions"))
        .count();
    assert_eq!(
        result["usage"]["requests"].as_u64(),
        Some(completions as u64),
        "{result}"
    );
    // The instructions, once, in each request that carries the system prompt (opencode's
    // first is its title request, which has none).
    let counts: Vec<usize> = server
        .requests()
        .iter()
        .map(|b| b.to_string().matches("INSTRUCTION-MARK").count())
        .collect();
    assert!(
        counts.contains(&1) && counts.iter().all(|c| *c <= 1),
        "instructions per request: {counts:?}"
    );
    assert!(!job_dir.join("checkout").exists(), "worktree removed");
    assert!(server.confined_processes().is_empty(), "no process left");
    // Nothing of the job reached for the network (its devShell was built from the repository
    // alone): its proxy never started (`util::on_demand`; Claude Code's job in
    // tests/suite/run_claude.rs starts its own with a request, and writes this log).
    assert!(
        !job_dir.join("runner/netproxy.log").exists(),
        "the proxy started unneeded"
    );
}

/// opencode runs its tools detached and does not stop them when it exits: a timed-out job's
/// sandboxed command (srt, bwrap, the command) must still be stopped by the runner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_timeout_stops_its_detached_commands() {
    let Hanging {
        token,
        repo,
        rev,
        server,
    } = Hanging::new();
    let secrets = tempfile::tempdir().unwrap();
    let runner = opencode_runner(&server, secrets.path(), "sk-test");
    let job = serde_json::json!({
        "id": "oc-timeout", "repo": repo.src().to_string_lossy(), "rev": rev, "ref": "main",
        "trust": "trusted", "agent": "opencode", "account": "oc", "prompt": "hang",
        // Long enough for opencode's start-up (~3 s alone) and its first sandboxed command
        // on a loaded 2-core machine (12 s fell short once, 20 s twice at load 11-15, with no
        // model request sent yet); the test waits it out, beside the file's other tests.
        "timeout": "45s",
    });
    let mut cmd = run_command(&runner, &server, secrets.path(), &job);
    // Proof that the command really ran: watch for it while the job runs.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (done, name) = (done.clone(), format!("hang-{token}"));
        std::thread::spawn(move || {
            let mut seen = false;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                seen |= !processes_with(&name).is_empty();
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            seen
        })
    };
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(
        watcher.join().unwrap(),
        "the hanging command never ran\n--- stdout ---\n{}\n--- agent.log ---\n{}\n--- model.log ---\n{}\n--- requests ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        std::fs::read_to_string(runner.state().join("jobs/oc-timeout/runner/agent.log"))
            .unwrap_or_default(),
        std::fs::read_to_string(runner.state().join("jobs/oc-timeout/model.log"))
            .unwrap_or_default(),
        server.summary()
    );
    let result: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(out.status.code(), Some(5), "{result}");
    assert_eq!(result["outcome"], "timed_out");
    assert!(
        server.tool_results().is_empty(),
        "the command was still running when the job timed out: {:?}",
        server.tool_results()
    );
    assert!(
        processes_with(&format!("hang-{token}")).is_empty(),
        "the command survived"
    );
    assert!(
        server.confined_processes().is_empty(),
        "a process of the job survived"
    );
    assert!(!runner.state().join("jobs/oc-timeout/checkout").exists());
}
