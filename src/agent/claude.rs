//! Claude Code: its built-in sandbox (bubblewrap on Linux, Seatbelt on macOS) enforces the
//! policy on every Bash command; permission rules confine the file tools, which the sandbox
//! does not cover.
//!
//! The job gets a Claude config dir of its own (`CLAUDE_CONFIG_DIR`) holding only the
//! settings rendered here and the job's gateway token: Claude Code talks to the runner's model
//! gateway (`ANTHROPIC_BASE_URL`), which holds the account's key or login. With `--setting-sources user`
//! those settings are all that load: the checkout's `.claude/settings.json` (hooks,
//! permissions, sandbox loosening) never does, and `--strict-mcp-config` keeps out its
//! `.mcp.json`. The devShell is sourced before each command, inside the sandbox, through
//! `CLAUDE_ENV_FILE`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::{
    devshell_hook, AgentError, AgentInputs, Contents, GatewayAccess, Launch, OwnFiles, PlannedFile,
};
use crate::config::ClaudeAccount;
use crate::sandbox::SandboxPolicy;

pub fn config_dir(job_dir: &Path) -> PathBuf {
    job_dir.join("claude")
}

/// The job's gateway token, in the job's Claude config dir (which commands cannot read).
pub fn token_file(job_dir: &Path) -> PathBuf {
    config_dir(job_dir).join("gateway-token")
}

/// Claude Code's own programs, first on its `PATH`: the `bwrap` its sandbox runs, the
/// runner's (src/jobshell/seccomp_stage.rs). Claude Code finds bwrap on `PATH`; its
/// `sandbox.bwrapPath` is read from the machine's managed settings only.
pub fn bin_dir(job_dir: &Path) -> PathBuf {
    job_dir.join("claude-bin")
}

/// The settings file: sandbox, permissions, and the API key helper, which hands Claude Code
/// the job's gateway token (`token_file`), never the account's key.
/// `helper`: srt's seccomp helper, where the runner moves Claude Code's seccomp stage
/// (src/jobshell/seccomp_stage.rs): read by the commands' sandbox, wherever it is installed
/// (under a home directory the policy hides, say).
pub fn settings(policy: &SandboxPolicy, token_file: &Path, helper: Option<&Path>) -> Value {
    let checkout = rule_path(&policy.checkout);
    let temp = rule_path(&policy.tmpdir);
    // dontAsk denies whatever no rule allows, so these rules are the file tools' whole reach.
    let file_rules = if policy.confine_file_tools {
        vec![
            format!("Edit({checkout}/**)"),
            format!("Read({checkout}/**)"),
            format!("Read({temp}/**)"),
        ]
    } else {
        // Every file tool, everywhere: the suite's proof that the namespace holds alone.
        ["Edit", "Write", "Read", "Glob", "Grep", "NotebookEdit"]
            .map(String::from)
            .to_vec()
    };
    let allow_read: Vec<PathBuf> = policy
        .allow_read
        .iter()
        .cloned()
        .chain(helper.map(Path::to_path_buf))
        .collect();
    let mut allow: Vec<String> = vec!["Bash".into()];
    allow.extend(file_rules);
    allow.extend(["Glob", "Grep", "WebSearch", "TodoWrite"].map(String::from));
    let mut settings = json!({
        "permissions": {
            "defaultMode": "dontAsk",
            "allow": allow,
            // WebFetch runs outside the sandbox, in Claude Code's own process.
            "deny": ["WebFetch"],
            "disableBypassPermissionsMode": "disable",
        },
        "sandbox": {
            "enabled": true,
            "failIfUnavailable": true,
            "allowUnsandboxedCommands": false,
            "autoAllowBashIfSandboxed": true,
            "excludedCommands": [],
            "filesystem": {
                "denyRead": paths(&policy.deny_read),
                "allowRead": paths(&allow_read),
                "allowWrite": paths(&policy.allow_write),
                "denyWrite": paths(&policy.deny_write),
            },
            "network": {
                "allowedDomains": policy.allowed_hosts,
                "allowUnixSockets": [],
                "allowAllUnixSockets": false,
                "allowLocalBinding": false,
            },
        },
        "disableAllHooks": true,
        "autoMemoryEnabled": false,
        "enableAllProjectMcpServers": false,
        "includeCoAuthoredBy": false,
    });
    if let Some(port) = policy.proxy_port {
        // The runner's proxy decides every request: both the HTTP and the SOCKS port, or
        // the sandbox's own SOCKS proxy would carry traffic past it.
        settings["sandbox"]["network"]["httpProxyPort"] = json!(port);
        settings["sandbox"]["network"]["socksProxyPort"] = json!(port);
    }
    // Claude Code runs the helper itself, outside the sandbox, and sends what it prints as
    // its API key: the token never enters an environment a command could inherit.
    settings["apiKeyHelper"] = json!(format!(
        "cat {}",
        crate::util::shell::quote(&token_file.to_string_lossy())
    ));
    settings
}

/// Permission rules name absolute paths with a leading `//`.
fn rule_path(path: &Path) -> String {
    format!("/{}", path.display())
}

fn paths(list: &[PathBuf]) -> Vec<String> {
    list.iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect()
}

