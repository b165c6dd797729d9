//! quest-runner-selftest: what `quest-runner selftest` proves on this host, that the runner
//! works and that its boundary holds, with nothing but what the binary carries: a sample
//! repository for the devShell cache, and the boundary suite's hostile repository and scripted
//! model. Its own crate, apart from the runner's core (`quest_runner`, src/): the core never
//! names it, and the binary (src/main.rs) hands [`command::run`] to the CLI.
//!
//! The sample is committed with fixed author, committer and dates, and its static bash (see
//! [`static_bash`]) is kept in the state directory, so its revision is the same on every run
//! with the same state directory and bash: a second run is a cache hit.

pub mod boundary;
pub mod command;
pub mod model_server;
pub mod npm_registry;
pub mod registries;
pub mod scripts;
pub mod static_bash;
pub mod stub_http;
pub mod tls_front;
pub mod wheel;

use std::path::Path;

/// Git for the repositories the selftest makes (the sample, the hostile repository): no
/// system or global config, no hooks, and a fixed identity and clock, so the sample's commit id
/// never changes.
pub(crate) fn fixture_git(dir: &Path, args: &[&str]) -> Result<String, String> {
    let git = quest_runner::binaries::find(quest_runner::binaries::Tool::Git)
        .map_err(|e| e.to_string())?;
    let out = std::process::Command::new(git)
        .current_dir(dir)
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "commit.gpgSign=false",
        ])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "quest-runner")
        .env("GIT_AUTHOR_EMAIL", "selftest@quest-runner.invalid")
        .env("GIT_COMMITTER_NAME", "quest-runner")
        .env("GIT_COMMITTER_EMAIL", "selftest@quest-runner.invalid")
        .env("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z")
        .env("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z")
        .output()
        .map_err(|e| format!("running git: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}
