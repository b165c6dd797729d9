//! opencode: no sandbox of its own, so every command of its bash tool runs in one srt
//! sandbox per job, made by srt's library from settings rendered from the same policy
//! (`crate::jobshell`, planned in `super::commands`): opencode.json's `shell` is a link to the
//! runner's binary, which hands each command to the job's executor; the executor runs it under
//! srt's seccomp helper, in the sandbox's environment (built from nothing), after the
//! revision's devShell.
//!
//! opencode itself runs on the host, so nothing of the checkout may configure it. opencode
//! 1.18 imports a project's plugins (`opencode.json` `plugin`, `.opencode/plugin/`) from its
//! working directory upwards even with `OPENCODE_DISABLE_PROJECT_CONFIG`, so it runs in an
//! empty private directory; the wrapper maps that directory to the checkout for commands,
//! and the file tools take absolute paths. Those file tools run in opencode's own process:
//! the runner's plugin refuses any path outside what the policy allows. opencode.json turns
//! the file tools off and the plugin turns them back on, so a plugin that fails to load
//! leaves them off rather than unconfined.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::{AgentError, AgentInputs, Contents, Launch, PlannedFile};
use crate::config::OpencodeAccount;
use crate::sandbox::SandboxPolicy;

const PLUGIN: &str = include_str!("opencode-plugin.js");

/// Account configuration keys the runner takes over; anything else (plugins, agents' own
/// permissions, MCP servers, shells, instructions) could loosen the boundary.
const ACCOUNT_KEYS: &[&str] = &[
    "provider",
    "model",
    "small_model",
    "enabled_providers",
    "disabled_providers",
];

/// Where everything of opencode's lives for one job.
pub struct Dirs {
    pub root: PathBuf,
    pub cwd: PathBuf,
    pub home: PathBuf,
    pub tmp: PathBuf,
    pub config: PathBuf,
    pub data: PathBuf,
    pub state: PathBuf,
    pub cache: PathBuf,
}

impl Dirs {
    pub fn new(job_dir: &Path) -> Dirs {
        let root = job_dir.join("opencode");
        Dirs {
            cwd: root.join("cwd"),
            home: root.join("home"),
            tmp: root.join("tmp"),
            config: root.join("config"),
            data: root.join("data"),
            state: root.join("state"),
            cache: root.join("cache"),
            root,
        }
    }

    fn tool_output(&self) -> PathBuf {
        self.data.join("opencode/tool-output")
    }
}

/// The plugin with the policy's paths baked in as JSON literals.
pub fn plugin(policy: &SandboxPolicy, dirs: &Dirs) -> String {
    let lit = |v: Value| v.to_string();
    PLUGIN
        .replace("__QUEST_CHECKOUT__", &lit(json!(policy.checkout)))
        .replace(
            "__QUEST_READ_ROOTS__",
            &lit(json!([policy.tmpdir, dirs.tool_output()])),
        )
        .replace("__QUEST_DENY_WRITE__", &lit(json!(policy.deny_write)))
        .replace(
            "__QUEST_PROTECTED_NAMES__",
            &lit(json!(crate::workspace::SRT_PROTECTED_NAMES)),
        )
}

