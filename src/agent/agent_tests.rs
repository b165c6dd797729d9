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
        git_store: "/state/jobs/j1/git".into(),
        worktree_admin: "/state/jobs/j1/git/worktrees/checkout".into(),
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
            full_access_hosts: Vec::new(),
            dependency_hosts: Vec::new(),
            state_dir: "/state".into(),
            operator_home: Some("/home/op".into()),
            private: vec![],
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
    let (_dir, srt) = fake_srt();
    plan(&AgentInputs {
        job: &job,
        account: &acct,
        policy: &policy,
        workspace: &ws,
        system_prompt: "SYSTEM",
        program: Path::new("/bin/claude"),
        srt: Some(&srt),
        node: Some(Path::new("/bin/node")),
        runner: Some(Path::new("/opt/qr/bin/quest-runner")),
        srt_programs: Default::default(),
        host_env: host_env(),
        gateway: Some(&claude_gateway()),
    })
    .unwrap()
}

/// The job's way to its model: the gateway's address and token, never the account's key.
fn claude_gateway() -> GatewayAccess {
    GatewayAccess {
        port: 9,
        base_url: "http://127.0.0.1:7".into(),
        token: "qrgw-jobtoken".into(),
        provider: None,
    }
}

fn oc_gateway() -> GatewayAccess {
    GatewayAccess {
        port: 9,
        base_url: "http://127.0.0.1:7/v1".into(),
        token: "qrgw-jobtoken".into(),
        provider: Some("p".into()),
    }
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

/// Claude Code's Bash commands go to the job's sandbox through its command prefix, a link to
/// the runner's binary; the sandbox host runs beside it; its own sandbox is off.
#[test]
fn claude_runs_its_commands_in_the_jobs_sandbox() {
    let ws = workspace();
    let launch = claude_launch(&key_account());
    let prefix = ws.job_dir.join("quest-command");
    assert_eq!(
        launch.env["CLAUDE_CODE_SHELL_PREFIX"],
        prefix.display().to_string()
    );
    match file(&launch, "runner/quest-command") {
        Contents::Symlink(t) => assert_eq!(t, Path::new("/opt/qr/bin/quest-runner")),
        other => panic!("{other:?}"),
    }
    let host = launch.companion.as_ref().expect("the sandbox host");
    assert_eq!(host.program, Path::new("/bin/node"));
    assert_eq!(host.cwd, ws.checkout);
    let executor: serde_json::Value = serde_json::from_str(text(&launch, "executor.json")).unwrap();
    assert_eq!(executor["cwd_alias"], ws.checkout.display().to_string());
    let settings: serde_json::Value =
        serde_json::from_str(text(&launch, "claude/settings.json")).unwrap();
    assert_eq!(settings["sandbox"], serde_json::json!({"enabled": false}));
    // The executor sources the devShell; Claude Code's own hook would do it twice.
    assert!(!launch.env.contains_key("CLAUDE_ENV_FILE"));
    assert!(!launch.env["PATH"].contains("claude-bin"));
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
        "--disallowedTools WebFetch,EnterWorktree,ExitWorktree",
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
    assert_eq!(s["sandbox"]["enabled"], false);
    let list = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_string())
            .collect()
    };
    // What its commands may do: the job's sandbox, from the same policy.
    let srt: serde_json::Value = serde_json::from_str(self::text(&launch, "srt.json")).unwrap();
    let fs = &srt["filesystem"];
    assert!(list(&fs["denyRead"]).contains(&"/state".to_string()));
    assert!(list(&fs["denyRead"]).contains(&"/home".to_string()));
    assert!(list(&fs["allowRead"]).contains(&"/state/jobs/j1/checkout".to_string()));
    assert!(list(&fs["allowWrite"]).contains(&"/tmp/quest-job-abc123".to_string()));
    assert!(list(&fs["denyWrite"])
        .contains(&"/state/jobs/j1/git/worktrees/checkout/commondir".to_string()));
    assert!(list(&srt["network"]["allowedDomains"]).contains(&"pypi.org".to_string()));
    assert_eq!(srt["network"]["allowAllUnixSockets"], false);
    let allow = list(&s["permissions"]["allow"]);
    assert!(allow.contains(&"Bash".to_string()));
    assert!(allow.contains(&"Edit(//state/jobs/j1/checkout/**)".to_string()));
    assert!(!allow.iter().any(|a| a.starts_with("WebFetch")));
    assert_eq!(list(&s["permissions"]["deny"]), ["WebFetch"]);
    assert_eq!(s["permissions"]["defaultMode"], "dontAsk");
    assert_eq!(s["disableAllHooks"], true);
    assert_eq!(
        s["apiKeyHelper"],
        "cat '/state/jobs/j1/runner/claude/gateway-token'"
    );
}

