use super::*;
use crate::config::{ClaudeAccount, OpencodeAccount};
use crate::job::{AgentKind, Job, Trust};
use crate::sandbox::{plan as plan_policy, Platform, PolicyInputs};
use std::time::Duration;

fn job(agent: AgentKind) -> Job {
    Job {
        id: "j1".into(),
        repo: "https://example.org/r.git".into(),
        rev: "0123456789abcdef0123456789abcdef01234567".into(),
        git_ref: None,
        trust: Trust::Trusted,
        agent,
        account: "main".into(),
        prompt: "do the thing".into(),
        timeout: Duration::from_secs(60),
    }
}

fn workspace() -> WorkspacePaths {
    WorkspacePaths {
        checkout: "/state/jobs/j1/checkout".into(),
        bare_clone: "/state/repos/r.git".into(),
        worktree_admin: "/state/repos/r.git/worktrees/checkout".into(),
        temp_dir: "/tmp/quest-job-abc123".into(),
        job_dir: "/state/jobs/j1/runner".into(),
        helper_tmp: "/tmp/quest-srt-abc123".into(),
        devshell_script: Some("/state/jobs/j1/runner/devshell.sh".into()),
    }
}

fn policy(ws: &WorkspacePaths) -> SandboxPolicy {
    plan_policy(
        ws,
        &PolicyInputs {
            platform: Platform::Linux,
            trust: Trust::Trusted,
            extra_hosts: vec![],
            state_dir: "/state".into(),
            operator_home: Some("/home/op".into()),
        },
    )
}

fn host_env() -> Vec<(String, String)> {
    [
        ("PATH", "/usr/bin:/bin"),
        ("LANG", "C.UTF-8"),
        ("HOME", "/home/op"),
        ("ANTHROPIC_API_KEY", "sk-leak"),
        ("SSH_AUTH_SOCK", "/run/user/0/ssh"),
        ("AWS_SECRET_ACCESS_KEY", "leak"),
        ("OPENCODE_SERVER_PASSWORD", "leak"),
        ("XDG_DATA_HOME", "/home/op/.local/share"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .to_vec()
}

fn claude_launch(account: &ClaudeAccount) -> Launch {
    let ws = workspace();
    let policy = policy(&ws);
    let job = job(AgentKind::Claude);
    let acct = Account::Claude(account.clone());
    plan(&AgentInputs {
        job: &job,
        account: &acct,
        policy: &policy,
        workspace: &ws,
        system_prompt: "SYSTEM",
        program: Path::new("/bin/claude"),
        srt: None,
        host_env: host_env(),
    })
    .unwrap()
}

fn key_account() -> ClaudeAccount {
    ClaudeAccount {
        api_key_file: Some("/secrets/anthropic".into()),
        base_url: Some("http://127.0.0.1:9".into()),
        ..Default::default()
    }
}

fn file<'a>(launch: &'a Launch, name: &str) -> &'a Contents {
    &launch
        .files
        .iter()
        .find(|f| f.path.ends_with(name))
        .unwrap_or_else(|| panic!("{name} not planned"))
        .contents
}

#[test]
fn claude_flags_keep_project_config_out() {
    let launch = claude_launch(&key_account());
    let args = launch.args.join(" ");
    for flag in [
        "-p",
        "--setting-sources user",
        "--strict-mcp-config",
        "--permission-mode dontAsk",
        "--disallowedTools WebFetch",
        "--output-format stream-json",
    ] {
        assert!(args.contains(flag), "{flag} missing: {args}");
    }
    assert!(!args.contains("bypassPermissions") && !args.contains("dangerously"));
    assert_eq!(
        launch.stdin, "do the thing",
        "the prompt goes on stdin, not argv"
    );
    assert_eq!(launch.cwd, PathBuf::from("/state/jobs/j1/checkout"));
}