/// opencode.json: the runner's settings, with the account's provider and model; with a
/// gateway, the provider's `baseURL` is the gateway and its `apiKey` the job's token.
pub fn config(
    policy: &SandboxPolicy,
    account: &OpencodeAccount,
    shell: &Path,
    gateway: Option<&super::GatewayAccess>,
) -> Value {
    let mut permission = json!({
        "*": "allow",
        // Commands that name outside paths reach srt, which decides; an "ask" would end
        // the run (`opencode run` rejects every ask).
        "external_directory": "allow",
        // Run in opencode's own process with network access.
        "webfetch": "deny",
        "websearch": "deny",
        "codesearch": "deny",
        "question": "deny",
        "doom_loop": "deny",
    });
    if policy.confine_file_tools {
        // Off until the runner's plugin, which confines them, turns them on.
        for tool in ["read", "edit", "glob", "grep", "list", "lsp"] {
            permission[tool] = json!("deny");
        }
    }
    let mut config = json!({
        "$schema": "https://opencode.ai/config.json",
        "shell": shell,
        "autoupdate": false,
        "share": "disabled",
        // Each would run programs on the host over the repository's content.
        "snapshot": false,
        "lsp": false,
        "formatter": false,
        "mcp": {},
        "permission": permission,
    });
    if let Some(Value::Object(extra)) = &account.config {
        for key in ACCOUNT_KEYS {
            if let Some(v) = extra.get(*key) {
                config[*key] = v.clone();
            }
        }
    }
    if let Some(model) = &account.model {
        config["model"] = json!(model);
    }
    if let Some(gw) = gateway {
        if let Some(provider) = &gw.provider {
            let options = &mut config["provider"][provider.as_str()]["options"];
            options["baseURL"] = json!(gw.base_url);
            options["apiKey"] = json!(gw.token);
        }
    }
    config
}

/// The launch of an opencode job: its files (the shell link, srt's and the executor's
/// settings, opencode's config, its private directories), its environment and arguments, and
/// the host side that runs its commands (the companion).
pub fn plan(inputs: &AgentInputs<'_>, account: &OpencodeAccount) -> Result<Launch, AgentError> {
    let tools = super::commands::Tools::from_inputs(inputs)?;
    if account.auth_file.is_none() && account.config.is_none() {
        return Err(AgentError::NoCredentials(inputs.job.account.clone()));
    }
    let job_dir = &inputs.workspace.job_dir;
    let dirs = Dirs::new(job_dir);
    let shell = job_dir.join(crate::jobshell::client::NAME);
    let (mut files, host) = super::commands::plan(inputs, &tools, &shell, &dirs.cwd);
    files.extend(planned_files(inputs, account, &dirs, &shell));
    Ok(Launch {
        program: inputs.program.to_path_buf(),
        args: launch_args(account),
        env: launch_env(inputs, &dirs),
        cwd: dirs.cwd.clone(),
        stdin: inputs.job.prompt.clone(),
        files,
        transcript: job_dir.join("transcript.jsonl"),
        companion: Some(host),
        own: own_files(job_dir, &dirs, account, inputs.gateway),
        confined: None,
        net_bridge: None,
    })
}

/// What opencode reads and writes of its own: its private directories, its config directory
/// too (it writes its own files there at start), but the runner's settings, instructions and
/// plugin in it read-only.
fn own_files(
    job_dir: &Path,
    dirs: &Dirs,
    account: &OpencodeAccount,
    gateway: Option<&super::GatewayAccess>,
) -> super::OwnFiles {
    let config = dirs.config.join("opencode");
    let mut write = vec![
        dirs.cwd.clone(),
        dirs.home.clone(),
        dirs.tmp.clone(),
        dirs.state.clone(),
        dirs.cache.clone(),
        dirs.data.clone(),
        dirs.config.clone(),
    ];
    // Without the gateway opencode holds the account's login itself (OAuth entries it
    // refreshes): the one private file its namespace shows, where its link points.
    if let (Some(auth), None) = (&account.auth_file, gateway) {
        write.push(auth.clone());
    }
    super::OwnFiles {
        read: vec![job_dir.to_path_buf()],
        write,
        read_only: ["opencode.json", "AGENTS.md", "package-lock.json", "plugin"]
            .iter()
            .map(|name| config.join(name))
            .collect(),
    }
}

