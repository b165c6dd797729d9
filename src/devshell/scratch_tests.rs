use super::*;

use std::time::SystemTime;

/// A directory `name` in `parent` with a file in it, last modified a minute ago.
fn old_dir(parent: &Path, name: &str) -> PathBuf {
    let dir = parent.join(name);
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("nix-build-x.drv-0"), "partial").unwrap();
    // A build's read-only directory (a Go module cache's, say) must not stop the removal.
    // (As root, as CI runs, it would not anyway; `remove`'s own test checks the chmod.)
    let read_only = dir.join("pkg/mod");
    std::fs::create_dir_all(&read_only).unwrap();
    std::fs::write(read_only.join("go.mod"), "module x").unwrap();
    for d in [read_only.as_path(), read_only.parent().unwrap()] {
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o555)).unwrap();
    }
    let minute_ago = SystemTime::now() - Duration::from_secs(60);
    File::open(&dir).unwrap().set_modified(minute_ago).unwrap();
    dir
}

#[test]
fn sweep_removes_only_abandoned_scratch_dirs() {
    let parent = tempfile::tempdir().unwrap();
    let abandoned = old_dir(parent.path(), "quest-nix-abandoned");
    let held = old_dir(parent.path(), "quest-nix-held");
    let lock = File::open(&held).unwrap();
    rustix::fs::flock(&lock, FlockOperation::NonBlockingLockExclusive).unwrap();
    let other = old_dir(parent.path(), "not-ours");
    let young = parent.path().join("quest-nix-young");
    std::fs::create_dir(&young).unwrap();

    assert_eq!(sweep(parent.path()), vec![abandoned.clone()]);
    assert!(!abandoned.exists());
    assert!(held.exists(), "a run in progress keeps its dir");
    assert!(other.exists());
    assert!(young.exists(), "a dir not yet locked is left alone");
    drop(lock);
    // Another test's thread may fork while the lock's descriptor is open: until its child
    // execs (the descriptor is close-on-exec), that copy holds the lock (CI saw it once).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut swept = sweep(parent.path());
    while swept.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        swept = sweep(parent.path());
    }
    assert_eq!(swept, vec![held]);
}

#[test]
fn a_scratch_dir_is_locked_while_it_lives_and_removed_after() {
    let scratch = Scratch::create().unwrap();
    let path = scratch.path().to_path_buf();
    let probe = File::open(&path).unwrap();
    assert!(rustix::fs::flock(&probe, FlockOperation::NonBlockingLockExclusive).is_err());
    drop(probe);
    drop(scratch);
    assert!(!path.exists());
}
