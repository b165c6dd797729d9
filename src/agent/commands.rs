//! Both agents' commands: one srt sandbox per job (`crate::jobshell`), planned here.
//!
//! Each agent's shell tool hands its commands to a link to the runner's binary in the job's
//! directory (opencode's `shell`, Claude Code's `CLAUDE_CODE_SHELL_PREFIX`), which passes them
//! to the job's executor. The sandbox is srt's, made once per job by srt's library from settings
//! rendered from the job's policy; the sandbox host that makes it runs beside the agent (the
//! launch's companion), started once the agent is up. A command then costs what must happen per command, not a new sandbox.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::{AgentInputs, Contents, PlannedFile};
use crate::jobshell::host::HostPlan;
use crate::sandbox::gvisor::{GvisorExec, Isolation};
use crate::sandbox::SandboxPolicy;

const HOST: &str = include_str!("../jobshell/sandbox-host.mjs");
/// The sandbox host's script, in the job's runner dir.
const HOST_SCRIPT: &str = "sandbox-host.mjs";

/// The programs srt runs itself on Linux, as the runner resolves them (`QUEST_RUNNER_BWRAP`,
/// `_SOCAT`, else `PATH`): the ones `doctor` checked and the AppArmor profile names.
#[derive(Debug, Clone, Default)]
pub struct SrtPrograms {
    pub bwrap: Option<PathBuf>,
    pub socat: Option<PathBuf>,
    /// gVisor's runtime, which the executor starts for each command in `gvisor` isolation.
    pub runsc: Option<PathBuf>,
}

impl SrtPrograms {
    pub fn find() -> SrtPrograms {
        use crate::binaries::{find, Tool};
        if !cfg!(target_os = "linux") {
            return SrtPrograms::default();
        }
        SrtPrograms {
            bwrap: find(Tool::Bwrap).ok(),
            socat: find(Tool::Socat).ok(),
            runsc: find(Tool::Runsc).ok(),
        }
    }
}

