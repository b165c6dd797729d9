//! The AppArmor profile that lets quest-runner's bwrap create user namespaces on hosts that
//! restrict them (Ubuntu 24.04+), rendered from `nix/apparmor/quest-runner-bwrap.in` — the
//! template the NixOS module renders for the package's bwrap. It allows the one nesting a job
//! needs (the same bwrap, run inside the job's namespace, makes the commands' sandbox) and
//! refuses the commands a user namespace; the template's header explains the labels.

use std::path::{Path, PathBuf};

use super::DeployError;
use crate::binaries::{self, Tool};

/// The template, as shipped.
pub const TEMPLATE: &str = include_str!("../../nix/apparmor/quest-runner-bwrap.in");

/// Where the template takes bwrap's path.
pub const PLACEHOLDER: &str = "@bwrap@";

/// Where the template takes the path of srt's seccomp helper.
pub const SECCOMP_PLACEHOLDER: &str = "@apply_seccomp@";

/// Where the template takes the path of the nix-daemon a job's devShell is built by.
pub const NIX_DAEMON_PLACEHOLDER: &str = "@nix_daemon@";

/// The programs a profile names by their exact, canonical paths.
#[derive(Debug, Clone)]
pub struct Programs {
    pub bwrap: PathBuf,
    /// srt's seccomp helper, which starts every command of a job.
    pub apply_seccomp: PathBuf,
    /// The nix-daemon the runner starts for a job's devShell.
    pub nix_daemon: PathBuf,
}

impl Programs {
    /// The programs this installation would run, canonicalized.
    pub fn resolved() -> Result<Programs, DeployError> {
        Ok(Programs {
            bwrap: resolved_bwrap()?,
            apply_seccomp: resolved_apply_seccomp()?,
            nix_daemon: resolved_nix_daemon()?,
        })
    }
}

/// The nix-daemon the runner starts for a job (`QUEST_RUNNER_NIX_DAEMON`, else the one beside
/// `nix`, as `devshell::daemon` finds it), canonicalized.
pub fn resolved_nix_daemon() -> Result<PathBuf, DeployError> {
    let nix = binaries::find(Tool::Nix)?;
    let found = crate::devshell::daemon::nix_daemon(&nix)?;
    std::fs::canonicalize(&found).map_err(|source| DeployError::Canonicalize {
        path: found,
        source,
    })
}

/// The name of the profile that attaches to bwrap (and of its file under /etc/apparmor.d).
pub const PROFILE_NAME: &str = "quest_runner_bwrap";

/// The bwrap the runner would run (`QUEST_RUNNER_BWRAP`, else `PATH`), canonicalized: the
/// kernel attaches a profile to the path of the file it executes, after every symlink.
pub fn resolved_bwrap() -> Result<PathBuf, DeployError> {
    let found = binaries::find(Tool::Bwrap)?;
    std::fs::canonicalize(&found).map_err(|source| DeployError::Canonicalize {
        path: found,
        source,
    })
}

/// srt's seccomp helper, which starts every command of a job ([`binaries::apply_seccomp`]).
pub fn resolved_apply_seccomp() -> Result<PathBuf, DeployError> {
    Ok(binaries::apply_seccomp()?)
}

/// The profile for `programs`, each an absolute, canonical path.
pub fn render(programs: &Programs) -> Result<String, DeployError> {
    Ok(TEMPLATE
        .replace(PLACEHOLDER, checked(&programs.bwrap)?)
        .replace(SECCOMP_PLACEHOLDER, checked(&programs.apply_seccomp)?)
        .replace(NIX_DAEMON_PLACEHOLDER, checked(&programs.nix_daemon)?))
}

/// `path` as the profile may name it: absolute, and nothing AppArmor reads as a pattern.
fn checked(path: &Path) -> Result<&str, DeployError> {
    let bad = |reason| DeployError::ProfilePath {
        path: path.to_path_buf(),
        reason,
    };
    let text = path.to_str().ok_or_else(|| bad("it is not UTF-8"))?;
    if !path.is_absolute() {
        return Err(bad("it must be absolute"));
    }
    // AppArmor reads these as globs, variables, alternations or separators: an attachment
    // holding one would match more than this one binary (or not parse), so it is refused
    // rather than escaped.
    let special = |c: char| {
        c.is_whitespace()
            || c.is_control()
            || matches!(
                c,
                '*' | '?' | '[' | ']' | '{' | '}' | '^' | ',' | '#' | '"' | '\\' | '='
            )
    };
    // `@` alone is a name's character (npm's scoped packages: `@anthropic-ai`); `@{` would
    // start a variable, and `{` is refused.
    if text.chars().any(special) {
        return Err(bad(
            "it holds a space or one of * ? [ ] { } ^ , # \" \\ =, which AppArmor would interpret",
        ));
    }
    Ok(text)
}

#[cfg(test)]
#[path = "apparmor_tests.rs"]
mod tests;
