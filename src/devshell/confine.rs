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
    let root = rustix::process::geteuid().is_root();
    if writable {
        let store = crate::store_path::store_dir();
        let log = std::env::var_os("NIX_LOG_DIR")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/nix/var/log/nix"));
        return match root {
            true => NixStore::LocalAsRoot { store, state, log },
            false => NixStore::LocalAsUser { store, state, log },
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
    if let NixStore::LocalAsRoot { log, .. } | NixStore::LocalAsUser { log, .. } = &store {
        // Nix makes its log directory at its first build; in the namespace its parent is
        // read-only, so on a Nix that never built here it is made now, as Nix would (a
        // failure leaves Nix's own error to name it).
        let _ = std::fs::create_dir_all(log);
    }
    let tools = Tools {
        bwrap: binaries::find(Tool::Bwrap)?,
        setpriv: PathBuf::new(),
    };
    let unshare = match store {
        NixStore::LocalAsRoot { .. } => binaries::find(Tool::Unshare)?,
        _ => PathBuf::new(),
    };
    let mut read = vec![p.repo.clone(), p.git_dir.clone()];
    read.extend(crate::sandbox::programs::roots(
        [p.nix.path.as_path()],
        policy,
    ));
    if let Some(net) = &p.net {
        read.extend(super::network::reads(net));
    }
    let own = OwnFiles {
        read,
        write: vec![roots.to_path_buf(), scratch.to_path_buf()],
        read_only: Vec::new(),
    };
    let mut plan = boundary::nix_plan(policy, &own, &store, &tools, &unshare, scratch);
    if p.host_network {
        plan.prefix.retain(|a| a != "--unshare-net");
    } else if let Some(net) = &p.net {
        plan.prefix.extend(super::network::inside(net));
    }
    Ok(plan)
}

/// What the job's boundary holds of Nix in `store`'s setup, for `policy` and `doctor`.
pub fn describe(store: &NixStore) -> String {
    let client = "the devShell's nix client runs in the job's boundary (the policy's denied \
                  trees absent, its own network namespace: no host loopback or link-local \
                  address; with nix.network \"proxy\", the default, the job's proxy bridged in, \
                  so it fetches from the job's allowed hosts only)";
    match store {
        NixStore::LocalAsRoot { .. } => format!(
            "setup (a), root with the local store: {client}, as root with its capabilities in \
             a mount and PID namespace; its builds, fixed-output ones included, share that \
             network namespace, so they reach the job's proxy and nothing else; untrusted \
             revisions' fixed-output builds are refused"
        ),
        NixStore::LocalAsUser { .. } => format!(
            "single-user Nix of this user: {client}, in a user namespace; its builds share \
             that network namespace; untrusted revisions' fixed-output builds are refused"
        ),
        NixStore::Daemon { socket } => format!(
            "setup (b), through the nix-daemon at {}: {client}, as this user; the daemon's \
             builds run in the daemon's network, which the boundary does not reach, so a \
             fixed-output derivation in neither the store nor a substituter is refused",
            socket.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(root: &Path) -> SandboxPolicy {
        let job = root.join("state/jobs/j");
        let ws = crate::workspace::WorkspacePaths {
            checkout: job.join("checkout"),
            bare_clone: root.join("state/repos/r.git"),
            git_store: job.join("git"),
            worktree_admin: job.join("git/worktrees/checkout"),
            temp_dir: root.join("tmp/quest-job-1"),
            job_dir: job.clone(),
            devshell_script: None,
            helper_tmp: root.join("tmp/quest-srt-1"),
        };
        let inputs = crate::sandbox::PolicyInputs {
            platform: crate::sandbox::Platform::Linux,
            trust: crate::job::Trust::Trusted,
            extra_hosts: Vec::new(),
            full_access_hosts: Vec::new(),
            state_dir: root.join("state"),
            operator_home: None,
            private: Vec::new(),
        };
        crate::sandbox::plan(&ws, &inputs)
    }

    fn has(args: &[String], seq: &[&str]) -> bool {
        args.windows(seq.len())
            .any(|w| w.iter().zip(seq).all(|(a, b)| a == b))
    }

    #[test]
    fn root_keeps_root_and_gets_an_uncovered_proc() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("state/jobs/j/checkout")).unwrap();
        let p = policy(dir.path());
        let tools = Tools {
            bwrap: "/bin/bwrap".into(),
            setpriv: PathBuf::new(),
        };
        let store = NixStore::LocalAsRoot {
            store: "/nix/store".into(),
            state: "/nix/var/nix".into(),
            log: "/nix/var/log/nix".into(),
        };
        let own = OwnFiles::default();
        let plan = boundary::nix_plan(
            &p,
            &own,
            &store,
            &tools,
            Path::new("/bin/unshare"),
            dir.path(),
        );
        let args = &plan.prefix;
        assert_eq!(plan.program, PathBuf::from("/bin/unshare"));
        assert!(has(
            args,
            &[
                "--pid",
                "--fork",
                "--kill-child",
                "--mount-proc",
                "--",
                "/bin/bwrap"
            ]
        ));
        assert!(!args
            .iter()
            .any(|a| a == "--unshare-user" || a == "--unshare-pid" || a == "--proc"));
        assert!(has(args, &["--cap-add", "ALL"]) && has(args, &["--unshare-net"]));
        assert!(has(args, &["--bind", "/proc", "/proc"]));
        assert!(has(args, &["--bind-try", "/nix/store", "/nix/store"]));
        // The state dir is hidden (with /tmp, where it is here), and none of the job's
        // workspace is given back to nix.
        let state = dir.path().join("state");
        assert!(p.deny_read.iter().any(|d| state.starts_with(d)));
        assert!(has(args, &["--tmpfs", "/tmp"]) && has(args, &["--tmpfs", "/root"]));
        assert!(!args.iter().any(|a| a.ends_with("/checkout")));
    }

    #[test]
    fn the_daemon_client_is_the_runner_with_the_socket() {
        let dir = tempfile::tempdir().unwrap();
        let p = policy(dir.path());
        let tools = Tools {
            bwrap: "/bin/bwrap".into(),
            setpriv: PathBuf::new(),
        };
        let socket = dir.path().join("tmp/daemon/socket");
        let store = NixStore::Daemon {
            socket: socket.clone(),
        };
        let plan = boundary::nix_plan(
            &p,
            &OwnFiles::default(),
            &store,
            &tools,
            Path::new(""),
            dir.path(),
        );
        let s = socket.display().to_string();
        assert_eq!(plan.program, PathBuf::from("/bin/bwrap"));
        assert!(has(&plan.prefix, &["--unshare-net"]) && has(&plan.prefix, &["--unshare-user"]));
        assert!(has(&plan.prefix, &["--ro-bind-try", &s, &s]));
        assert!(!plan.prefix.iter().any(|a| a == "--cap-add"));
    }

    #[test]
    fn the_store_follows_nix_rule() {
        // As root on a machine with a writable local store: setup (a); else the daemon.
        match client_store() {
            NixStore::LocalAsRoot { store, .. } => {
                assert!(rustix::process::geteuid().is_root());
                assert_eq!(store, crate::store_path::store_dir());
            }
            NixStore::LocalAsUser { .. } => assert!(!rustix::process::geteuid().is_root()),
            NixStore::Daemon { socket } => assert!(socket.ends_with("socket")),
        }
    }
}
