//! opencode: no sandbox of its own, so every command of its bash tool runs in one srt
//! sandbox per job, made by srt's library from settings rendered from the same policy
//! (`crate::jobshell`): opencode.json's `shell` is a link to the runner's binary, which hands
//! each command to the job's executor; the executor runs it under srt's seccomp helper, in
//! the sandbox's environment (built from nothing), after the revision's devShell.
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
use crate::jobshell::host::HostPlan;
use crate::sandbox::SandboxPolicy;

const PLUGIN: &str = include_str!("opencode-plugin.js");
const HOST: &str = include_str!("../jobshell/sandbox-host.mjs");
/// The sandbox host's script, in the job's runner dir.
const HOST_SCRIPT: &str = "sandbox-host.mjs";

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

/// The directory of srt's package (`package.json`, `vendor/`), found from its binary.
///
/// srt runs helpers of its own inside the sandbox (its seccomp loader, a JVM proxy agent),
/// so its package must be readable there even when it is installed under a denied tree
/// (a checkout of this project in `/tmp`, say).
pub fn srt_package_dir(srt: &Path) -> Option<PathBuf> {
    let real = std::fs::canonicalize(srt).ok()?;
    real.ancestors()
        .skip(1)
        .find(|dir| dir.join("package.json").is_file())
        .map(Path::to_path_buf)
        .or_else(|| {
            // A wrapper in `<prefix>/bin` (the Nix package) beside the package it runs.
            let prefix = real.parent()?.parent()?;
            let dir = prefix.join("lib/node_modules/@anthropic-ai/sandbox-runtime");
            dir.join("package.json").is_file().then_some(dir)
        })
}