/// The launch of a Claude Code job: its config dir, settings, devShell hook and gateway token
/// as files, then its environment and its arguments.
pub fn plan(inputs: &AgentInputs<'_>, account: &ClaudeAccount) -> Result<Launch, AgentError> {
    if account.api_key_file.is_none() && account.credentials_file.is_none() {
        return Err(AgentError::NoCredentials(inputs.job.account.clone()));
    }
    let gateway = inputs.gateway.ok_or(AgentError::Unsupported(
        "Claude Code jobs reach their model through the runner's gateway, which is not open",
    ))?;
    let policy = inputs.policy;
    let job_dir = &inputs.workspace.job_dir;
    let config_dir = config_dir(job_dir);
    let hook = job_dir.join("devshell-hook.sh");
    let token_file = token_file(job_dir);
    let helper = inputs.bwrap_shim.map(|shim| shim.helper.as_path());
    let settings = settings(policy, &token_file, helper);

    let mut files = vec![
        PlannedFile {
            path: config_dir.clone(),
            contents: Contents::Dir,
        },
        PlannedFile {
            path: config_dir.join("settings.json"),
            contents: Contents::File(
                serde_json::to_string_pretty(&settings).unwrap_or_default(),
                0o600,
            ),
        },
        PlannedFile {
            path: hook.clone(),
            contents: Contents::File(devshell_hook(policy), 0o600),
        },
        PlannedFile {
            path: token_file,
            contents: Contents::File(gateway.token.clone(), 0o600),
        },
    ];
    let mut read = vec![job_dir.clone()];
    if let Some(shim) = inputs.bwrap_shim {
        files.push(PlannedFile {
            path: bin_dir(job_dir),
            contents: Contents::Dir,
        });
        files.push(PlannedFile {
            path: bin_dir(job_dir).join("bwrap"),
            contents: Contents::File(shim.script(inputs.program), 0o700),
        });
        // Where the stage finds it, inside the job's namespace and the commands' sandbox.
        read.push(shim.helper.clone());
    }

    Ok(Launch {
        program: inputs.program.to_path_buf(),
        args: launch_args(inputs, account),
        env: launch_env(inputs, gateway, &config_dir, &hook),
        cwd: policy.checkout.clone(),
        stdin: inputs.job.prompt.clone(),
        files,
        transcript: job_dir.join("transcript.jsonl"),
        companion: None,
        // Its settings and token are read, never written: they confine it and name its
        // model's grant. The rest of its config dir is its own (sessions, todos, state).
        own: OwnFiles {
            read,
            write: vec![config_dir.clone()],
            read_only: vec![config_dir.join("settings.json"), self::token_file(job_dir)],
        },
        confined: None,
        net_bridge: None,
    })
}

/// The policy's environment, with Claude Code's own directories and the gateway as its
/// model's base URL, and no credential but the job's token.
fn launch_env(
    inputs: &AgentInputs<'_>,
    gateway: &GatewayAccess,
    config_dir: &Path,
    hook: &Path,
) -> BTreeMap<String, String> {
    let policy = inputs.policy;
    let mut env = policy.environment(inputs.host_env.clone());
    let temp = policy.tmpdir.to_string_lossy().into_owned();
    for (k, v) in [
        (
            "CLAUDE_CONFIG_DIR",
            config_dir.to_string_lossy().into_owned(),
        ),
        ("CLAUDE_ENV_FILE", hook.to_string_lossy().into_owned()),
        // Claude Code's sandbox gives commands this as TMPDIR; it must be the job's own.
        ("CLAUDE_CODE_TMPDIR", temp),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_string()),
        // Auto memory writes notes under the config dir that a later session of the same
        // checkout path would load: inside the job's namespace, but off all the same.
        ("CLAUDE_CODE_DISABLE_AUTO_MEMORY", "1".to_string()),
        ("DISABLE_AUTOUPDATER", "1".to_string()),
    ] {
        env.insert(k.to_string(), v);
    }
    if inputs.bwrap_shim.is_some() {
        let dir = bin_dir(&inputs.workspace.job_dir);
        let path = match env.get("PATH") {
            Some(rest) if !rest.is_empty() => format!("{}:{rest}", dir.display()),
            _ => dir.to_string_lossy().into_owned(),
        };
        env.insert("PATH".to_string(), path);
    }
    // The account's own base_url is the gateway's upstream.
    env.insert("ANTHROPIC_BASE_URL".to_string(), gateway.base_url.clone());
    // Claude Code prefers these to its apiKeyHelper: the job's token must be its only
    // credential, whatever the environment it is started from holds.
    for k in [
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "CLAUDE_CODE_OAUTH_TOKEN",
    ] {
        env.remove(k);
    }
    env
}

/// Headless, streaming, user settings only, no MCP config of the checkout's, no WebFetch.
fn launch_args(inputs: &AgentInputs<'_>, account: &ClaudeAccount) -> Vec<String> {
    let mut args: Vec<String> = [
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--setting-sources",
        "user",
        "--strict-mcp-config",
        "--permission-mode",
        "dontAsk",
        "--disallowedTools",
        // WebFetch runs in Claude Code's own process with the network; EnterWorktree makes a
        // worktree, admin dir and branch in the job's git store, beyond what commands write.
        "WebFetch,EnterWorktree,ExitWorktree",
        "--append-system-prompt",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(inputs.system_prompt.to_string());
    if let Some(model) = &account.model {
        args.push("--model".to_string());
        args.push(model.clone());
    }
    args
}