#[test]
fn claude_has_no_credential_but_the_job_token_even_when_every_variable_passes() {
    let ws = workspace();
    let mut policy = policy(&ws);
    policy.env.pass.push("*".into());
    let job = job(AgentKind::Claude);
    let acct = Account::Claude(key_account());
    let mut env = host_env();
    let (_dir, srt) = fake_srt();
    env.push(("ANTHROPIC_API_KEY".into(), "sk-from-the-environment".into()));
    env.push((
        "CLAUDE_CODE_OAUTH_TOKEN".into(),
        "oauth-from-the-environment".into(),
    ));
    let launch = plan(&AgentInputs {
        job: &job,
        account: &acct,
        policy: &policy,
        workspace: &ws,
        system_prompt: "",
        program: Path::new("/bin/claude"),
        srt: Some(&srt),
        node: Some(Path::new("/bin/node")),
        runner: Some(Path::new("/opt/qr/bin/quest-runner")),
        srt_programs: Default::default(),
        host_env: env,
        gateway: Some(&claude_gateway()),
    })
    .unwrap();
    for k in [
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "CLAUDE_CODE_OAUTH_TOKEN",
    ] {
        assert!(
            !launch.env.contains_key(k),
            "{k} would win over the job token"
        );
    }
    assert!(
        launch.env.contains_key("AWS_SECRET_ACCESS_KEY"),
        "the rest passes"
    );
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
        env["CLAUDE_CODE_SHELL_PREFIX"],
        "/state/jobs/j1/runner/quest-command"
    );
    assert_eq!(env["ANTHROPIC_BASE_URL"], "http://127.0.0.1:7");
    assert!(env.values().all(|v| !v.contains("leak")));
}

#[test]
fn the_agent_gets_the_gateway_token_never_the_login_or_key() {
    let launch = claude_launch(&ClaudeAccount {
        credentials_file: Some("/secrets/claude/.credentials.json".into()),
        ..Default::default()
    });
    assert!(
        !launch
            .files
            .iter()
            .any(|f| f.path.ends_with(".credentials.json")),
        "the runner holds the login"
    );
    match file(&launch, "claude/gateway-token") {
        Contents::File(token, mode) => {
            assert_eq!((token.as_str(), *mode), ("qrgw-jobtoken", 0o600))
        }
        other => panic!("{other:?}"),
    }
    let planned = serde_json::to_string(&launch).unwrap();
    assert!(!planned.contains("/secrets/"), "{planned}");
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
            node: None,
            runner: None,
            srt_programs: Default::default(),
            host_env: vec![],
            gateway: Some(&claude_gateway()),
        })
    };
    let err = inputs(&Account::Claude(ClaudeAccount::default())).unwrap_err();
    assert!(err.to_string().contains("no credentials"), "{err}");
    let err = inputs(&Account::Opencode(OpencodeAccount::default())).unwrap_err();
    assert!(err.to_string().contains("opencode account"), "{err}");
}

/// An installed srt as npm lays it out: `<package>/dist/cli.js` beside `package.json`.
fn fake_srt() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let package = dir.path().join("sandbox-runtime");
    std::fs::create_dir_all(package.join("dist")).unwrap();
    std::fs::write(package.join("package.json"), "{}").unwrap();
    let cli = package.join("dist/cli.js");
    std::fs::write(&cli, "").unwrap();
    (dir, cli)
}

fn opencode_launch(account: &OpencodeAccount, confine: bool) -> Launch {
    opencode_launch_via(account, confine, Some(&oc_gateway()))
}

fn opencode_launch_via(
    account: &OpencodeAccount,
    confine: bool,
    gateway: Option<&GatewayAccess>,
) -> Launch {
    let ws = workspace();
    let mut policy = policy(&ws);
    policy.confine_file_tools = confine;
    let job = job(AgentKind::Opencode);
    let acct = Account::Opencode(account.clone());
    let (_dir, srt) = fake_srt();
    plan(&AgentInputs {
        job: &job,
        account: &acct,
        policy: &policy,
        workspace: &ws,
        system_prompt: "SYSTEM",
        program: Path::new("/bin/opencode"),
        srt: Some(&srt),
        node: Some(Path::new("/bin/node")),
        runner: Some(Path::new("/opt/qr/bin/quest-runner")),
        srt_programs: Default::default(),
        host_env: host_env(),
        gateway,
    })
    .unwrap()
}