/// srt's settings for the policy, with srt's own package and the runner's binary (the
/// executor) readable, and the executor in the place of srt's seccomp helper.
pub fn srt_settings(policy: &SandboxPolicy, srt_package: Option<&Path>, runner: &Path) -> Value {
    let mut allow_read = policy.allow_read.clone();
    if let Some(dir) = srt_package {
        allow_read.push(dir.to_path_buf());
    }
    allow_read.push(runner.to_path_buf());
    let mut network = json!({
        "allowedDomains": policy.allowed_hosts,
        "deniedDomains": [],
        "allowUnixSockets": [],
        "allowAllUnixSockets": false,
        "allowLocalBinding": false,
    });
    if let Some(port) = policy.proxy_port {
        // The runner's proxy decides every request: both ports, or srt's own SOCKS proxy
        // would carry traffic past it.
        network["httpProxyPort"] = json!(port);
        network["socksProxyPort"] = json!(port);
    }
    json!({
        "network": network,
        "filesystem": {
            "denyRead": policy.deny_read,
            "allowRead": allow_read,
            "allowWrite": policy.allow_write,
            "denyWrite": policy.deny_write,
        },
        // srt starts `ARGV0=<argv0> <applyPath> <shell> -c <command>` where its seccomp
        // helper goes: the executor, which starts that helper for each command.
        "seccomp": {
            "applyPath": runner,
            "argv0": crate::jobshell::executor::ARGV0,
        },
    })
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

/// The executor's settings (all but srt's helper, which the sandbox host adds).
pub fn executor_settings(policy: &SandboxPolicy, dirs: &Dirs) -> Value {
    json!({
        "checkout": policy.checkout,
        "cwd_alias": dirs.cwd,
        "devshell": policy.devshell_script,
        "prelude": policy.command_prelude(),
        "watch": policy.deny_read,
    })
}

/// The sandbox host's start: node running the host script with srt's library, in the checkout,
/// with srt's environment — the commands' (the policy's, built from nothing), srt's scratch
/// space for its sockets (short paths), and the commands' TMPDIR, which srt takes from
/// CLAUDE_CODE_TMPDIR.
pub fn host_plan(
    policy: &SandboxPolicy,
    inputs: &AgentInputs<'_>,
    node: &Path,
    srt_package: &Path,
) -> HostPlan {
    let runner_dir = &inputs.workspace.job_dir;
    let mut env = policy.environment(inputs.host_env.clone());
    env.insert(
        "TMPDIR".into(),
        inputs.workspace.helper_tmp.to_string_lossy().into_owned(),
    );
    env.insert(
        "CLAUDE_CODE_TMPDIR".into(),
        policy.tmpdir.to_string_lossy().into_owned(),
    );
    let s = |p: &Path| p.to_string_lossy().into_owned();
    HostPlan {
        program: node.to_path_buf(),
        args: vec![
            s(&runner_dir.join(HOST_SCRIPT)),
            s(srt_package),
            s(&runner_dir.join("srt.json")),
            s(&runner_dir.join("executor.json")),
        ],
        env,
        cwd: policy.checkout.clone(),
        socket_dir: runner_dir.clone(),
        log: runner_dir.join("sandbox.log"),
        own: crate::sandbox::boundary::OwnFiles {
            read: vec![runner_dir.clone()],
            write: vec![inputs.workspace.helper_tmp.clone()],
            read_only: vec![],
        },
        socket_owner: None,
        confined: None,
    }
}

/// The launch of an opencode job: its files (the shell link, srt's and the executor's
/// settings, opencode's config, its private directories), its environment and arguments, and
/// the host side that runs its commands (the companion).
pub fn plan(inputs: &AgentInputs<'_>, account: &OpencodeAccount) -> Result<Launch, AgentError> {
    let srt = inputs.srt.ok_or(AgentError::NoSrt)?;
    let node = inputs.node.ok_or(AgentError::NoNode)?;
    let runner = inputs.runner.ok_or(AgentError::NoRunner)?;
    let srt_package = srt_package_dir(srt).ok_or_else(|| AgentError::NoSrtPackage(srt.into()))?;
    if account.auth_file.is_none() && account.config.is_none() {
        return Err(AgentError::NoCredentials(inputs.job.account.clone()));
    }
    let policy = inputs.policy;
    let job_dir = &inputs.workspace.job_dir;
    let dirs = Dirs::new(job_dir);
    let file_inputs = FileInputs {
        inputs,
        account,
        dirs: &dirs,
        shell: job_dir.join(crate::jobshell::client::NAME),
        runner,
        srt_package: &srt_package,
    };
    Ok(Launch {
        program: inputs.program.to_path_buf(),
        args: launch_args(account),
        env: launch_env(inputs, &dirs),
        cwd: dirs.cwd.clone(),
        stdin: inputs.job.prompt.clone(),
        files: planned_files(&file_inputs),
        transcript: job_dir.join("transcript.jsonl"),
        companion: Some(host_plan(policy, inputs, node, &srt_package)),
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

/// What the job's files are made from.
struct FileInputs<'a> {
    inputs: &'a AgentInputs<'a>,
    account: &'a OpencodeAccount,
    dirs: &'a Dirs,
    /// opencode's shell: a link to the runner's binary in the job dir.
    shell: PathBuf,
    runner: &'a Path,
    srt_package: &'a Path,
}

/// The written files, then the private directories, the file tools' plugin (when the policy
/// confines them) and the link to the account's login (without the gateway).
fn planned_files(w: &FileInputs<'_>) -> Vec<PlannedFile> {
    let (policy, dirs, account) = (w.inputs.policy, w.dirs, w.account);
    let opencode_config = dirs.config.join("opencode");
    let mut files = written_files(w);
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
    if let (Some(auth), None) = (&account.auth_file, w.inputs.gateway) {
        files.push(PlannedFile {
            path: dirs.data.join("opencode/auth.json"),
            contents: Contents::Symlink(auth.clone()),
        });
    }
    files
}

/// The shell link, srt's and the executor's settings, the host script, and opencode's config
/// directory (its config, global instructions, and the lock that keeps npm away).
fn written_files(w: &FileInputs<'_>) -> Vec<PlannedFile> {
    let (inputs, account, dirs) = (w.inputs, w.account, w.dirs);
    let (shell, runner, srt_package) = (&w.shell, w.runner, w.srt_package);
    let policy = inputs.policy;
    let job_dir = &inputs.workspace.job_dir;
    let opencode_config = dirs.config.join("opencode");
    vec![
        // opencode's shell: the runner's binary, which knows the job by the link's directory.
        PlannedFile {
            path: shell.clone(),
            contents: Contents::Symlink(runner.to_path_buf()),
        },
        file(
            &job_dir.join("srt.json"),
            pretty(&srt_settings(policy, Some(srt_package), runner)),
            0o600,
        ),
        file(
            &job_dir.join("executor.json"),
            pretty(&executor_settings(policy, dirs)),
            0o600,
        ),
        file(&job_dir.join(HOST_SCRIPT), HOST.to_string(), 0o600),
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
    ]
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
