//! A state directory used by two users: the service user's (setup (b) of docs/nix.md), with a
//! leftover of root in it, or root working in the service user's. Each must end with an error
//! naming the owner and the fix, before anything is written. Needs root (to own files as
//! another user and to run the runner as one).

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `nobody` on Debian and NixOS.
const OTHER: u32 = 65534;

fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

/// A copy of the runner where any user may run it (the checkout may sit in a private home).
fn runner_copy(dir: &Path) -> PathBuf {
    let exe = dir.join("quest-runner");
    std::fs::copy(env!("CARGO_BIN_EXE_quest-runner"), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    exe
}

fn run(exe: &Path, uid: Option<u32>, state: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(exe);
    cmd.arg("--state-dir").arg(state).args(args);
    cmd.env("NIX_CONFIG", "substituters =").current_dir("/");
    if let Some(uid) = uid {
        cmd.uid(uid).gid(uid).env("HOME", "/nonexistent");
    }
    // The copy was just written: a child forked meanwhile by the other test's thread may
    // still hold its write descriptor until that child execs (ETXTBSY). Wait that out.
    for _ in 0..100 {
        match cmd.output() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            out => return out.unwrap(),
        }
    }
    cmd.output().unwrap()
}

fn chown(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).unwrap();
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

const REV: &str = "0123456789abcdef0123456789abcdef01234567";

#[test]
fn root_refuses_a_state_dir_of_another_user_and_writes_nothing() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = runner_copy(dir.path());
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    chown(&state, OTHER);
    for args in [
        &["env", "--repo", "/nonexistent", "--rev", REV][..],
        &["cache", "ls"],
        &["jobs"],
    ] {
        let out = run(&exe, None, &state, args);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&format!(
                "belongs to nobody (uid {OTHER}), not to root (uid 0)"
            )),
            "{err}"
        );
        assert!(err.contains("sudo -u nobody"), "{err}");
        assert_eq!(std::fs::read_dir(&state).unwrap().count(), 0, "written");
    }
    // doctor reports it and goes on.
    let out = run(&exe, None, &state, &["doctor"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("FAIL state directory") && l.contains("belongs to nobody")),
        "{text}"
    );
}

#[test]
fn a_root_owned_leftover_in_the_service_users_state_dir_is_named() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = runner_copy(dir.path());
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    chown(&state, OTHER);

    // What a run as root leaves: the cache's directories, the lock directory only root may
    // write.
    let locks = state.join("devshell/v1/locks");
    std::fs::create_dir_all(&locks).unwrap();
    std::fs::set_permissions(&locks, std::fs::Permissions::from_mode(0o700)).unwrap();

    // A devShell request: the revision (with no flake.nix) is answered and cached, which
    // needs the cache's lock directory.
    let repo = dir.path().join("repo");
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .current_dir(&repo)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
            .args(args)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    std::fs::create_dir(&repo).unwrap();
    git(&["init", "-q", "-b", "main"]);
    git(&["commit", "-q", "--allow-empty", "-m", "x"]);
    let rev = git(&["rev-parse", "HEAD"]);
    let out = run(
        &exe,
        Some(OTHER),
        &state,
        &["env", "--repo", repo.to_str().unwrap(), "--rev", &rev],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    // The first directory of root's on the way is named.
    assert!(
        err.contains("state/devshell belongs to root (uid 0), not to nobody (uid 65534)"),
        "{err}"
    );
    assert!(err.contains("chown -R nobody"), "{err}");
}