fn oc_account() -> OpencodeAccount {
    OpencodeAccount {
        auth_file: Some("/secrets/auth.json".into()),
        config: Some(serde_json::json!({
            "provider": {"p": {"options": {"baseURL": "http://127.0.0.1:9/v1"}}},
            "plugin": ["file:///evil.js"],
            "shell": "/bin/evil",
            "mcp": {"x": {"command": "evil"}},
        })),
        model: Some("p/m".into()),
        budget: None,
    }
}

fn text<'a>(launch: &'a Launch, name: &str) -> &'a str {
    match file(launch, name) {
        Contents::File(text, _) => text,
        other => panic!("{name}: {other:?}"),
    }
}

#[test]
fn opencode_runs_in_a_private_directory_with_a_private_environment() {
    let launch = opencode_launch(&oc_account(), true);
    assert_eq!(
        launch.cwd,
        PathBuf::from("/state/jobs/j1/runner/opencode/cwd")
    );
    assert_ne!(
        launch.cwd,
        PathBuf::from("/state/jobs/j1/checkout"),
        "never the checkout"
    );
    let env = &launch.env;
    assert_eq!(env["OPENCODE_DISABLE_PROJECT_CONFIG"], "1");
    assert_eq!(env["OPENCODE_DISABLE_MODELS_FETCH"], "1");
    assert_eq!(env["XDG_DATA_HOME"], "/state/jobs/j1/runner/opencode/data");
    assert_eq!(env["HOME"], "/state/jobs/j1/runner/opencode/home");
    for leaked in [
        "ANTHROPIC_API_KEY",
        "SSH_AUTH_SOCK",
        "AWS_SECRET_ACCESS_KEY",
        "OPENCODE_SERVER_PASSWORD",
    ] {
        assert!(!env.contains_key(leaked), "{leaked}");
    }
    assert_eq!(
        launch.args[..4],
        ["run", "--format", "json", "--print-logs"]
    );
    assert_eq!(launch.stdin, "do the thing");
}

#[test]
fn opencode_config_takes_only_provider_and_model_from_the_account() {
    let launch = opencode_launch(&oc_account(), true);
    let c: serde_json::Value =
        serde_json::from_str(text(&launch, "opencode/opencode.json")).unwrap();
    assert_eq!(c["shell"], "/state/jobs/j1/runner/quest-shell");
    assert_eq!(c["model"], "p/m");
    assert!(c["provider"]["p"].is_object());
    assert!(c.get("plugin").is_none(), "account plugins are not taken");
    assert_eq!(c["mcp"], serde_json::json!({}));
    assert_eq!(c["snapshot"], false);
    assert_eq!(c["permission"]["webfetch"], "deny");
    assert_eq!(
        c["permission"]["read"], "deny",
        "off until the plugin turns it on"
    );
    assert_eq!(c["permission"]["external_directory"], "allow");
}

