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

/// The profile for the bwrap at `bwrap`, which must be an absolute, canonical path.
pub fn render(bwrap: &Path) -> Result<String, DeployError> {
    let bad = |reason| DeployError::ProfilePath {
        path: bwrap.to_path_buf(),
        reason,
    };
    let text = bwrap.to_str().ok_or_else(|| bad("it is not UTF-8"))?;
    if !bwrap.is_absolute() {
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
                '*' | '?' | '[' | ']' | '{' | '}' | '^' | '@' | ',' | '#' | '"' | '\\' | '='
            )
    };
    if text.chars().any(special) {
        return Err(bad(
            "it holds a space or one of * ? [ ] { } ^ @ , # \" \\ =, which AppArmor would interpret",
        ));
    }
    Ok(TEMPLATE.replace(PLACEHOLDER, text))
}

#[cfg(test)]
#[path = "apparmor_tests.rs"]
mod tests;
