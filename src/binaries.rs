//! Finding the external programs the runner drives.
//!
//! Every program is looked up through `QUEST_RUNNER_<NAME>` first and `PATH` second. The
//! variable exists so packagers (the flake wraps the binary with pinned store paths) and tests
//! (a counting wrapper around `nix`) can choose the exact binary without shadowing the
//! operator's own `PATH`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The programs the runner may run. Each maps to one `QUEST_RUNNER_<NAME>` variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tool {
    Nix,
    /// The daemon a root runner serves its store to a job's nix with (`devshell::daemon`).
    NixDaemon,
    Git,
    Bwrap,
    /// Switches a root runner to the agent's identity before the job's namespace is made
    /// (util-linux).
    Setpriv,
    /// Gives a root runner's Nix a PID namespace whose `/proc` bubblewrap has not covered
    /// (util-linux; see `sandbox::boundary::nix_plan`).
    Unshare,
    Socat,
    Srt,
    /// Runs the commands' sandbox host with srt's library.
    Node,
    Claude,
    Opencode,
    /// A statically linked bash: the builder of the devShells the runner makes itself (the
    /// selftest's sample and hostile repositories), which Nix's build sandbox runs with
    /// nothing of the host. Debian's `bash-static` is on `PATH` under this name.
    BashStatic,
    /// Asked for the users and groups that `/etc/passwd` and `/etc/group` do not hold: it
    /// loads the host's NSS modules, which the static runner must not (src/users.rs).
    Getent,
    /// gVisor's runtime: the kernel the job's commands run on in `gvisor` isolation
    /// (`sandbox::gvisor`).
    Runsc,
}

impl Tool {
    /// The program's name on `PATH`.
    pub fn program(self) -> &'static str {
        match self {
            Tool::Nix => "nix",
            Tool::NixDaemon => "nix-daemon",
            Tool::Git => "git",
            Tool::Bwrap => "bwrap",
            Tool::Setpriv => "setpriv",
            Tool::Unshare => "unshare",
            Tool::Socat => "socat",
            Tool::Srt => "srt",
            Tool::Node => "node",
            Tool::Claude => "claude",
            Tool::Opencode => "opencode",
            Tool::BashStatic => "bash-static",
            Tool::Getent => "getent",
            Tool::Runsc => "runsc",
        }
    }

    /// The variable that overrides the `PATH` lookup.
    pub fn env_var(self) -> &'static str {
        match self {
            Tool::Nix => "QUEST_RUNNER_NIX",
            Tool::NixDaemon => "QUEST_RUNNER_NIX_DAEMON",
            Tool::Git => "QUEST_RUNNER_GIT",
            Tool::Bwrap => "QUEST_RUNNER_BWRAP",
            Tool::Setpriv => "QUEST_RUNNER_SETPRIV",
            Tool::Unshare => "QUEST_RUNNER_UNSHARE",
            Tool::Socat => "QUEST_RUNNER_SOCAT",
            Tool::Srt => "QUEST_RUNNER_SRT",
            Tool::Node => "QUEST_RUNNER_NODE",
            Tool::Claude => "QUEST_RUNNER_CLAUDE",
            Tool::Opencode => "QUEST_RUNNER_OPENCODE",
            Tool::BashStatic => "QUEST_RUNNER_BASH_STATIC",
            Tool::Getent => "QUEST_RUNNER_GETENT",
            Tool::Runsc => "QUEST_RUNNER_RUNSC",
        }
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum BinaryError {
    #[error("{program} not found: {var} is set to {path}, which is not an executable file")]
    BadOverride {
        program: &'static str,
        var: &'static str,
        path: PathBuf,
    },
    #[error("{program} not found: set {var} to its path or put it on PATH")]
    NotFound {
        program: &'static str,
        var: &'static str,
    },
    #[error(
        "srt's seccomp helper (vendor/seccomp/<arch>/apply-seccomp) is not in the package of \
         srt at {srt}: point QUEST_RUNNER_SRT at srt as npm installs it \
         (@anthropic-ai/sandbox-runtime), or {var} at the helper"
    )]
    NoSeccompHelper { srt: PathBuf, var: &'static str },
}

