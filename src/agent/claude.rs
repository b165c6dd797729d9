//! Claude Code: every command of its Bash tool runs in the job's one srt sandbox
//! (`super::commands`), handed over by the runner's binary as Claude Code's command prefix
//! (`CLAUDE_CODE_SHELL_PREFIX`); permission rules confine the file tools, which no sandbox
//! covers.
//!
//! Claude Code's own sandbox is off. It is srt too, made from the same policy, but remade for
//! every command: a bubblewrap over the job's namespace, which re-reads the whole mount table
//! for each of its ~100 mounts (~160 ms a command against ~105 ms for Claude Code alone with
//! its sandbox). The job's sandbox is made once, beside the agent, and costs a command a few
//! milliseconds; it is the layer opencode's commands have. Claude Code's shell snapshot (made
//! at its start by its own shell, in the job's namespace, into the job's config dir) is not
//! readable there, so a command starts from the policy's environment and the devShell, which
//! the executor sources.
//!
//! The job gets a Claude config dir of its own (`CLAUDE_CONFIG_DIR`) holding only the
//! settings rendered here and the job's gateway token: Claude Code talks to the runner's model
//! gateway (`ANTHROPIC_BASE_URL`), which holds the account's key or login. With `--setting-sources user`
//! those settings are all that load: the checkout's `.claude/settings.json` (hooks,
//! permissions, sandbox loosening) never does, and `--strict-mcp-config` keeps out its
//! `.mcp.json`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::{AgentError, AgentInputs, Contents, GatewayAccess, Launch, OwnFiles, PlannedFile};
use crate::config::ClaudeAccount;
use crate::sandbox::SandboxPolicy;

pub fn config_dir(job_dir: &Path) -> PathBuf {
    job_dir.join("claude")
}

/// The job's gateway token, in the job's Claude config dir (which commands cannot read).
pub fn token_file(job_dir: &Path) -> PathBuf {
    config_dir(job_dir).join("gateway-token")
}

/// The settings file: permissions, Claude Code's own sandbox off (the job's runs its commands),
/// and the API key helper, which hands Claude Code the job's gateway token (`token_file`), never
/// the account's key.
pub fn settings(policy: &SandboxPolicy, token_file: &Path) -> Value {
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
        // Its commands run in the job's sandbox (`CLAUDE_CODE_SHELL_PREFIX`), made once.
        "sandbox": {"enabled": false},
        "disableAllHooks": true,
        "autoMemoryEnabled": false,
        "enableAllProjectMcpServers": false,
        "includeCoAuthoredBy": false,
    });
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

/// The launch of a Claude Code job: its config dir, settings and gateway token as files, the
/// commands' sandbox (`super::commands`), then its environment and its arguments.
pub fn plan(inputs: &AgentInputs<'_>, account: &ClaudeAccount) -> Result<Launch, AgentError> {
    if account.api_key_file.is_none() && account.credentials_file.is_none() {
        return Err(AgentError::NoCredentials(inputs.job.account.clone()));
    }
    let tools = super::commands::Tools::from_inputs(inputs)?;
    let gateway = inputs.gateway.ok_or(AgentError::Unsupported(
        "Claude Code jobs reach their model through the runner's gateway, which is not open",
    ))?;
    let policy = inputs.policy;
    let job_dir = &inputs.workspace.job_dir;
    let config_dir = config_dir(job_dir);
    let token_file = token_file(job_dir);
    let prefix = job_dir.join(crate::jobshell::client::PREFIX_NAME);
    // Claude Code starts its commands in the checkout, or where a command `cd`ed to.
    let (mut files, host) = super::commands::plan(inputs, &tools, &prefix, &policy.checkout);
    files.extend([
        PlannedFile {
            path: config_dir.clone(),
            contents: Contents::Dir,
        },
        PlannedFile {
            path: config_dir.join("settings.json"),
            contents: Contents::File(
                serde_json::to_string_pretty(&settings(policy, &token_file)).unwrap_or_default(),
                0o600,
            ),
        },
        PlannedFile {
            path: token_file.clone(),
            contents: Contents::File(gateway.token.clone(), 0o600),
        },
    ]);
    Ok(Launch {
        program: inputs.program.to_path_buf(),
        args: launch_args(inputs, account),
        env: launch_env(inputs, gateway, &config_dir, &prefix),
        cwd: policy.checkout.clone(),
        stdin: inputs.job.prompt.clone(),
        files,
        transcript: job_dir.join("transcript.jsonl"),
        companion: Some(host),
        // Its settings and token are read, never written: they confine it and name its
        // model's grant. The rest of its config dir is its own (sessions, todos, state).
        own: OwnFiles {
            read: vec![job_dir.clone()],
            write: vec![config_dir.clone()],
            read_only: vec![config_dir.join("settings.json"), token_file],
        },
        confined: None,
        net_bridge: None,
    })
}

/// The policy's environment, with Claude Code's own directories, its command prefix and the
/// gateway as its model's base URL, and no credential but the job's token.
fn launch_env(
    inputs: &AgentInputs<'_>,
    gateway: &GatewayAccess,
    config_dir: &Path,
    prefix: &Path,
) -> BTreeMap<String, String> {
    let policy = inputs.policy;
    let mut env = policy.environment(inputs.host_env.clone());
    let temp = policy.tmpdir.to_string_lossy().into_owned();
    for (k, v) in [
        (
            "CLAUDE_CONFIG_DIR",
            config_dir.to_string_lossy().into_owned(),
        ),
        // Every Bash command, as one argument, to the job's sandbox.
        (
            "CLAUDE_CODE_SHELL_PREFIX",
            prefix.to_string_lossy().into_owned(),
        ),
        // Where Claude Code keeps its own temp files, and the commands write where they `cd`ed
        // to (`pwd -P >| $CLAUDE_CODE_TMPDIR/claude-*-cwd`): the job's temp dir, which the
        // sandbox lets them write.
        ("CLAUDE_CODE_TMPDIR", temp),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_string()),
        // Auto memory writes notes under the config dir that a later session of the same
        // checkout path would load: inside the job's namespace, but off all the same.
        ("CLAUDE_CODE_DISABLE_AUTO_MEMORY", "1".to_string()),
        ("DISABLE_AUTOUPDATER", "1".to_string()),
    ] {
        env.insert(k.to_string(), v);
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
