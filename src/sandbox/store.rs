//! The job's view of the Nix store: the closure of its devShell, not every path any user ever
//! added. The store is world-readable, and a secret that reached it (a NixOS configuration's
//! `builtins.readFile` of a key, a flake input copied before its hash was checked, another
//! job's devShell) is there for every process of the host. Defence in depth: the job's
//! namespace hides the store and binds back, read-only, the store paths its devShell needs.
//!
//! Only where nothing the namespace runs lives in the store: on NixOS (and wherever the agent,
//! bubblewrap or the system's shell is a store path) the programs' closures are the system's,
//! which would have to be bound path by path and kept in step with every upgrade; there the
//! whole store stays visible, and `why_whole` says so.

use std::path::{Path, PathBuf};

/// The programs whose place decides: the system's shell and `env`, which scripts start from.
const SYSTEM_PROGRAMS: [&str; 2] = ["/bin/sh", "/usr/bin/env"];

/// The store paths a job sees, `closure` (its devShell's, empty without one), or why it must
/// see the whole store: one of `programs` (or the system's shell) lives in `store`.
pub fn view(
    store: &Path,
    closure: &[PathBuf],
    programs: &[PathBuf],
) -> Result<Vec<PathBuf>, String> {
    let system = SYSTEM_PROGRAMS.iter().map(PathBuf::from);
    for program in programs.iter().cloned().chain(system) {
        let real = std::fs::canonicalize(&program).unwrap_or(program.clone());
        if real.starts_with(store) {
            return Err(format!(
                "{} is in the Nix store ({}): the job sees the whole store",
                program.display(),
                real.display()
            ));
        }
    }
    let mut paths: Vec<PathBuf> = closure
        .iter()
        .filter(|p| crate::store_path::is_store_path(p, store))
        .cloned()
        .collect();
    paths.sort();
    paths.dedup();
    Ok(paths)
}

/// The store paths a job's namespace shows, and where they are on the host.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StoreView {
    /// The directory holding the paths on the host: a repository's store
    /// (`devshell::repo_store`), whose paths keep the store's names; `None`: the host's store.
    pub real: Option<PathBuf>,
    /// The paths, by their names in the store.
    pub paths: Vec<PathBuf>,
    /// Paths bound from the host's store even so: the closures of the programs the namespace
    /// runs, where they live in the store (NixOS).
    pub host: Vec<PathBuf>,
}

impl StoreView {
    /// Where `path` (named in `store`) is on the host.
    pub fn source(&self, store: &Path, path: &Path) -> PathBuf {
        match (&self.real, path.strip_prefix(store)) {
            (Some(real), Ok(rest)) => real.join(rest),
            _ => path.to_path_buf(),
        }
    }
}

/// The store paths `programs` need, where they live in the host's store: asked of the host's
/// store by the runner's nix (a path it did not build for any job; nothing a job chose).
pub async fn programs_closure(programs: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let store = crate::store_path::store_dir();
    let in_store: Vec<PathBuf> = programs
        .iter()
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .chain(
            SYSTEM_PROGRAMS
                .iter()
                .filter_map(|p| std::fs::canonicalize(p).ok()),
        )
        .filter(|p| p.starts_with(&store))
        .collect();
    if in_store.is_empty() {
        return Ok(Vec::new());
    }
    let nix = crate::binaries::find(crate::binaries::Tool::Nix).map_err(|e| e.to_string())?;
    let mut cmd = tokio::process::Command::new(&nix);
    cmd.args([
        "--extra-experimental-features",
        "nix-command",
        "path-info",
        "--recursive",
    ])
    .args(&in_store);
    let out = crate::process::run_captured(cmd, "nix")
        .await
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(out.error_message());
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| PathBuf::from(l.trim()))
        .filter(|p| crate::store_path::is_store_path(p, &store))
        .collect())
}

/// bubblewrap's options for the view, after the system's read-only bind: an empty store with
/// each path bound back (each a mount of its own), then the empty store made read-only.
///
/// A host with no store yet (a fresh `nix-bin` that never built) has nothing to hide, and its
/// read-only root has no mount point for the empty store: no options then, unless paths must be
/// shown, where bubblewrap's error names the missing directory.
pub(super) fn view_args(store: &Path, view: &StoreView) -> Vec<String> {
    if view.paths.is_empty() && view.host.is_empty() && !store.is_dir() {
        return Vec::new();
    }
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let mut out = vec!["--tmpfs".to_string(), s(store)];
    for path in &view.paths {
        out.extend([
            "--ro-bind".to_string(),
            s(&view.source(store, path)),
            s(path),
        ]);
    }
    for path in view.host.iter().filter(|p| !view.paths.contains(p)) {
        out.extend(["--ro-bind".to_string(), s(path), s(path)]);
    }
    out.extend(["--remount-ro".to_string(), s(store)]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_program_keeps_the_whole_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store");
        let prog = store.join("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-claude/bin/claude");
        std::fs::create_dir_all(prog.parent().unwrap()).unwrap();
        std::fs::write(&prog, "").unwrap();
        let why = view(&store, &[], &[prog]).unwrap_err();
        assert!(why.contains("is in the Nix store"), "{why}");
    }

    #[test]
    fn the_view_is_the_closure_of_store_paths_only() {
        let store = Path::new("/nix/store");
        let a = store.join("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-a");
        let closure = vec![
            a.clone(),
            store.join("cccccccccccccccccccccccccccccccc-b"),
            a.clone(),
            PathBuf::from("/etc/passwd"),
            store.join("x/../.."),
        ];
        let got = view(store, &closure, &[PathBuf::from("/usr/bin/true")]);
        if let Ok(got) = got {
            assert_eq!(got.len(), 2, "{got:?}");
            let view = StoreView {
                real: Some(PathBuf::from("/state/devshell/stores/x/nix/store")),
                paths: got,
                host: Vec::new(),
            };
            let args = view_args(store, &view);
            assert_eq!(
                args[2..5],
                [
                    "--ro-bind",
                    "/state/devshell/stores/x/nix/store/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-a",
                    "/nix/store/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-a"
                ]
            );
            assert_eq!(args[..2], ["--tmpfs", "/nix/store"]);
            assert_eq!(args[args.len() - 2..], ["--remount-ro", "/nix/store"]);
        }
    }
}
