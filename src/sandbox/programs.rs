//! Where the programs a boundary starts are installed, so the boundary shows them: a binary
//! the operator configured outside the system's directories (`QUEST_RUNNER_NIX` pointing
//! into `/opt`, npm's agents in a checkout) is otherwise absent inside, and the job fails
//! with bwrap's bare "execvp ...: No such file or directory".

use std::path::{Path, PathBuf};

use super::SandboxPolicy;

/// The directories to bind read-only for `programs`: each one's install root, never one that
/// holds what `policy` hides (a binary dropped in `/root` does not bring `/root` with it).
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
/// they load beside them), else its own directory; `None` for a program not found.
fn install_root(program: &Path) -> Option<PathBuf> {
    let real = std::fs::canonicalize(program).ok()?;
    let in_modules = real
        .ancestors()
        .find(|d| d.file_name().is_some_and(|n| n == "node_modules"))
        .map(Path::to_path_buf);
    in_modules.or_else(|| real.parent().map(Path::to_path_buf))
}
