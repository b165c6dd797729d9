//! gVisor as the kernel of a job's commands: the third rendering of the policy, beside the
//! namespace one (srt's sandbox, [`super::boundary`]) and Nix-as-the-job.
//!
//! In the namespace rendering a command's system calls are answered by the host's kernel,
//! behind namespaces and a seccomp filter; a kernel bug reachable from there (io_uring, bpf,
//! a nested user namespace's mounts, ...) is the host's. In `gvisor` isolation each command
//! runs as an OCI container of `runsc` (systrap: no KVM needed), started by the executor
//! inside the very sandbox srt made: gVisor's Sentry, a kernel in Go, answers the command,
//! and itself may make only a short list of host calls, in srt's namespaces, under srt's
//! mounts. So the policy holds twice: the files the command sees are the sandbox's view (the
//! Sentry opens them through it: denied trees stay hidden, read-only binds stay read-only)
//! and gVisor's own mounts (the root read-only, the policy's writable trees bound writable);
//! its network is the sandbox's (`--network=host` there means srt's network namespace, whose
//! only way out is the runner's proxy); its limits are the job's (its cgroup holds runsc's
//! processes; `RLIMIT_FSIZE` and `RLIMIT_NOFILE` pass into the container).
//!
//! A command runs as gVisor's root (uid 0 of gVisor's kernel, which is the job's unprivileged
//! user on the host): rootless runsc maps no other user, and a command's files must be the
//! job's. The agent's own process stays in the namespace: it runs no revision code, and its
//! Node would pay gVisor's system-call cost on every model byte (docs/security.md).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// Where a trust level's commands run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// The host's kernel, behind srt's namespaces and seccomp filter.
    #[default]
    Namespace,
    /// gVisor's kernel, inside that same sandbox.
    Gvisor,
}

impl Isolation {
    pub fn name(self) -> &'static str {
        match self {
            Isolation::Namespace => "namespace",
            Isolation::Gvisor => "gvisor",
        }
    }

    /// A flag's value (`selftest --isolation`).
    pub fn parse(text: &str) -> Result<Isolation, String> {
        match text {
            "namespace" => Ok(Isolation::Namespace),
            "gvisor" => Ok(Isolation::Gvisor),
            other => Err(format!("{other:?}: expected namespace or gvisor")),
        }
    }
}

/// runsc's flags for every command, fixed: rootless (the executor is an unprivileged user of
/// srt's user namespace), the sandbox's network namespace as the container's, the job's
/// cgroup as the sandbox's, systrap (KVM is not needed and PVM's hangs), and no overlay on the
/// root (a write outside the writable trees is refused, not kept in memory).
pub const RUNSC_FLAGS: [&str; 5] = [
    "--rootless",
    "--network=host",
    "--ignore-cgroups",
    "--platform=systrap",
    "--overlay2=none",
];

/// What the executor needs to run commands on gVisor (in its settings, `executor.json`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GvisorExec {
    pub runsc: PathBuf,
    /// runsc's state and each command's bundle, one directory per command, removed when it
    /// ends: in the job's temp dir (writable in the sandbox), hidden from the commands.
    pub state: PathBuf,
    /// The trees the commands may write (the policy's `allow_write`), bound writable.
    pub writable: Vec<PathBuf>,
}

impl GvisorExec {
    pub fn new(runsc: &Path, policy: &super::SandboxPolicy) -> GvisorExec {
        GvisorExec {
            runsc: runsc.to_path_buf(),
            state: policy.tmpdir.join(".quest-gvisor"),
            writable: policy.allow_write.clone(),
        }
    }

    /// runsc's command line for the container `id` of the bundle at `bundle`.
    pub fn run_args(&self, root: &Path, bundle: &Path, id: &str) -> Vec<OsString> {
        let mut args: Vec<OsString> = RUNSC_FLAGS.iter().map(OsString::from).collect();
        args.push("--root".into());
        args.push(root.into());
        args.extend(["run".into(), "--bundle".into(), bundle.into(), id.into()]);
        args
    }
}

/// One command as a container.
pub struct CommandSpec<'a> {
    pub args: &'a [OsString],
    pub env: &'a [(OsString, OsString)],
    pub cwd: &'a Path,
    pub exec: &'a GvisorExec,
    /// (`RLIMIT_*` name, soft, hard) passed into the container.
    pub rlimits: &'a [(&'static str, u64, u64)],
}