/// opencode's config directory (its config, global instructions, and the lock that keeps npm
/// away), its private directories, the file tools' plugin (when the policy confines them) and
/// the link to the account's login (without the gateway).
fn planned_files(
    inputs: &AgentInputs<'_>,
    account: &OpencodeAccount,
    dirs: &Dirs,
    shell: &Path,
) -> Vec<PlannedFile> {
    let policy = inputs.policy;
    let opencode_config = dirs.config.join("opencode");
    let mut files = vec![
        file(
            &opencode_config.join("opencode.json"),
            pretty(&config(policy, account, shell, inputs.gateway)),
            0o600,
        ),
        // Global instructions: opencode reads them from its config directory.
        file(
            &opencode_config.join("AGENTS.md"),
            format!(
                "{}\n\nopencode's own working directory is an empty private one: use absolute paths under {} with the file tools. Commands start in the checkout.\n",
                inputs.system_prompt,
                policy.checkout.display()
            ),
            0o600,
        ),
        // With these, opencode does not `npm install @opencode-ai/plugin` from the host.
        file(
            &opencode_config.join("package-lock.json"),
            r#"{"lockfileVersion":3,"packages":{"":{"dependencies":{"@opencode-ai/plugin":"*"}}}}"#.to_string(),
            0o600,
        ),
    ];
    for dir in [
        &dirs.cwd,
        &dirs.home,
        &dirs.tmp,
        &dirs.state,
        &dirs.cache,
        &opencode_config.join("node_modules"),
        &dirs.data.join("opencode"),
    ] {
        files.push(PlannedFile {
            path: dir.clone(),
            contents: Contents::Dir,
        });
    }
    if policy.confine_file_tools {
        files.push(file(
            &opencode_config.join("plugin/quest-runner.js"),
            plugin(policy, dirs),
            0o600,
        ));
    }
    // Through the gateway, opencode holds no login at all; otherwise (OAuth entries, which
    // opencode refreshes itself) it reads the account's auth.json through a link.
    if let (Some(auth), None) = (&account.auth_file, inputs.gateway) {
        files.push(PlannedFile {
            path: dirs.data.join("opencode/auth.json"),
            contents: Contents::Symlink(auth.clone()),
        });
    }
    files
}

/// The policy's environment, with opencode's directories the job's own and its project
/// config, Claude Code compatibility, downloads and git's global config off.
fn launch_env(inputs: &AgentInputs<'_>, dirs: &Dirs) -> BTreeMap<String, String> {
    let policy = inputs.policy;
    let mut env = policy.environment(inputs.host_env.clone());
    let s = |p: &Path| p.to_string_lossy().into_owned();
    for (k, v) in [
        ("HOME", s(&dirs.home)),
        ("TMPDIR", s(&dirs.tmp)),
        ("XDG_CONFIG_HOME", s(&dirs.config)),
        ("XDG_DATA_HOME", s(&dirs.data)),
        ("XDG_STATE_HOME", s(&dirs.state)),
        ("XDG_CACHE_HOME", s(&dirs.cache)),
        ("OPENCODE_DISABLE_PROJECT_CONFIG", "1".into()),
        ("OPENCODE_DISABLE_CLAUDE_CODE", "1".into()),
        ("OPENCODE_DISABLE_EXTERNAL_SKILLS", "1".into()),
        ("OPENCODE_DISABLE_MODELS_FETCH", "1".into()),
        ("OPENCODE_DISABLE_AUTOUPDATE", "1".into()),
        ("OPENCODE_DISABLE_LSP_DOWNLOAD", "1".into()),
        ("GIT_CONFIG_GLOBAL", "/dev/null".into()),
    ] {
        env.insert(k.to_string(), v);
    }
    // The agent's commits get their identity in the wrapper; opencode itself needs none.
    for k in [
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
    ] {
        env.remove(k);
    }

    env
}

fn launch_args(account: &OpencodeAccount) -> Vec<String> {
    let mut args: Vec<String> = ["run", "--format", "json", "--print-logs"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    if let Some(model) = &account.model {
        args.push("--model".into());
        args.push(model.clone());
    }
    args
}

fn file(path: &Path, text: String, mode: u32) -> PlannedFile {
    PlannedFile {
        path: path.to_path_buf(),
        contents: Contents::File(text, mode),
    }
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}
