//! `quest-runner run` end to end with the real Claude Code, its real sandbox (bubblewrap),
//! the real Nix devShell, and a scripted model on loopback: the model's one tool call uses
//! the devShell and commits in the checkout, and the result's HEAD carries that commit.

mod support;

use std::path::{Path, PathBuf};

use serde_json::Value;
use support::model_server::{ModelServer, Step};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_job_uses_the_devshell_and_commits() {
    let repo = Repo::new();
    let rev = repo.commit(&[
        ("flake.nix", &flake(r#"DEVSHELL_VAR = "from-the-flake";"#)),
        ("AGENTS.md", "Always be brief.\n"),
    ]);
    let server = ModelServer::start_isolated(vec![Step::bash(
        "echo \"$DEVSHELL_VAR\" > devshell.txt && git add devshell.txt && git commit -qm 'agent commit' && echo COMMITTED",
    )])
    .await;
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

    let before = quest_job_dirs();
    let mut cmd = runner.command();
    cmd.env(
        "QUEST_RUNNER_CLAUDE",
        agent_binary("QUEST_RUNNER_CLAUDE", "claude"),
    )
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
    let results = server.tool_results();
    assert!(
        results.iter().any(|r| r.text.contains("COMMITTED")),
        "{}",
        diagnostics()
    );

    // The key never reached the model in a request body, and nothing is left behind.
    for body in server.requests() {
        assert!(
            !body.to_string().contains("SECRET-KEY"),
            "the key reached the model"
        );
    }
    assert!(!job_dir.join("checkout").exists(), "worktree removed");
    let after = quest_job_dirs();
    let leaked: Vec<_> = after.difference(&before).collect();
    assert!(leaked.is_empty(), "temp dirs left: {leaked:?}");
}

fn quest_job_dirs() -> std::collections::BTreeSet<PathBuf> {
    std::fs::read_dir("/tmp")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("quest-job-"))
        .map(|e| e.path())
        .collect()
}
