//! Where the programs a boundary starts are installed, so the boundary shows them: a binary
//! the operator configured outside the system's directories (`QUEST_RUNNER_NIX` pointing
//! into `/opt`, npm's agents in a checkout) is otherwise absent inside, and the job fails
//! with bwrap's bare "execvp ...: No such file or directory".

use std::path::{Path, PathBuf};

use super::SandboxPolicy;

/// What to bind read-only for `programs`: each one's install root, never one that holds what
/// `policy` hides (a binary dropped in `/root` does not bring `/root` with it).
pub fn roots<'a>(
    programs: impl IntoIterator<Item = &'a Path>,
    policy: &SandboxPolicy,
) -> Vec<PathBuf> {
    programs
        .into_iter()
        .filter_map(install_root)
        .filter(|r| !policy.deny_read.iter().any(|d| d.starts_with(r)))
        .collect()
}

/// Where `program` is installed: the `node_modules` it lives in (npm's agents, srt, and what
/// they load beside them), else the program file itself; `None` for a program not found.
/// Never a plain program's directory: one in a hidden tree (a launcher in the state dir, or
/// beside a key in a home) would bring its neighbours into the namespace, and one outside
/// every hidden tree is in the namespace already.
fn install_root(program: &Path) -> Option<PathBuf> {
    let real = std::fs::canonicalize(program).ok()?;
    let in_modules = real
        .ancestors()
        .find(|d| d.file_name().is_some_and(|n| n == "node_modules"))
        .map(Path::to_path_buf);
    Some(in_modules.unwrap_or(real))
}

#[cfg(test)]
#[path = "programs_tests.rs"]
mod tests;