/// srt's settings for the policy, with srt's own package and the runner's binary (the
/// executor) readable, and the executor in the place of srt's seccomp helper.
pub fn srt_settings(
    policy: &SandboxPolicy,
    srt_package: Option<&Path>,
    runner: &Path,
    programs: &SrtPrograms,
) -> Value {
    let mut allow_read = policy.allow_read.clone();
    if let Some(dir) = srt_package {
        allow_read.push(dir.to_path_buf());
    }
    allow_read.push(runner.to_path_buf());
    if let Some(runsc) = &programs.runsc {
        allow_read.push(runsc.clone());
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
    let mut settings = json!({
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
    });
    // By path, not srt's own lookup: under Node that runs `which` with a one-second timeout,
    // which a loaded host misses ("bwrap not installed": two jobs of CI's emulated guest).
    if let Some(bwrap) = &programs.bwrap {
        settings["bwrapPath"] = json!(bwrap);
    }
    if let Some(socat) = &programs.socat {
        settings["socatPath"] = json!(socat);
    }
    settings
}

/// The executor's settings (all but srt's helper, which the sandbox host adds). `cwd_alias`:
/// a working directory that means the checkout (opencode's own empty one).
pub fn executor_settings(policy: &SandboxPolicy, cwd_alias: &Path, runsc: Option<&Path>) -> Value {
    let gvisor = match (policy.isolation, runsc) {
        (Isolation::Gvisor, Some(runsc)) => Some(GvisorExec::new(runsc, policy)),
        _ => None,
    };
    json!({
        "checkout": policy.checkout,
        "cwd_alias": cwd_alias,
        "devshell": policy.devshell_script,
        "prelude": policy.command_prelude(),
        "watch": policy.deny_read,
        "gvisor": gvisor,
    })
}

/// What the commands' sandbox is made from, found by the runner before planning.
pub struct Tools {
    pub node: PathBuf,
    pub runner: PathBuf,
    pub srt_package: PathBuf,
    pub programs: SrtPrograms,
}

impl Tools {
    /// srt's package, node and the runner's binary from the inputs, or what is missing.
    pub fn from_inputs(inputs: &AgentInputs<'_>) -> Result<Tools, super::AgentError> {
        use super::AgentError;
        let srt = inputs.srt.ok_or(AgentError::NoSrt)?;
        let node = inputs.node.ok_or(AgentError::NoNode)?;
        let runner = inputs.runner.ok_or(AgentError::NoRunner)?;
        let srt_package = crate::binaries::srt_package_dir(srt)
            .ok_or_else(|| AgentError::NoSrtPackage(srt.into()))?;
        // Never the host's kernel in gVisor's place (admission probed it; this is its path).
        if inputs.policy.isolation == Isolation::Gvisor && inputs.srt_programs.runsc.is_none() {
            return Err(AgentError::NoRunsc);
        }
        Ok(Tools {
            node: node.to_path_buf(),
            runner: runner.to_path_buf(),
            srt_package,
            programs: inputs.srt_programs.clone(),
        })
    }
}

/// The commands' sandbox for one job: the files it needs (the agent's link to the runner's
/// binary, named `link`; srt's and the executor's settings; the host script) and the host's
/// start, the launch's companion.
pub fn plan(
    inputs: &AgentInputs<'_>,
    tools: &Tools,
    link: &Path,
    cwd_alias: &Path,
) -> (Vec<PlannedFile>, HostPlan) {
    let policy = inputs.policy;
    let job_dir = &inputs.workspace.job_dir;
    let file = |name: &str, text: String| PlannedFile {
        path: job_dir.join(name),
        contents: Contents::File(text, 0o600),
    };
    let files = vec![
        // The agent's shell: the runner's binary, which knows the job by the link's directory.
        PlannedFile {
            path: link.to_path_buf(),
            contents: Contents::Symlink(tools.runner.clone()),
        },
        file(
            "srt.json",
            pretty(&srt_settings(
                policy,
                Some(&tools.srt_package),
                &tools.runner,
                &tools.programs,
            )),
        ),
        file(
            "executor.json",
            pretty(&executor_settings(
                policy,
                cwd_alias,
                tools.programs.runsc.as_deref(),
            )),
        ),
        file(HOST_SCRIPT, HOST.to_string()),
    ];
    (files, host_plan(inputs, tools))
}

/// The sandbox host's start: node running the host script with srt's library, in the checkout,
/// with srt's environment — the commands' (the policy's, built from nothing), srt's scratch
/// space for its sockets (short paths), and the commands' TMPDIR, which srt takes from
/// CLAUDE_CODE_TMPDIR.
fn host_plan(inputs: &AgentInputs<'_>, tools: &Tools) -> HostPlan {
    let policy = inputs.policy;
    let runner_dir = &inputs.workspace.job_dir;
    let mut env: BTreeMap<String, String> = policy.environment(inputs.host_env.clone());
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
        program: tools.node.clone(),
        args: vec![
            s(&runner_dir.join(HOST_SCRIPT)),
            s(&tools.srt_package),
            s(&runner_dir.join("srt.json")),
            s(&runner_dir.join("executor.json")),
        ],
        env,
        cwd: policy.checkout.clone(),
        socket_dir: runner_dir.clone(),
        log: runner_dir.join("sandbox.log"),
        // srt's library, wherever it is installed (under a home the policy hides, say): the
        // host imports it, the sandbox runs its helpers.
        own: crate::sandbox::boundary::OwnFiles {
            read: vec![runner_dir.clone(), tools.srt_package.clone()],
            write: vec![inputs.workspace.helper_tmp.clone()],
            read_only: vec![],
        },
        socket_owner: None,
        confined: None,
        gvisor: policy.isolation == Isolation::Gvisor && tools.programs.runsc.is_some(),
    }
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}