#[test]
fn opencode_plugin_is_rendered_with_the_policy() {
    let launch = opencode_launch(&oc_account(), true);
    let plugin = text(&launch, "plugin/quest-runner.js");
    assert!(!plugin.contains("__QUEST_"), "every placeholder replaced");
    assert!(plugin.contains(r#"const CHECKOUT = "/state/jobs/j1/checkout";"#));
    assert!(plugin.contains("/tmp/quest-job-abc123"));
    assert!(plugin.contains("/state/jobs/j1/git/worktrees/checkout/commondir"));
    assert!(
        plugin.contains(r#"const PROTECTED_NAMES = new Set([".bashrc",".bash_profile","#),
        "srt's protected names, from the one list"
    );
    // Unconfined (a mutation check only): no plugin, and the file tools stay on.
    let loose = opencode_launch(&oc_account(), false);
    assert!(!loose
        .files
        .iter()
        .any(|f| f.path.ends_with("plugin/quest-runner.js")));
    let c: serde_json::Value =
        serde_json::from_str(text(&loose, "opencode/opencode.json")).unwrap();
    assert!(c["permission"].get("read").is_none());
}

#[test]
fn opencode_commands_run_in_the_jobs_srt_sandbox_with_a_scrubbed_environment() {
    let launch = opencode_launch(&oc_account(), true);
    // opencode's shell is the runner's binary, by a link in the job's private dir.
    match file(&launch, "runner/quest-shell") {
        Contents::Symlink(t) => assert_eq!(t, Path::new("/opt/qr/bin/quest-runner")),
        other => panic!("{other:?}"),
    }
    let host = launch.companion.as_ref().expect("the sandbox host");
    assert_eq!(host.program, Path::new("/bin/node"));
    assert_eq!(
        host.cwd,
        Path::new("/state/jobs/j1/checkout"),
        "srt scans from here"
    );
    assert_eq!(host.socket_dir, Path::new("/state/jobs/j1/runner"));
    assert_eq!(host.args[0], "/state/jobs/j1/runner/sandbox-host.mjs");
    assert!(host.args[1].ends_with("/sandbox-runtime"), "srt's package");
    assert_eq!(host.args[2], "/state/jobs/j1/runner/srt.json");
    assert_eq!(host.args[3], "/state/jobs/j1/runner/executor.json");
    assert!(text(&launch, "runner/sandbox-host.mjs").contains("wrapWithSandbox"));
    // The environment srt makes the commands' from: the policy's, built from nothing.
    let env = &host.env;
    assert_eq!(env["CLAUDE_CODE_TMPDIR"], "/tmp/quest-job-abc123");
    assert_eq!(env["HOME"], "/tmp/quest-job-abc123");
    assert_eq!(
        env["TMPDIR"], "/tmp/quest-srt-abc123",
        "srt's own sockets: short path"
    );
    for leaked in [
        "ANTHROPIC_API_KEY",
        "SSH_AUTH_SOCK",
        "XDG_DATA_HOME",
        "OPENCODE_SERVER_PASSWORD",
    ] {
        assert!(!env.contains_key(leaked), "{leaked}");
    }
    let e: serde_json::Value = serde_json::from_str(text(&launch, "executor.json")).unwrap();
    assert_eq!(e["checkout"], "/state/jobs/j1/checkout");
    assert_eq!(e["cwd_alias"], "/state/jobs/j1/runner/opencode/cwd");
    assert_eq!(e["devshell"], "/state/jobs/j1/runner/devshell.sh");

    let s: serde_json::Value = serde_json::from_str(text(&launch, "srt.json")).unwrap();
    assert_eq!(s["seccomp"]["applyPath"], "/opt/qr/bin/quest-runner");
    assert_eq!(s["seccomp"]["argv0"], crate::jobshell::executor::ARGV0);
    let deny_write = s["filesystem"]["denyWrite"].to_string();
    assert!(
        deny_write.contains("/tmp/claude"),
        "srt's shared dir is never writable"
    );
    assert!(deny_write.contains("/state/jobs/j1/checkout/.opencode"));
    let allow_read = s["filesystem"]["allowRead"].to_string();
    assert!(
        !allow_read.contains("\"/state/repos/r.git\""),
        "not the whole bare clone"
    );
    assert!(
        allow_read.contains("\"/state/repos/r.git/objects\""),
        "its objects, read-only"
    );
    assert!(
        allow_read.contains("/tmp/quest-srt-abc123"),
        "the proxy bridge's sockets"
    );
    assert!(
        allow_read.contains("\"/opt/qr/bin/quest-runner\""),
        "the executor, wherever the runner is installed"
    );
    assert!(
        !allow_read.contains("\"/state/jobs/j1/runner\""),
        "never the job's socket or settings"
    );
}

#[test]
fn opencode_reaches_its_provider_through_the_gateway_and_srt_is_required() {
    let launch = opencode_launch(&oc_account(), true);
    assert!(
        !launch.files.iter().any(|f| f.path.ends_with("auth.json")),
        "through the gateway, opencode holds no login"
    );
    let config: serde_json::Value =
        serde_json::from_str(text(&launch, "opencode/opencode.json")).unwrap();
    let options = &config["provider"]["p"]["options"];
    assert_eq!(options["baseURL"], "http://127.0.0.1:7/v1");
    assert_eq!(options["apiKey"], "qrgw-jobtoken");
    // An OAuth login opencode refreshes itself stays a link to the account's auth.json.
    let direct = opencode_launch_via(&oc_account(), true, None);
    match file(&direct, "opencode/auth.json") {
        Contents::Symlink(t) => assert_eq!(t, Path::new("/secrets/auth.json")),
        other => panic!("{other:?}"),
    }
    let ws = workspace();
    let policy = policy(&ws);
    let job = job(AgentKind::Opencode);
    let acct = Account::Opencode(oc_account());
    let err = plan(&AgentInputs {
        job: &job,
        account: &acct,
        policy: &policy,
        workspace: &ws,
        system_prompt: "",
        program: Path::new("/bin/opencode"),
        srt: None,
        node: Some(Path::new("/bin/node")),
        runner: Some(Path::new("/bin/quest-runner")),
        srt_programs: Default::default(),
        host_env: vec![],
        gateway: None,
    })
    .unwrap_err();
    assert!(err.to_string().contains("srt"));
}

#[test]
fn rendered_plugin_and_sandbox_host_are_valid_javascript() {
    let Ok(node) = which::which("node") else {
        eprintln!("node not on PATH: syntax check skipped");
        return;
    };
    let launch = opencode_launch(&oc_account(), true);
    let dir = tempfile::tempdir().unwrap();
    for name in ["plugin/quest-runner.js", "runner/sandbox-host.mjs"] {
        let path = dir.path().join("checked.mjs");
        std::fs::write(&path, text(&launch, name)).unwrap();
        let out = std::process::Command::new(&node)
            .arg("--check")
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// srt runs the bwrap and socat the runner resolved, by path, never its own lookup.
#[test]
fn srt_runs_the_programs_the_runner_resolved() {
    let ws = workspace();
    let policy = policy(&ws);
    let programs = super::commands::SrtPrograms {
        bwrap: Some("/opt/bin/bwrap".into()),
        socat: Some("/opt/bin/socat".into()),
        runsc: None,
    };
    let srt = super::commands::srt_settings(&policy, None, Path::new("/qr"), &programs);
    assert_eq!(srt["bwrapPath"], "/opt/bin/bwrap");
    assert_eq!(srt["socatPath"], "/opt/bin/socat");
    let none = super::commands::srt_settings(&policy, None, Path::new("/qr"), &Default::default());
    assert!(none.get("bwrapPath").is_none() && none.get("socatPath").is_none());
}

#[test]
fn claude_and_srt_settings_render_macos_paths() {
    let ws = WorkspacePaths {
        checkout: "/Users/op/Library/quest/jobs/j1/checkout".into(),
        bare_clone: "/Users/op/Library/quest/repos/r.git".into(),
        git_store: "/Users/op/Library/quest/jobs/j1/git".into(),
        worktree_admin: "/Users/op/Library/quest/jobs/j1/git/worktrees/checkout".into(),
        temp_dir: "/private/tmp/quest-job-abc123".into(),
        job_dir: "/Users/op/Library/quest/jobs/j1/runner".into(),
        helper_tmp: "/private/tmp/quest-srt-abc123".into(),
        devshell_script: None,
    };
    let policy = plan_policy(
        &ws,
        &PolicyInputs {
            platform: Platform::Macos,
            trust: Trust::Untrusted,
            extra_hosts: vec![],
            full_access_hosts: Vec::new(),
            dependency_hosts: Vec::new(),
            state_dir: "/Users/op/Library/quest".into(),
            operator_home: Some("/Users/op".into()),
            private: vec![],
        },
    );
    let s = claude::settings(
        &policy,
        Path::new("/Users/op/Library/quest/jobs/j1/runner/claude/gateway-token"),
    );
    let srt = super::commands::srt_settings(
        &policy,
        None,
        Path::new("/opt/qr/quest-runner"),
        &Default::default(),
    );
    let fs = &srt["filesystem"];
    let deny_read = fs["denyRead"].to_string();
    // The operator's ~/Library/Keychains is covered by /Users itself.
    for path in ["/Users", "/private/tmp", "/Library/Keychains"] {
        assert!(
            deny_read.contains(&format!("\"{path}\"")),
            "{path} in {deny_read}"
        );
    }
    let allow_read = fs["allowRead"].to_string();
    assert!(allow_read.contains("/Users/op/Library/quest/jobs/j1/checkout"));
    assert!(allow_read.contains("/private/tmp/quest-job-abc123"));
    assert_eq!(srt["network"]["allowedDomains"], serde_json::json!([]));
    assert!(s["permissions"]["allow"]
        .to_string()
        .contains("Edit(//Users/op/Library/quest/jobs/j1/checkout/**)"));
}
