use super::*;

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

#[test]
fn a_missing_or_own_state_dir_passes_the_owner_check() {
    let dir = tempfile::tempdir().unwrap();
    assert!(StateDir::at(dir.path().join("later")).check_owner().is_ok());
    assert!(StateDir::at(dir.path()).check_owner().is_ok());
}

/// As root: files of another user (nobody) are what a service user's state dir looks like to
/// root, and what root's leftovers look like to the service user.
#[test]
fn paths_of_another_owner_are_named() {
    if !is_root() {
        eprintln!("skipped: needs root to own files as another user");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir::at(dir.path().join("state"));
    let clone = state.root().join("repos/x.git");
    std::fs::create_dir_all(&clone).unwrap();
    assert!(state.check_ours(&clone).is_ok());
    assert!(state
        .check_ours(&state.root().join("repos/absent.lock"))
        .is_ok());

    std::os::unix::fs::lchown(&clone, Some(65534), Some(65534)).unwrap();
    let err = state
        .check_ours(&clone.join("objects"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("repos/x.git belongs to nobody (uid 65534)"),
        "{err}"
    );
    assert!(err.contains("chown -R root"), "{err}");
    assert!(foreign_owner_note(&clone.join("HEAD")).contains("x.git belongs to nobody"));
    assert!(foreign_owner_note(&state.root().join("repos")).is_empty());

    std::os::unix::fs::lchown(state.root(), Some(65534), Some(65534)).unwrap();
    let err = state.check_owner().unwrap_err().to_string();
    assert!(
        err.contains("belongs to nobody (uid 65534), not to root (uid 0)"),
        "{err}"
    );
}