#[test]
fn claude_settings_render_the_policy() {
    let launch = claude_launch(&key_account());
    let Contents::File(text, mode) = file(&launch, "claude/settings.json") else {
        panic!("settings is a file")
    };
    assert_eq!(*mode, 0o600);
    let s: serde_json::Value = serde_json::from_str(text).unwrap();
    assert_eq!(s["sandbox"]["enabled"], true);
    assert_eq!(s["sandbox"]["failIfUnavailable"], true);
    assert_eq!(s["sandbox"]["allowUnsandboxedCommands"], false);
    assert_eq!(s["sandbox"]["network"]["allowAllUnixSockets"], false);
    let list = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_string())
            .collect()
    };
    let fs = &s["sandbox"]["filesystem"];
    assert!(list(&fs["denyRead"]).contains(&"/state".to_string()));
    assert!(list(&fs["denyRead"]).contains(&"/home".to_string()));
    assert!(list(&fs["allowRead"]).contains(&"/state/jobs/j1/checkout".to_string()));
    assert!(list(&fs["allowWrite"]).contains(&"/tmp/quest-job-abc123".to_string()));
    assert!(list(&fs["denyWrite"]).contains(&"/state/repos/r.git/hooks".to_string()));
    assert!(list(&s["sandbox"]["network"]["allowedDomains"]).contains(&"pypi.org".to_string()));
    let allow = list(&s["permissions"]["allow"]);
    assert!(allow.contains(&"Bash".to_string()));
    assert!(allow.contains(&"Edit(//state/jobs/j1/checkout/**)".to_string()));
    assert!(!allow.iter().any(|a| a.starts_with("WebFetch")));
    assert_eq!(list(&s["permissions"]["deny"]), ["WebFetch"]);
    assert_eq!(s["permissions"]["defaultMode"], "dontAsk");
    assert_eq!(s["disableAllHooks"], true);
    assert_eq!(s["apiKeyHelper"], "cat '/secrets/anthropic'");
}

#[test]
fn claude_environment_is_scrubbed_and_holds_no_secret() {
    let launch = claude_launch(&key_account());
    let env = &launch.env;
    for leaked in [
        "ANTHROPIC_API_KEY",
        "SSH_AUTH_SOCK",
        "AWS_SECRET_ACCESS_KEY",
        "OPENCODE_SERVER_PASSWORD",
        "XDG_DATA_HOME",
    ] {
        assert!(!env.contains_key(leaked), "{leaked} reached the agent");
    }
    assert_eq!(env["HOME"], "/tmp/quest-job-abc123");
    assert_eq!(env["TMPDIR"], "/tmp/quest-job-abc123");
    assert_eq!(env["CLAUDE_CODE_TMPDIR"], "/tmp/quest-job-abc123");
    assert!(
        env["CLAUDE_CODE_TMPDIR"].len() < 36,
        "Claude Code ignores longer ones"
    );
    assert_eq!(env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"], "1");
    assert_eq!(env["CLAUDE_CONFIG_DIR"], "/state/jobs/j1/runner/claude");
    assert_eq!(
        env["CLAUDE_ENV_FILE"],
        "/state/jobs/j1/runner/devshell-hook.sh"
    );
    assert_eq!(env["ANTHROPIC_BASE_URL"], "http://127.0.0.1:9");
    assert!(env.values().all(|v| !v.contains("leak")));
}

#[test]
fn devshell_hook_sources_the_copy_inside_the_sandbox() {
    let launch = claude_launch(&key_account());
    let Contents::File(text, _) = file(&launch, "devshell-hook.sh") else {
        panic!()
    };
    assert!(
        text.contains(". '/state/jobs/j1/runner/devshell.sh'"),
        "{text}"
    );
    let mut ws = workspace();
    ws.devshell_script = None;
    assert!(!devshell_hook(&policy(&ws)).contains(". "));
}

#[test]
fn oauth_login_is_linked_not_copied() {
    let launch = claude_launch(&ClaudeAccount {
        credentials_file: Some("/secrets/claude/.credentials.json".into()),
        ..Default::default()
    });
    match file(&launch, ".credentials.json") {
        Contents::Symlink(target) => {
            assert_eq!(target, Path::new("/secrets/claude/.credentials.json"))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn account_without_credentials_or_for_another_agent_is_refused() {
    let ws = workspace();
    let policy = policy(&ws);
    let job = job(AgentKind::Claude);
    let inputs = |account: &Account| {
        plan(&AgentInputs {
            job: &job,
            account,
            policy: &policy,
            workspace: &ws,
            system_prompt: "",
            program: Path::new("/bin/claude"),
            srt: None,
            host_env: vec![],
        })
    };
    let err = inputs(&Account::Claude(ClaudeAccount::default())).unwrap_err();
    assert!(err.to_string().contains("no credentials"), "{err}");
    let err = inputs(&Account::Opencode(OpencodeAccount::default())).unwrap_err();
    assert!(err.to_string().contains("opencode account"), "{err}");
}
