use super::*;

/// The expected hashes are `nix hash path`'s (Nix 2.8) for the same trees.
#[test]
fn matches_nix_for_files_directories_and_links() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t");
    std::fs::create_dir_all(t.join("bin")).unwrap();
    let write = |name: &str, body: &str, mode: u32| {
        std::fs::write(t.join(name), body).unwrap();
        std::fs::set_permissions(t.join(name), std::fs::Permissions::from_mode(mode)).unwrap();
    };
    write("bin/bash", "echo hi\n", 0o755);
    write("a", "x", 0o644);
    write("empty", "", 0o600);
    std::os::unix::fs::symlink("bin/bash", t.join("link")).unwrap();

    assert_eq!(
        nar_hash(&t).unwrap(),
        "sha256-87NS0AwBBocLxPLpUoIIpDPWn5gyvf7kS581dC3q4a8="
    );
    assert_eq!(
        nar_hash(&t.join("a")).unwrap(),
        "sha256-LKC4zplvhl2zdhm/6RAjVZMFqtgVgEL8bdsO8dQ8W2c="
    );
}

#[test]
fn a_fifo_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let err = nar_hash(dir.path()).unwrap_err().to_string();
    assert!(err.contains("pipe"), "{err}");
}
