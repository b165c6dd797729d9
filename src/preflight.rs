//! What a job needs from the host, checked before anything runs, and `quest-runner doctor`.
//!
//! A job whose agent cannot be sandboxed must not start at all: Claude Code would otherwise
//! fall back to running commands unconfined (unless told to fail), and opencode has no
//! sandbox of its own. So the runner refuses with one line naming what is missing.

use std::process::{Command, Stdio};

use serde::Serialize;

use crate::binaries::{self, Tool};
use crate::job::AgentKind;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    /// Works, but weaker than it should be: `doctor` shows the fix without failing.
    Warn,
    Fail,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: String,
    pub status: Status,
    pub detail: String,
    /// How to fix a failure (or, for a warning, how to make it whole).
    pub fix: Option<String>,
}

impl Check {
    /// `ok` passed, else failed.
    pub fn new(name: impl Into<String>, ok: bool, detail: String, fix: Option<String>) -> Check {
        let status = if ok { Status::Ok } else { Status::Fail };
        Check {
            name: name.into(),
            status,
            detail,
            fix,
        }
    }

    pub fn ok(name: impl Into<String>, detail: String) -> Check {
        Check::new(name, true, detail, None)
    }

    pub fn fail(name: impl Into<String>, detail: String, fix: Option<String>) -> Check {
        Check::new(name, false, detail, fix)
    }

    pub fn warn(name: impl Into<String>, detail: String, fix: Option<String>) -> Check {
        Check {
            status: Status::Warn,
            ..Check::new(name, true, detail, fix)
        }
    }

    /// Passed, if perhaps with a warning: a job may run.
    pub fn passed(&self) -> bool {
        self.status != Status::Fail
    }

    /// A passed check downgraded to a warning when `weak`.
    pub fn warn_if(mut self, weak: bool) -> Check {
        if weak && self.status == Status::Ok {
            self.status = Status::Warn;
        }
        self
    }
}

fn binary_check(tool: Tool, why: &str, fix: &str) -> Check {
    found_check(tool.program(), binaries::find(tool), why, fix)
}

/// The check named `name` for a program found (its path, and `why` the job needs it) or not
/// (the error, and `fix`).
fn found_check(
    name: &str,
    found: Result<std::path::PathBuf, binaries::BinaryError>,
    why: &str,
    fix: &str,
) -> Check {
    match found {
        Ok(path) => Check::ok(name, format!("{} ({why})", path.display())),
        Err(e) => Check::fail(name, e.to_string(), Some(fix.to_string())),
    }
}

fn ripgrep_check() -> Check {
    match which::which("rg") {
        Ok(path) => Check::ok(
            "rg",
            format!("{} (srt scans deny paths with it)", path.display()),
        ),
        Err(_) => Check::fail(
            "rg",
            "ripgrep not found on PATH; srt refuses to start without it".into(),
            Some("apt-get install ripgrep".into()),
        ),
    }
}

/// bubblewrap, started as the job's namespace is: as the agent's identity when the runner is
/// root (through setpriv), else as the runner.
fn as_the_agent(bwrap: &std::path::Path) -> Result<Command, Check> {
    use crate::sandbox::boundary::{Identity, AGENT_ID};
    if Identity::current() == Identity::Runner {
        return Ok(Command::new(bwrap));
    }
    let Ok(setpriv) = binaries::find(Tool::Setpriv) else {
        return Err(Check::fail(
            "user namespaces",
            "not checked: setpriv not found (a root runner starts the agent's \
                     namespace as an unprivileged identity with it)"
                .into(),
            Some("apt-get install util-linux, or set QUEST_RUNNER_SETPRIV".into()),
        ));
    };
    let id = AGENT_ID.to_string();
    let mut cmd = Command::new(setpriv);
    cmd.args(["--reuid", &id, "--regid", &id, "--clear-groups", "--"])
        .arg(bwrap);
    // Where a root runner's jobs start: no job's checkout mounted, so none that ends meanwhile
    // can fail the probe (`workspace::namespace`).
    match crate::workspace::namespace::JobNamespace::new(None, None) {
        Ok(ns) => ns.enter(&mut cmd),
        Err(e) => {
            let detail = format!("not checked: no mount namespace of its own: {e}");
            return Err(Check::fail("user namespaces", detail, None));
        }
    }
    Ok(cmd)
}

