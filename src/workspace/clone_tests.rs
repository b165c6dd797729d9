use super::*;
use crate::job::{AgentKind, Trust};

fn job(repo: &str, rev: &str) -> Job {
    Job {
        id: "j".into(),
        repo: repo.into(),
        rev: rev.into(),
        git_ref: Some("main".into()),
        trust: Trust::Trusted,
        agent: AgentKind::Claude,
        account: "a".into(),
        prompt: "p".into(),
        timeout: std::time::Duration::from_secs(60),
    }
}

const REV: &str = "0123456789abcdef0123456789abcdef01234567";

/// What `repos/` holds besides nothing.
fn repos(state: &Path) -> Vec<String> {
    std::fs::read_dir(state.join("repos"))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_url_says_what_git_said_and_leaves_no_clone() {
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir::at(dir.path());
    let missing = dir.path().join("no-such-repo");
    for repo in [
        missing.display().to_string(),
        format!("file://{}", missing.display()),
    ] {
        let e = ensure_bare_clone(&state, &job(&repo, REV))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!("revision {REV} is not in {repo}")),
            "{e}"
        );
        assert!(
            e.contains("git said: ") && e.contains("does not appear to be a git repository"),
            "{e}"
        );
        assert_eq!(repos(dir.path()), Vec::<String>::new(), "{repo}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_the_repository_lacks_is_named_with_gits_words() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(&src)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    std::fs::create_dir(&src).unwrap();
    git(&["init", "-q", "-b", "main"]);
    git(&[
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "c",
    ]);
    let state = StateDir::at(dir.path().join("state"));
    let e = ensure_bare_clone(&state, &job(&src.display().to_string(), REV))
        .await
        .unwrap_err()
        .to_string();
    // The branch was fetched, the revision itself refused by the server.
    assert!(
        e.contains("(fetched branch main, then the revision itself): git said: "),
        "{e}"
    );
    assert!(repos(&dir.path().join("state")).is_empty(), "{e}");
}

#[test]
fn only_network_and_server_failures_are_retried() {
    let failed = |message: &str| GitError::Failed {
        args: "fetch --quiet --no-tags origin x".into(),
        message: message.into(),
    };
    for transient in [
        "fatal: unable to access 'https://h/r/': Could not resolve host: h",
        "fatal: unable to access 'https://h/r/': The requested URL returned error: 502",
        "error: RPC failed; curl 56 Recv failure: Connection reset by peer",
        "fatal: the remote end hung up unexpectedly",
        "ssh: connect to host h port 22: Connection timed out",
    ] {
        assert!(is_transient(&failed(transient)), "{transient}");
    }
    for permanent in [
        "fatal: '/x' does not appear to be a git repository",
        "fatal: unable to access 'https://h/r/': The requested URL returned error: 404",
        "remote: Repository not found.",
        "fatal: Authentication failed for 'https://h/r/'",
        "fatal: remote error: upload-pack: not our ref 0123",
    ] {
        assert!(!is_transient(&failed(permanent)), "{permanent}");
    }
}
