use super::*;
use std::os::unix::fs::symlink;

fn dirs(hidden: &HiddenFile) -> Vec<PathBuf> {
    hidden.dirs.iter().map(|d| d.dir.clone()).collect()
}

fn real(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap()
}

#[test]
fn a_file_is_hidden_with_its_directory() {
    let t = tempfile::tempdir().unwrap();
    let keys = t.path().join("keys");
    std::fs::create_dir(&keys).unwrap();
    std::fs::write(keys.join("anthropic"), "k").unwrap();
    let h = hide(
        "accounts.a.api_key_file",
        &keys.join("anthropic"),
        PrivateKind::Account,
        Platform::Linux,
    )
    .unwrap();
    assert_eq!(dirs(&h), vec![real(&keys)]);
    // Not there yet: its directory is what is hidden, so a file written later is hidden too.
    let h = hide(
        "accounts.a.api_key_file",
        &keys.join("later"),
        PrivateKind::Account,
        Platform::Linux,
    )
    .unwrap();
    assert_eq!(dirs(&h), vec![real(&keys)]);
}

/// A link to a file elsewhere: its own directory (a new link renamed over it) and the
/// directory of what it points to (a new file renamed over that).
#[test]
fn a_link_is_hidden_with_its_directory_and_its_targets() {
    let t = tempfile::tempdir().unwrap();
    let (named, store) = (t.path().join("named"), t.path().join("store"));
    std::fs::create_dir(&named).unwrap();
    std::fs::create_dir(&store).unwrap();
    std::fs::write(store.join("key-v1"), "k").unwrap();
    symlink(store.join("key-v1"), named.join("key")).unwrap();
    let h = hide(
        "x",
        &named.join("key"),
        PrivateKind::Account,
        Platform::Linux,
    )
    .unwrap();
    assert_eq!(dirs(&h), vec![real(&named), real(&store)]);
    assert_eq!(h.dirs[1].link.as_deref(), Some(named.join("key").as_path()));
}

/// sops-nix and agenix: `secrets -> secrets.d/1`, switched to `secrets.d/2` by renaming a new
/// link over it. The generations' directory is hidden, not only the current generation.
#[test]
fn a_generation_link_hides_every_generation() {
    let t = tempfile::tempdir().unwrap();
    let gens = t.path().join("secrets.d");
    std::fs::create_dir_all(gens.join("1")).unwrap();
    std::fs::write(gens.join("1/key"), "k").unwrap();
    symlink("secrets.d/1", t.path().join("secrets")).unwrap();
    let h = hide(
        "x",
        &t.path().join("secrets/key"),
        PrivateKind::Account,
        Platform::Linux,
    )
    .unwrap();
    assert_eq!(dirs(&h), vec![real(&gens)]);
}

#[test]
fn a_directory_commands_need_is_refused_with_the_fix() {
    for (file, dir) in [
        ("/etc/anthropic-key", "/etc"),
        ("/usr/share/quest/key", "/usr/share/quest"),
        ("/opt/key", "/opt"),
        ("/key", "/"),
    ] {
        let err = check(
            "accounts.a.api_key_file",
            Path::new(file),
            PrivateKind::Account,
            Platform::Linux,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains(&format!("accounts.a.api_key_file = {file}"))
                && err.contains(&format!(" {dir} is "))
                && err.contains("Fix: move it"),
            "{file}: {err}"
        );
    }
    // Directories of their own inside them are fine.
    for file in [
        "/etc/quest-runner/key",
        "/opt/quest/key",
        "/run/keys/key",
        "/var/lib/q/key",
    ] {
        check("x", Path::new(file), PrivateKind::Account, Platform::Linux)
            .unwrap_or_else(|e| panic!("{file}: {e}"));
    }
}

/// A link that points into a directory commands need is refused as a file there would be.
#[test]
fn a_link_into_a_needed_directory_is_refused() {
    let t = tempfile::tempdir().unwrap();
    symlink("/etc/hostname", t.path().join("key")).unwrap();
    let err = hide(
        "x",
        &t.path().join("key"),
        PrivateKind::Account,
        Platform::Linux,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("its link") && err.contains(" /etc is "),
        "{err}"
    );
}

#[test]
fn the_store_holds_no_account_file_but_may_hold_the_config() {
    let file = Path::new("/nix/store/00000000000000000000000000000000-key/key");
    let err = check(
        "accounts.a.auth_file",
        file,
        PrivateKind::Account,
        Platform::Linux,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("Nix store"), "{err}");
    check(
        "the config file",
        file,
        PrivateKind::Config,
        Platform::Linux,
    )
    .unwrap();
    // A config linked into the store (the NixOS module's /etc/quest-runner/config.json):
    // its own directory is hidden, the store is left as it is.
    let t = tempfile::tempdir().unwrap();
    let store_file = std::fs::read_dir("/nix/store")
        .ok()
        .and_then(|mut d| d.find_map(|e| e.ok().map(|e| e.path())));
    if let Some(target) = store_file {
        symlink(&target, t.path().join("config.json")).unwrap();
        let h = hide(
            "the config file",
            &t.path().join("config.json"),
            PrivateKind::Config,
            Platform::Linux,
        )
        .unwrap();
        assert_eq!(dirs(&h), vec![real(t.path())]);
        assert!(hide(
            "x",
            &t.path().join("config.json"),
            PrivateKind::Account,
            Platform::Linux
        )
        .is_err());
    }
}

#[test]
fn missing_directories_pass_loading_but_not_a_job() {
    let file = Path::new("/run/qr-no-such-dir-for-tests/key");
    check("x", file, PrivateKind::Account, Platform::Linux).unwrap();
    let err = hide("x", file, PrivateKind::Account, Platform::Linux)
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot be resolved"), "{err}");
}

#[test]
fn bad_paths_are_named() {
    let err = check(
        "x",
        Path::new("keys/k"),
        PrivateKind::Account,
        Platform::Linux,
    )
    .unwrap_err();
    assert!(matches!(err, PlacementError::NotAFilePath { .. }), "{err}");
    let t = tempfile::tempdir().unwrap();
    symlink("loop", t.path().join("loop")).unwrap();
    let err = hide(
        "x",
        &t.path().join("loop"),
        PrivateKind::Account,
        Platform::Linux,
    )
    .unwrap_err();
    assert!(matches!(err, PlacementError::Links { .. }), "{err}");
}

/// What the policy denies wholesale must stay hideable: an account file there is fine.
#[test]
fn denied_system_directories_are_not_needed() {
    for platform in [Platform::Linux, Platform::Macos] {
        for dir in crate::sandbox::policy::system_denied_reads(platform) {
            assert_eq!(needed_why(&dir, platform), None, "{}", dir.display());
        }
    }
}