/// Resolves `tool` from the process environment.
pub fn find(tool: Tool) -> Result<PathBuf, BinaryError> {
    find_with(
        tool,
        std::env::var_os(tool.env_var()),
        std::env::var_os("PATH"),
    )
}

/// Resolves `tool` from an explicit override and `PATH`, so the rule can be tested without
/// touching the process environment.
pub fn find_with(
    tool: Tool,
    override_value: Option<OsString>,
    path: Option<OsString>,
) -> Result<PathBuf, BinaryError> {
    if let Some(value) = override_value.filter(|v| !v.is_empty()) {
        let candidate = PathBuf::from(&value);
        // A bare name in the variable is looked up on PATH like the default would be; a path
        // must point at an executable file. Either way a bad value is an error, never a
        // silent fall back to PATH: the operator asked for a specific binary.
        let resolved = if candidate.components().count() == 1 {
            which::which_in(&candidate, path.as_ref(), cwd()).ok()
        } else if is_executable(&candidate) {
            Some(candidate.clone())
        } else {
            None
        };
        return resolved.ok_or(BinaryError::BadOverride {
            program: tool.program(),
            var: tool.env_var(),
            path: candidate,
        });
    }
    which::which_in(tool.program(), path.as_ref(), cwd()).map_err(|_| BinaryError::NotFound {
        program: tool.program(),
        var: tool.env_var(),
    })
}

fn cwd() -> PathBuf {
    std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The variable naming srt's seccomp helper where it is not in srt's package.
pub const APPLY_SECCOMP_VAR: &str = "QUEST_RUNNER_APPLY_SECCOMP";

/// srt's seccomp helper, canonical: `QUEST_RUNNER_APPLY_SECCOMP`, else the one in the package
/// of the srt the runner runs ([`srt_seccomp_helper`]). It starts every command of a job, for
/// both agents (src/jobshell), and the AppArmor profile names it.
pub fn apply_seccomp() -> Result<PathBuf, BinaryError> {
    if let Some(value) = std::env::var_os(APPLY_SECCOMP_VAR).filter(|v| !v.is_empty()) {
        let path = PathBuf::from(value);
        return std::fs::canonicalize(&path)
            .ok()
            .filter(|p| is_executable(p))
            .ok_or(BinaryError::BadOverride {
                program: "apply-seccomp",
                var: APPLY_SECCOMP_VAR,
                path,
            });
    }
    let srt = find(Tool::Srt)?;
    srt_seccomp_helper(&srt).ok_or(BinaryError::NoSeccompHelper {
        srt,
        var: APPLY_SECCOMP_VAR,
    })
}

/// The directory of srt's package (`package.json`, `vendor/`), found from `srt` as npm
/// installs it (`<package>/dist/cli.js`) or as the Nix package wraps it (`<out>/bin/srt`
/// beside `<out>/lib/node_modules/@anthropic-ai/sandbox-runtime`).
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
            let prefix = real.parent()?.parent()?;
            let dir = prefix.join("lib/node_modules/@anthropic-ai/sandbox-runtime");
            dir.join("package.json").is_file().then_some(dir)
        })
}

/// srt's seccomp helper (`vendor/seccomp/<arch>/apply-seccomp` in [`srt_package_dir`]),
/// canonical. It starts every command of a job, for both agents (src/jobshell), and the
/// AppArmor profile names it.
pub fn srt_seccomp_helper(srt: &Path) -> Option<PathBuf> {
    let arch = match std::env::consts::ARCH {
        "aarch64" => "arm64",
        _ => "x64",
    };
    let helper = srt_package_dir(srt)?
        .join("vendor/seccomp")
        .join(arch)
        .join("apply-seccomp");
    std::fs::canonicalize(helper).ok().filter(|p| p.is_file())
}

#[cfg(test)]
#[path = "binaries_tests.rs"]
mod tests;
