//! The nix client of a job's devShell inside the job's boundary (`sandbox::boundary::nix_plan`).
//!
//! The revision's flake, lock and inputs are the job's to choose: a `path:` input to a hidden
//! directory, a `git+file:` input to another repository, a `file` input at an account's key,
//! a `tarball` at a loopback service. Nix copies what it fetches into the world-readable store
//! before it compares any hash, and `restrict-eval` does not stop a locked `path:` input on
//! Nix 2.8. So no list of input types is judged here: nix runs where the job's denied trees
//! are absent and no host address is reachable, and fetches only what the job could read.
//! What it then copies, and names in its errors, is harmless by construction.

use std::path::{Path, PathBuf};

use super::{DevShellError, Prepared};
use crate::binaries::{self, Tool};
use crate::sandbox::boundary::{self, Confined, NixStore, OwnFiles, Tools};
use crate::sandbox::SandboxPolicy;

/// Which store this process's `nix` opens, by Nix's own rule for `store = auto` (see
/// `nix_setup`): the local store when its state directory is writable, else the daemon.
pub fn client_store() -> NixStore {
    let state = std::env::var_os("NIX_STATE_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/nix/var/nix"));
    let writable = rustix::fs::access(
        &state,
        rustix::fs::Access::READ_OK | rustix::fs::Access::WRITE_OK,
    )
    .is_ok();
    if writable && rustix::process::geteuid().is_root() {
        return NixStore::LocalAsRoot {
            store: crate::store_path::store_dir(),
            log: std::env::var_os("NIX_LOG_DIR")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/nix/var/log/nix")),
            state,
        };
    }
    let socket = std::env::var_os("NIX_DAEMON_SOCKET_PATH")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| state.join("daemon-socket/socket"));
    NixStore::Daemon { socket }
}

/// The plan that starts `nix` for `p` inside `policy`'s boundary: it reads the repository it
/// evaluates and writes only the devShell's GC roots and its scratch directory.
pub(super) fn plan(
    policy: &SandboxPolicy,
    p: &Prepared,
    roots: &Path,
    scratch: &Path,
) -> Result<Confined, DevShellError> {
    let store = client_store();
    let tools = Tools {
        bwrap: binaries::find(Tool::Bwrap)?,
        setpriv: PathBuf::new(),
    };
    let unshare = match store {
        NixStore::LocalAsRoot { .. } => binaries::find(Tool::Unshare)?,
        NixStore::Daemon { .. } => PathBuf::new(),
    };
    let own = OwnFiles {
        read: vec![p.repo.clone(), p.git_dir.clone()],
        write: vec![roots.to_path_buf(), scratch.to_path_buf()],
        read_only: Vec::new(),
    };
    Ok(boundary::nix_plan(
        policy, &own, &store, &tools, &unshare, scratch,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_follows_nix_rule() {
        // As root on a machine with a writable local store: setup (a); else the daemon.
        match client_store() {
            NixStore::LocalAsRoot { store, .. } => {
                assert!(rustix::process::geteuid().is_root());
                assert_eq!(store, crate::store_path::store_dir());
            }
            NixStore::Daemon { socket } => assert!(socket.ends_with("socket")),
        }
    }
}
