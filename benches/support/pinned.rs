//! The pinned programs the benches run: Claude Code, opencode and srt as `npm ci` in `npm/`
//! installs them (`scripts/setup`), found one way for every bench. Each bench used to look on
//! its own, and one (devshell) only through `QUEST_RUNNER_SRT`, so it panicked where the others
//! ran. Shared by `#[path]` too, for the benches that do not take the rest of `support`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use quest_runner::binaries::{self, Tool};

/// The programs a bench may need pinned: the agents and the sandbox they run in.
pub const ALL: [Tool; 3] = [Tool::Claude, Tool::Opencode, Tool::Srt];

/// The pinned `tool`: `QUEST_RUNNER_<NAME>` first, as the runner itself reads it (a bad value is
/// an error, never a silent fall back), then this checkout's `npm/node_modules/.bin/<name>`.
/// Panics naming both when neither is there: a bench has no use for another version.
pub fn path(tool: Tool) -> PathBuf {
    if std::env::var_os(tool.env_var()).is_some_and(|v| !v.is_empty()) {
        return binaries::find(tool).unwrap_or_else(|e| panic!("{e}"));
    }
    let installed = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("npm/node_modules/.bin")
        .join(tool.program());
    if is_executable(&installed) {
        return installed;
    }
    panic!(
        "the pinned {program}: {var} is not set and {installed} is not there; \
         run `npm ci --prefix npm` (scripts/setup) or set {var}",
        program = tool.program(),
        var = tool.env_var(),
        installed = installed.display(),
    )
}

/// Points this process's `QUEST_RUNNER_<NAME>` at the pinned `tools`, so the runner's code a
/// bench calls in the same process (the job's proxy finds srt through `binaries::find`) and
/// every runner it starts use the very programs [`path`] found. Call it first in `main`, before
/// any thread is started: the environment is the process's.
pub fn export(tools: &[Tool]) {
    for &tool in tools {
        let found = path(tool);
        std::env::set_var(tool.env_var(), found);
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
