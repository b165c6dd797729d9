//! What of the runner's own environment reaches the Nix that acts for a job: nothing but an
//! allowlist.
//!
//! A process's environment is readable by what it runs: the client's by the revision's
//! evaluation (`fetchurl file:///proc/self/environ` copies it into the world-readable store),
//! a daemon's by every fixed-output build (its `impureEnvVars` are read from the daemon's own
//! environment). An operator's `EnvironmentFile` — a proxy password, a cloud key — lives in
//! the runner's. So both start from an empty environment and get only what is built here:
//! a `PATH` of the programs Nix runs, the store's locations, and what the caller adds (the
//! job's proxy, a scratch `HOME`). The operator's `NIX_CONFIG` is passed as `--option`s, and
//! only its settings that carry no secret and run no program of the operator's.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Where the host's Nix keeps its store and configuration: locations, never secrets.
const LOCATIONS: [&str; 4] = [
    "NIX_CONF_DIR",
    "NIX_STORE_DIR",
    "NIX_STATE_DIR",
    "NIX_LOG_DIR",
];

/// The settings of the runner's `NIX_CONFIG` that Nix acting for a job gets. Left out, for
/// example: `access-tokens` and `netrc-file` (credentials), `secret-key-files` (a signing key),
/// `post-build-hook`, `pre-build-hook` and `builders` (programs and hosts of the operator's).
const PASSED_SETTINGS: &[&str] = &[
    "substituters",
    "extra-substituters",
    "trusted-substituters",
    "trusted-public-keys",
    "extra-trusted-public-keys",
    "require-sigs",
    "experimental-features",
    "extra-experimental-features",
    "system",
    "extra-platforms",
    "system-features",
    "extra-system-features",
    "sandbox",
    "sandbox-fallback",
    "build-users-group",
    "max-jobs",
    "cores",
    "connect-timeout",
    "stalled-download-timeout",
    "download-attempts",
    "fallback",
    "narinfo-cache-negative-ttl",
    "narinfo-cache-positive-ttl",
    "http-connections",
    "max-silent-time",
    "timeout",
    "keep-outputs",
    "keep-derivations",
    "show-trace",
    "warn-dirty",
    "tarball-ttl",
];

/// The settings of `nix_config` (a `NIX_CONFIG` value: `name = value` lines) that pass, in
/// order, and the names of those that do not.
pub fn passed_settings(nix_config: &str) -> (Vec<(String, String)>, Vec<String>) {
    let mut passed = Vec::new();
    let mut dropped = Vec::new();
    for line in nix_config.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let Some((name, value)) = line.split_once('=') else {
            if !line.is_empty() {
                dropped.push(line.to_string());
            }
            continue;
        };
        let name = name.trim();
        match PASSED_SETTINGS.contains(&name) {
            true => passed.push((name.to_string(), value.trim().to_string())),
            false => dropped.push(name.to_string()),
        }
    }
    (passed, dropped)
}

/// The `--option` arguments for the runner's `NIX_CONFIG`'s passed settings, then `options`
/// (the config's `nix.options`, which win).
pub fn option_args(options: &std::collections::BTreeMap<String, String>) -> Vec<String> {
    let nix_config = std::env::var("NIX_CONFIG").unwrap_or_default();
    let (passed, dropped) = passed_settings(&nix_config);
    if !dropped.is_empty() {
        tracing::debug!(
            ?dropped,
            "NIX_CONFIG settings not given to the Nix that acts for a job"
        );
    }
    let configured = options.iter().map(|(k, v)| (k.clone(), v.clone()));
    let mut out = Vec::new();
    for (name, value) in passed.into_iter().chain(configured) {
        out.extend(["--option".to_string(), name, value]);
    }
    out
}

/// A `PATH` of the directories of `programs` (Nix runs `git` to fetch, and its own helpers
/// beside it), then the system's.
pub fn path_of(programs: &[&Path]) -> OsString {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for program in programs {
        if let Some(dir) = program.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dirs.iter().any(|d| d == dir) {
                dirs.push(dir.to_path_buf());
            }
        }
    }
    for system in ["/usr/bin", "/bin"] {
        if !dirs.iter().any(|d| d == Path::new(system)) {
            dirs.push(PathBuf::from(system));
        }
    }
    std::env::join_paths(dirs).unwrap_or_default()
}

/// An empty environment with `PATH` and the store's locations (those the runner has set).
pub fn clear(cmd: &mut tokio::process::Command, programs: &[&Path]) {
    cmd.env_clear();
    cmd.env("PATH", path_of(programs));
    for name in LOCATIONS {
        if let Some(value) = std::env::var_os(name).filter(|v| !v.is_empty()) {
            cmd.env(name, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_settings_without_secrets_pass() {
        let config = "substituters =\naccess-tokens = github.com=ghp_secret\n\
                      # a comment\nsandbox = true # trailing\npost-build-hook = /x\nbogus";
        let (passed, dropped) = passed_settings(config);
        assert_eq!(
            passed,
            vec![
                ("substituters".to_string(), String::new()),
                ("sandbox".to_string(), "true".to_string())
            ]
        );
        assert_eq!(dropped, vec!["access-tokens", "post-build-hook", "bogus"]);
    }

    #[test]
    fn path_holds_the_programs_dirs_then_the_systems() {
        let path = path_of(&[
            Path::new("/nix/store/x-nix/bin/nix"),
            Path::new("/usr/bin/git"),
        ]);
        assert_eq!(path, OsString::from("/nix/store/x-nix/bin:/usr/bin:/bin"));
    }
}
