//! Evaluating the repository's Nix files with this machine's `nix-instantiate`, without
//! nixpkgs and without a store: `--readonly-mode --store dummy://` computes store paths but
//! writes none, so the same evaluations run on a host and inside a Nix build's sandbox (the
//! flake's package runs these tests in its check phase).
//!
//! Expressions are functions of `root` (the repository) and `lib` (nixpkgs' real lib:
//! `QUEST_RUNNER_TEST_NIXPKGS_LIB`, else `../shared/data/nixpkgs-lib/lib` beside the checkout).

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `nix-instantiate`, or `None` after saying the check is skipped.
pub fn nix_instantiate(check: &str) -> Option<PathBuf> {
    match which::which("nix-instantiate") {
        Ok(path) => Some(path),
        Err(_) => {
            eprintln!("SKIPPED {check}: nix-instantiate is not on PATH");
            None
        }
    }
}

/// nixpkgs' `lib`: `QUEST_RUNNER_TEST_NIXPKGS_LIB`, else `shared/data/nixpkgs-lib/lib` beside
/// the checkout or beside one of its parents (a worktree). Its absence fails the test: the
/// module checks must not pass by skipping.
pub fn nixpkgs_lib() -> PathBuf {
    let lib = match std::env::var_os("QUEST_RUNNER_TEST_NIXPKGS_LIB") {
        Some(dir) => PathBuf::from(dir),
        None => root()
            .ancestors()
            .skip(1)
            .map(|dir| dir.join("shared/data/nixpkgs-lib/lib"))
            .find(|lib| lib.is_dir())
            .unwrap_or_else(|| root().join("../shared/data/nixpkgs-lib/lib")),
    };
    assert!(
        lib.join("default.nix").is_file(),
        "nixpkgs' lib not found at {}: set QUEST_RUNNER_TEST_NIXPKGS_LIB to a nixpkgs checkout's lib/",
        lib.display()
    );
    lib
}

/// Evaluates `expr`, a function of `root` (and of `lib` when `with_lib`), strictly as JSON: the
/// value, or the error nix printed.
fn run(nix: &Path, expr: &str, with_lib: bool) -> Result<serde_json::Value, String> {
    let mut cmd = Command::new(nix);
    cmd.args(["--eval", "--strict", "--json", "--readonly-mode"])
        .args(["--store", "dummy://"])
        .arg("--argstr")
        .arg("root")
        .arg(root());
    if with_lib {
        cmd.arg("--arg")
            .arg("lib")
            .arg(format!("import {}", nixpkgs_lib().display()));
    }
    let out = cmd.arg("-E").arg(expr).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.success() {
        Ok(serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{expr}: not JSON ({e}): {stderr}")))
    } else {
        Err(stderr)
    }
}

/// `expr` is a function of `root`.
pub fn eval(nix: &Path, expr: &str) -> serde_json::Value {
    run(nix, expr, false).unwrap_or_else(|e| panic!("{expr}: {e}"))
}

/// `expr` is a function of `root` and `lib`.
pub fn try_eval_lib(nix: &Path, expr: &str) -> Result<serde_json::Value, String> {
    run(nix, expr, true)
}

pub fn eval_lib(nix: &Path, expr: &str) -> serde_json::Value {
    try_eval_lib(nix, expr).unwrap_or_else(|e| panic!("{expr}: {e}"))
}