/// Whether bubblewrap can create the namespaces a job needs, nested as a job nests them (the
/// commands' sandbox inside the agent's namespace), by asking it to.
fn userns_check() -> Check {
    let name = "user namespaces".to_string();
    let Ok(bwrap) = binaries::find(Tool::Bwrap) else {
        return Check::fail(
            name,
            "not checked: bwrap not found".into(),
            Some("apt-get install bubblewrap".into()),
        );
    };
    let mut cmd = match as_the_agent(&bwrap) {
        Ok(cmd) => cmd,
        Err(check) => return check,
    };
    let namespace = [
        "--unshare-user",
        "--unshare-net",
        "--unshare-pid",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--",
    ];
    cmd.args(namespace)
        .arg(&bwrap)
        .args(namespace)
        .arg("/bin/true")
        .current_dir("/");
    let out = cmd.stdin(Stdio::null()).output();
    match out {
        Ok(o) if o.status.success() => Check::ok(
            name,
            "bwrap can create user, network and pid namespaces, and nest them: the \
                     commands' sandbox inside the agent's"
                .into(),
        ),
        Ok(o) => Check::fail(
            name,
            format!(
                "bwrap cannot create namespaces: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Some(userns_fix()),
        ),
        Err(e) => Check::fail(name, format!("running {}: {e}", bwrap.display()), None),
    }
}

pub(crate) fn read_sysctl(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn userns_fix() -> String {
    if read_sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1")
    {
        "AppArmor restricts unprivileged user namespaces: install and load the profile from \
         `quest-runner apparmor-profile` (apparmor_parser -r; again after a bwrap update, it \
         names bwrap's exact path). It lets this bwrap make the job's namespace and, inside \
         it, the commands' sandbox, and refuses the commands a user namespace of their own"
            .into()
    } else {
        "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, \
         user.max_user_namespaces > 0)"
            .into()
    }
}

/// srt's seccomp helper, which the runner's executor starts every command of either agent
/// with (`crate::jobshell`). The AppArmor profile names it.
fn seccomp_helper_check() -> Check {
    found_check(
        "apply-seccomp",
        binaries::apply_seccomp(),
        "srt's seccomp helper: starts each command of both agents",
        "install @anthropic-ai/sandbox-runtime (scripts/setup does) and point QUEST_RUNNER_SRT \
         at its srt",
    )
}

/// The checks a job of `agent` needs. `nix` is checked when a devShell will be built.
pub fn checks_for(agent: AgentKind, needs_nix: bool) -> Vec<Check> {
    let mut checks = Vec::new();
    let (tool, install) = match agent {
        AgentKind::Claude => (
            Tool::Claude,
            "install @anthropic-ai/claude-code (scripts/setup does) or set QUEST_RUNNER_CLAUDE",
        ),
        AgentKind::Opencode => (
            Tool::Opencode,
            "install opencode-ai (scripts/setup does) or set QUEST_RUNNER_OPENCODE",
        ),
    };
    checks.push(binary_check(tool, "the agent", install));
    // Both agents' commands run in the job's srt sandbox (`crate::jobshell`).
    checks.push(binary_check(
        Tool::Srt,
        "sandboxes the agent's commands",
        "install @anthropic-ai/sandbox-runtime (scripts/setup does) or set QUEST_RUNNER_SRT",
    ));
    checks.push(binary_check(
        Tool::Node,
        "runs srt's library for the agent's commands",
        "install Node.js (what srt runs on), or set QUEST_RUNNER_NODE",
    ));
    if cfg!(target_os = "linux") {
        checks.push(ripgrep_check());
        checks.push(binary_check(
            Tool::Bwrap,
            "the sandbox on Linux",
            "apt-get install bubblewrap, or set QUEST_RUNNER_BWRAP",
        ));
        checks.push(binary_check(
            Tool::Socat,
            "the sandbox's network proxy on Linux",
            "apt-get install socat, or set QUEST_RUNNER_SOCAT",
        ));
        checks.push(userns_check());
        checks.push(seccomp_helper_check());
    }
    if needs_nix {
        checks.push(binary_check(
            Tool::Nix,
            "builds the revision's devShell",
            "apt-get install nix-bin, or set QUEST_RUNNER_NIX",
        ));
    }
    checks.push(binary_check(
        Tool::Git,
        "clones and worktrees",
        "apt-get install git",
    ));
    checks
}

/// The first failing check as one line, or `None` when the host is ready.
pub fn refusal(checks: &[Check]) -> Option<String> {
    checks.iter().find(|c| !c.passed()).map(|c| match &c.fix {
        Some(fix) => format!("{}: {} (fix: {fix})", c.name, c.detail),
        None => format!("{}: {}", c.name, c.detail),
    })
}