/// The container's OCI runtime spec (`config.json`). Pure.
pub fn spec(c: &CommandSpec<'_>) -> Value {
    let text = |s: &std::ffi::OsStr| s.to_string_lossy().into_owned();
    let mut mounts = vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc"}),
        json!({"destination": "/dev", "type": "devtmpfs", "source": "dev"}),
        json!({"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["ro", "nosuid", "nodev", "noexec"]}),
    ];
    for dir in c.exec.writable.iter().filter(|d| d.is_dir()) {
        mounts.push(json!({
            "destination": dir, "type": "bind", "source": dir, "options": ["rbind", "rw"],
        }));
    }
    // runsc's own state, inside a writable tree: never the commands'.
    mounts.push(json!({
        "destination": c.exec.state, "type": "tmpfs", "source": "tmpfs", "options": ["ro", "size=4k"],
    }));
    let rlimits: Vec<Value> = c
        .rlimits
        .iter()
        .map(|(kind, soft, hard)| json!({"type": kind, "soft": soft, "hard": hard}))
        .collect();
    json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {"uid": 0, "gid": 0},
            "args": c.args.iter().map(|a| text(a)).collect::<Vec<_>>(),
            "env": c.env.iter().map(|(k, v)| format!("{}={}", text(k), text(v))).collect::<Vec<_>>(),
            "cwd": c.cwd,
            "noNewPrivileges": true,
            "rlimits": rlimits,
        },
        "root": {"path": "/", "readonly": true},
        "hostname": "quest-job",
        "mounts": mounts,
        "linux": {
            "namespaces": [{"type": "pid"}, {"type": "mount"}, {"type": "ipc"}, {"type": "uts"}],
        },
    })
}

/// Whether runsc runs here, as the executor will run it: nested in a user namespace of
/// bubblewrap's, with the same flags, on a container of `/bin/true`.
#[derive(Debug, Clone, Serialize)]
pub struct Probe {
    pub runsc: Option<PathBuf>,
    /// `runsc --version`'s first line.
    pub version: Option<String>,
    pub platform: &'static str,
    pub rootless: bool,
    /// Why it cannot run here; `None`: it ran.
    pub fails: Option<String>,
}

impl Probe {
    pub fn works(&self) -> bool {
        self.fails.is_none()
    }

    /// One line for `doctor` and `policy`.
    pub fn describe(&self) -> String {
        match (&self.fails, &self.version) {
            (None, version) => format!(
                "{} ({}, systrap, rootless) runs a container here",
                version.as_deref().unwrap_or("runsc"),
                self.runsc
                    .as_deref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
            ),
            (Some(why), _) => why.clone(),
        }
    }
}

/// The oldest runsc whose default platform is systrap, as Debian numbers it (`0.0~<date>`).
const OLDEST: u32 = 20240729;

/// The date in a version line such as `runsc version 0.0~20240729.0`.
fn release_date(version: &str) -> Option<u32> {
    let rest = &version[version.find("0.0~")? + 4..];
    rest.get(..8)?.parse().ok()
}

/// How long the probe's container may take (its first start reads runsc from disk).
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs the probe: a few hundred milliseconds, so callers keep its answer.
pub async fn probe() -> Probe {
    let mut probe = Probe {
        runsc: None,
        version: None,
        platform: "systrap",
        rootless: true,
        fails: None,
    };
    let runsc = match crate::binaries::find(crate::binaries::Tool::Runsc) {
        Ok(p) => p,
        Err(e) => {
            probe.fails = Some(format!(
                "{e} (Debian: `apt-get install -t bookworm-backports runsc`, or trixie's)"
            ));
            return probe;
        }
    };
    probe.runsc = Some(runsc.clone());
    match trial(&runsc).await {
        Ok(version) => probe.version = Some(version),
        Err(why) => probe.fails = Some(format!("{} does not run here: {why}", runsc.display())),
    }
    probe
}

