use super::*;
use std::os::unix::fs::PermissionsExt;

fn executable(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn override_wins_over_path() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    executable(a.path(), "nix");
    let chosen = executable(b.path(), "my-nix");
    let found = find_with(
        Tool::Nix,
        Some(chosen.clone().into_os_string()),
        Some(a.path().as_os_str().to_owned()),
    )
    .unwrap();
    assert_eq!(found, chosen);
}

#[test]
fn path_is_searched_without_override() {
    let a = tempfile::tempdir().unwrap();
    let expected = executable(a.path(), "git");
    let found = find_with(Tool::Git, None, Some(a.path().as_os_str().to_owned())).unwrap();
    assert_eq!(found, expected);
}

#[test]
fn bad_override_names_the_variable() {
    let err = find_with(Tool::Nix, Some("/nonexistent/nix".into()), None).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("QUEST_RUNNER_NIX"), "{msg}");
    assert!(msg.contains("/nonexistent/nix"), "{msg}");
}

#[test]
fn missing_binary_names_the_variable() {
    let empty = tempfile::tempdir().unwrap();
    let err = find_with(Tool::Bwrap, None, Some(empty.path().as_os_str().to_owned())).unwrap_err();
    assert!(err.to_string().contains("QUEST_RUNNER_BWRAP"));
}
