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

use super::daemon::RunnerDaemon;
use super::{DevShellError, Prepared};
use crate::binaries::{self, Tool};
use crate::sandbox::boundary::{self, ClientStore, Confined, Identity, NixStore, OwnFiles, Tools};
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

/// The plan that starts `nix` for `p` inside `policy`'s boundary as `identity`, opening
/// `store`: it reads the repository it evaluates and writes only its scratch directory (its
/// TMPDIR, HOME and the profile link the runner roots afterwards).
pub(super) fn plan(
    policy: &SandboxPolicy,
    p: &Prepared,
    store: &ClientStore,
    identity: Identity,
    scratch: &Path,
) -> Result<Confined, DevShellError> {
    let tools = Tools {
        bwrap: binaries::find(Tool::Bwrap)?,
        setpriv: match identity {
            Identity::Agent => binaries::find(Tool::Setpriv)?,
            Identity::Runner => PathBuf::new(),
        },
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
        write: vec![scratch.to_path_buf()],
        read_only: Vec::new(),
    };
    let mut plan = boundary::nix_plan(policy, &own, store, identity, &tools, scratch);
    if p.host_network {
        plan.prefix.retain(|a| a != "--unshare-net");
    } else if let Some(net) = &p.net {
        plan.prefix.extend(super::network::inside(net));
    }
    Ok(plan)
}

/// The store the job's client opens: its repository's ([`super::repo_store`]), served by a
/// daemon the runner starts for the run in either setup, to be kept until nix ends.
pub(super) async fn client_for(
    shells: &super::DevShells,
    p: &Prepared,
) -> Result<(ClientStore, RunnerDaemon), DevShellError> {
    let store = shells.repo_store(&p.repo);
    let net = p.net.as_ref().filter(|_| !p.host_network);
    let daemon = super::daemon::start(shells, p, &store, net, p.host_network).await?;
    let client = ClientStore {
        socket: daemon.socket().to_path_buf(),
        real_store_dir: store.real_store_dir(),
    };
    Ok((client, daemon))
}

/// What the job's boundary holds of Nix in `store`'s setup, for `policy` and `doctor`.
pub fn describe(store: &NixStore) -> String {
    let client = "the devShell's nix client runs in the job's boundary as the job's identity \
                  (never root; a user and PID namespace with a /proc of its own; an \
                  environment of Nix's locations and the job's proxy, nothing else of the \
                  runner's), the policy's denied trees absent, its own network namespace: no \
                  host loopback or link-local address; with nix.network \"proxy\", the \
                  default, the job's proxy bridged in, so it fetches from the job's allowed \
                  hosts only";
    let tenancy = "its repository's own store (the state dir's devshell/stores), served by a \
                   nix-daemon the runner starts for the one run, in a network namespace with \
                   only the job's proxy and a PID namespace whose end ends its builders: \
                   another repository's sources and outputs, the host store's paths and its \
                   database cannot be named; only what the configured binary caches hold is \
                   shared";
    let fixed = "fixed-output builds share the daemon's network, so they reach the job's \
                 proxy and nothing else; untrusted revisions' fixed-output builds and imports \
                 from derivation are refused; builds are bounded by limits.disk and \
                 limits.disk_files (their scratch, build directories and what they add to the \
                 repository's store, counted as the job's files are; the largest file), \
                 serve's rlimits and, where serve has cgroups, the job's group (memory, pids, \
                 cpu), which holds the devShell's nix and daemon as it holds the agent";
    match store {
        NixStore::LocalAsRoot { .. } => format!(
            "setup (a), root: {client}; {tenancy}; builds as the build users in Nix's \
             sandbox; {fixed}"
        ),
        NixStore::LocalAsUser { .. } | NixStore::Daemon { .. } => format!(
            "setup (b), the runner's own user (the host's store or daemon is not used for \
             jobs): {client}; {tenancy}; builds in Nix's sandbox in a user namespace of \
             the runner's user; {fixed}"
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
            dependency_hosts: Vec::new(),
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

    fn tools() -> Tools {
        Tools {
            bwrap: "/bin/bwrap".into(),
            setpriv: "/bin/setpriv".into(),
        }
    }

    #[test]
    fn a_root_runners_client_is_the_agents_identity_with_its_own_proc() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("state/jobs/j/checkout")).unwrap();
        let p = policy(dir.path());
        let socket = dir.path().join("tmp/quest-nixd-1/socket");
        let store = ClientStore {
            socket: socket.clone(),
            real_store_dir: dir.path().join("state/devshell/stores/x/nix/store"),
        };
        let plan = boundary::nix_plan(
            &p,
            &OwnFiles::default(),
            &store,
            Identity::Agent,
            &tools(),
            dir.path(),
        );
        let args = &plan.prefix;
        let id = crate::agent_id::AGENT_ID.to_string();
        assert_eq!(plan.program, PathBuf::from("/bin/setpriv"));
        assert!(has(
            args,
            &["--reuid", &id, "--regid", &id, "--clear-groups"]
        ));
        assert!(has(
            args,
            &["--", "/bin/bwrap", "--unshare-net", "--unshare-user"]
        ));
        assert!(has(args, &["--unshare-pid"]) && has(args, &["--proc", "/proc"]));
        assert!(!args.iter().any(|a| a == "--cap-add"));
        let s = socket.display().to_string();
        assert!(has(args, &["--ro-bind-try", &s, &s]));
        // The state dir is hidden (with /tmp, where it is here), and none of the job's
        // workspace is given back to nix.
        let state = dir.path().join("state");
        assert!(p.deny_read.iter().any(|d| state.starts_with(d)));
        assert!(has(args, &["--tmpfs", "/root"]));
        assert!(!args.iter().any(|a| a.ends_with("/checkout")));
    }

    #[test]
    fn the_daemon_client_is_the_runner_with_the_socket() {
        let dir = tempfile::tempdir().unwrap();
        let p = policy(dir.path());
        let socket = dir.path().join("tmp/daemon/socket");
        let store = ClientStore {
            socket: socket.clone(),
            real_store_dir: dir.path().join("state/devshell/stores/x/nix/store"),
        };
        let plan = boundary::nix_plan(
            &p,
            &OwnFiles::default(),
            &store,
            Identity::Runner,
            &tools(),
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
