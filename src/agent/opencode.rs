//! opencode: no sandbox of its own, so every command of its bash tool runs under srt with
//! settings rendered from the same policy, through a shell wrapper (opencode.json `shell`)
//! that also sources the devShell and builds the command's environment from nothing.
//!
//! opencode itself runs on the host, so nothing of the checkout may configure it. opencode
//! 1.18 imports a project's plugins (`opencode.json` `plugin`, `.opencode/plugin/`) from its
//! working directory upwards even with `OPENCODE_DISABLE_PROJECT_CONFIG`, so it runs in an
//! empty private directory; the wrapper maps that directory to the checkout for commands,
//! and the file tools take absolute paths. Those file tools run in opencode's own process:
//! the runner's plugin refuses any path outside what the policy allows. opencode.json turns
//! the file tools off and the plugin turns them back on, so a plugin that fails to load
//! leaves them off rather than unconfined.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::{AgentError, AgentInputs, Contents, Launch, PlannedFile};
use crate::config::OpencodeAccount;
use crate::devshell::render::quote;
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
}

/// srt's settings for the policy, with srt's own package readable.
pub fn srt_settings(policy: &SandboxPolicy, srt_package: Option<&Path>) -> Value {
    let mut allow_read = policy.allow_read.clone();
    if let Some(dir) = srt_package {
        allow_read.push(dir.to_path_buf());
    }
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
            &lit(json!(crate::sandbox::policy::SRT_PROTECTED_NAMES)),
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

/// The wrapper opencode runs each command with: `<wrapper> -c <command>`.
pub fn wrapper(
    policy: &SandboxPolicy,
    inputs: &AgentInputs<'_>,
    srt: &Path,
    dirs: &Dirs,
) -> String {
    let settings = inputs.workspace.job_dir.join("srt.json");
    let mut env = policy.environment(inputs.host_env.clone());
    // srt's own scratch space (sockets: short paths), and the command's TMPDIR, which srt
    // takes from CLAUDE_CODE_TMPDIR.
    env.insert(
        "TMPDIR".into(),
        inputs.workspace.helper_tmp.to_string_lossy().into_owned(),
    );
    env.insert(
        "CLAUDE_CODE_TMPDIR".into(),
        policy.tmpdir.to_string_lossy().into_owned(),
    );
    let env_args: Vec<String> = env
        .iter()
        .map(|(k, v)| quote(&format!("{k}={v}")))
        .collect();
    let checkout = quote(&policy.checkout.to_string_lossy());
    let devshell = match &policy.devshell_script {
        Some(script) => format!(". {}\n", quote(&script.to_string_lossy())),
        None => String::new(),
    };
    // Into a double-quoted string of the wrapper: expanded inside the sandbox, not here.
    let devshell = double_quoted(&format!("{}{devshell}", policy.command_prelude()));
    format!(
        r#"#!/bin/bash
# quest-runner: opencode's shell for this job. opencode runs `<this> -c <command>` for every
# bash tool call; the command runs inside srt with this job's settings, in an environment
# built from nothing (none of opencode's own reaches it), after the revision's devShell.
if [ "$#" -ne 2 ] || [ "$1" != "-c" ]; then
  echo "quest-runner: this shell only runs '-c <command>'" >&2
  exit 2
fi
workdir=$(pwd -P) || exit 1
# opencode's own directory is an empty private one: commands start in the checkout.
[ "$workdir" = {cwd} ] && workdir={checkout}
# srt puts mount points for missing protected files in its working directory: keep that the
# checkout's top, and enter the workdir inside the sandbox.
cd -- {checkout} || exit 1
script="cd -- $(printf '%q' "$workdir") || exit 1
{devshell}$2"
exec /usr/bin/env -i \
  {env} \
  {srt} --settings {settings} -c "$script"
"#,
        cwd = quote(&dirs.cwd.to_string_lossy()),
        env = env_args.join(" \\\n  "),
        srt = quote(&srt.to_string_lossy()),
        settings = quote(&settings.to_string_lossy()),
    )
}

/// `text` escaped for the inside of a double-quoted bash string: its `$`, backquotes,
/// backslashes and double quotes stay literal.
pub(crate) fn double_quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '$' | '`' | '\\' | '"') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

pub fn plan(inputs: &AgentInputs<'_>, account: &OpencodeAccount) -> Result<Launch, AgentError> {
    let srt = inputs.srt.ok_or(AgentError::NoSrt)?;
    if account.auth_file.is_none() && account.config.is_none() {
        return Err(AgentError::NoCredentials(inputs.job.account.clone()));
    }
    let policy = inputs.policy;
    let job_dir = &inputs.workspace.job_dir;
    let dirs = Dirs::new(job_dir);
    let shell = job_dir.join("quest-shell");
    let opencode_config = dirs.config.join("opencode");

    let mut files = vec![
        file(&shell, wrapper(policy, inputs, srt, &dirs), 0o700),
        file(
            &job_dir.join("srt.json"),
            pretty(&srt_settings(policy, srt_package_dir(srt).as_deref())),
            0o600,
        ),
        file(
            &opencode_config.join("opencode.json"),
            pretty(&config(policy, account, &shell, inputs.gateway)),
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
            plugin(policy, &dirs),
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

    let mut args: Vec<String> = ["run", "--format", "json", "--print-logs"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    if let Some(model) = &account.model {
        args.push("--model".into());
        args.push(model.clone());
    }
    Ok(Launch {
        program: inputs.program.to_path_buf(),
        args,
        env,
        cwd: dirs.cwd.clone(),
        stdin: inputs.job.prompt.clone(),
        files,
        transcript: job_dir.join("transcript.jsonl"),
    })
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