/// `runsc --version`, then a container of `/bin/true` in a user namespace of bubblewrap's.
async fn trial(runsc: &Path) -> Result<String, String> {
    use crate::process::run_captured;
    let mut cmd = tokio::process::Command::new(runsc);
    cmd.arg("--version");
    let out = run_captured(cmd, "runsc")
        .await
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(out.error_message());
    }
    let version = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or("runsc")
        .trim()
        .to_string();
    // 2022's Debian build (bookworm's own) has no systrap; refused by name rather than by
    // its platform's error.
    if let Some(date) = release_date(&version) {
        if date < OLDEST {
            return Err(format!(
                "{version} is older than 0.0~{OLDEST}, the first with the systrap platform \
                 (Debian 12: bookworm-backports' runsc)"
            ));
        }
    }
    container_runs(runsc).await?;
    Ok(version)
}

/// A container of `/bin/true`, as the executor would start it: nested in a user namespace of
/// bubblewrap's, with the same flags.
async fn container_runs(runsc: &Path) -> Result<(), String> {
    use crate::process::run_captured;
    let bwrap = crate::binaries::find(crate::binaries::Tool::Bwrap).map_err(|e| e.to_string())?;
    let dir = tempfile::Builder::new()
        .prefix("quest-runsc-probe-")
        .tempdir()
        .map_err(|e| format!("a temp dir for the probe: {e}"))?;
    let exec = GvisorExec {
        runsc: runsc.to_path_buf(),
        state: dir.path().join("state"),
        writable: vec![],
    };
    let args = [OsString::from("/bin/true")];
    let spec = spec(&CommandSpec {
        args: &args,
        env: &[],
        cwd: Path::new("/"),
        exec: &exec,
        rlimits: &[],
    });
    let bundle = dir.path().join("bundle");
    std::fs::create_dir_all(&bundle).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(&exec.state).map_err(|e| e.to_string())?;
    std::fs::write(bundle.join("config.json"), spec.to_string()).map_err(|e| e.to_string())?;
    let mut cmd = tokio::process::Command::new(bwrap);
    cmd.args([
        "--unshare-user",
        "--unshare-pid",
        "--unshare-net",
        "--die-with-parent",
    ])
    .args([
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--bind",
    ])
    .arg(dir.path())
    .arg(dir.path())
    .arg(runsc)
    .args(exec.run_args(&exec.state, &bundle, "probe"))
    .kill_on_drop(true);
    let out = tokio::time::timeout(PROBE_TIMEOUT, run_captured(cmd, "runsc"))
        .await
        .map_err(|_| {
            format!(
                "a container of /bin/true did not end within {}s",
                PROBE_TIMEOUT.as_secs()
            )
        })?
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "a container of /bin/true failed: {}",
            out.error_message()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runsc_before_systrap_is_known_by_its_date() {
        assert_eq!(release_date("runsc version 0.0~20240729.0"), Some(20240729));
        assert_eq!(release_date("runsc version 0.0~20221219.0"), Some(20221219));
        assert_eq!(release_date("runsc version release-20250101.0"), None);
    }

    #[test]
    fn the_spec_binds_only_the_writable_trees_and_hides_runscs_state() {
        let dir = tempfile::tempdir().unwrap();
        let checkout = dir.path().join("checkout");
        std::fs::create_dir(&checkout).unwrap();
        let exec = GvisorExec {
            runsc: "/usr/bin/runsc".into(),
            state: dir.path().join("tmp/.quest-gvisor"),
            writable: vec![checkout.clone(), dir.path().join("absent")],
        };
        let args = [OsString::from("bash"), "-c".into(), "true".into()];
        let env = [(OsString::from("HOME"), OsString::from("/h"))];
        let spec = spec(&CommandSpec {
            args: &args,
            env: &env,
            cwd: &checkout,
            exec: &exec,
            rlimits: &[("RLIMIT_FSIZE", 10, 10)],
        });
        assert_eq!(spec["root"], json!({"path": "/", "readonly": true}));
        let binds: Vec<&Value> = spec["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["type"] == "bind")
            .collect();
        assert_eq!(binds.len(), 1, "an absent tree is not bound: {binds:?}");
        assert_eq!(binds[0]["source"], json!(checkout));
        let last = spec["mounts"].as_array().unwrap().last().unwrap();
        assert_eq!(last["destination"], json!(exec.state));
        assert_eq!(spec["process"]["env"], json!(["HOME=/h"]));
        assert_eq!(spec["process"]["rlimits"][0]["type"], "RLIMIT_FSIZE");
        assert_eq!(spec["process"]["noNewPrivileges"], true);
    }
}
