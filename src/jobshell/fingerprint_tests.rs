use std::fs;

use super::*;

fn checkout() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    fs::create_dir_all(p.join("src/deep/er/still")).unwrap();
    fs::write(p.join("src/main.rs"), "").unwrap();
    fs::write(p.join(".git"), "gitdir: /elsewhere").unwrap();
    fs::write(p.join(".bashrc"), "").unwrap();
    dir
}

#[test]
fn ordinary_work_leaves_it_unchanged() {
    let dir = checkout();
    let p = dir.path();
    let before = Fingerprint::take(p, &[]);
    fs::write(p.join("src/main.rs"), "fn main() {}").unwrap();
    fs::write(p.join("src/new.rs"), "").unwrap();
    fs::create_dir_all(p.join("node_modules/x/.git/hooks")).unwrap();
    fs::create_dir_all(p.join("build/out")).unwrap();
    // Top-level names srt denies whether or not they exist.
    fs::create_dir_all(p.join(".vscode")).unwrap();
    fs::write(p.join(".vscode/settings.json"), "{}").unwrap();
    fs::write(p.join(".bashrc"), "changed content").unwrap();
    assert_eq!(Fingerprint::take(p, &[]), before);
}

/// A change to make to a checkout, and what it is.
type Change<'a> = (&'a str, &'a dyn Fn(&Path));

#[test]
fn what_the_scan_finds_changes_it() {
    let cases: &[Change] = &[
        ("a nested repository", &|p| {
            fs::create_dir_all(p.join("sub/.git/hooks")).unwrap();
            fs::write(p.join("sub/.git/HEAD"), "ref: refs/heads/main").unwrap();
        }),
        ("a hook in a nested repository", &|p| {
            fs::create_dir_all(p.join("sub/.GIT/Hooks")).unwrap();
        }),
        ("shell settings below the top", &|p| {
            fs::write(p.join("src/.profile"), "").unwrap();
        }),
        ("an editor's settings below the top", &|p| {
            fs::create_dir_all(p.join("src/deep/.vscode")).unwrap();
        }),
        ("Claude Code's commands below the top", &|p| {
            fs::create_dir_all(p.join("src/.claude/commands")).unwrap();
        }),
        ("the checkout's .git made a directory", &|p| {
            fs::remove_file(p.join(".git")).unwrap();
            fs::create_dir(p.join(".git")).unwrap();
        }),
        ("a directory the scan cannot read", &|p| {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(p.join("src/deep"), fs::Permissions::from_mode(0o000)).unwrap();
        }),
    ];
    for (what, change) in cases {
        let dir = checkout();
        let p = dir.path();
        let before = Fingerprint::take(p, &[]);
        change(p);
        let after = Fingerprint::take(p, &[]);
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = fs::set_permissions(p.join("src/deep"), fs::Permissions::from_mode(0o755));
        }
        if *what == "a directory the scan cannot read" && rustix::process::geteuid().is_root() {
            // Root reads it all the same; inside the sandbox, without capabilities, it
            // cannot.
            continue;
        }
        assert_ne!(after, before, "{what}");
    }
}

#[test]
fn deeper_than_the_scan_changes_nothing() {
    let dir = checkout();
    let p = dir.path();
    let before = Fingerprint::take(p, &[]);
    fs::write(p.join("src/deep/er/still/.bashrc"), "").unwrap();
    assert_eq!(Fingerprint::take(p, &[]), before, "depth 5: past the scan");
    fs::write(p.join("src/deep/er/.bashrc"), "").unwrap();
    assert_ne!(Fingerprint::take(p, &[]), before, "depth 4: within it");
}

#[test]
fn a_file_made_again_counts() {
    let dir = checkout();
    let p = dir.path();
    fs::create_dir_all(p.join("sub/.git/hooks")).unwrap();
    fs::write(p.join("sub/.git/config"), "").unwrap();
    let before = Fingerprint::take(p, &[]);
    // Kept aside so the new file cannot reuse its inode number.
    fs::rename(p.join("sub/.git/config"), p.join("old-config")).unwrap();
    fs::write(p.join("sub/.git/config"), "").unwrap();
    assert_ne!(Fingerprint::take(p, &[]), before);
}

#[test]
fn a_denied_file_replaced_by_a_rename_counts() {
    let dir = checkout();
    let secrets = tempfile::tempdir().unwrap();
    let secret = secrets.path().join("auth.json");
    let missing = secrets.path().join("later.json");
    fs::write(&secret, "one").unwrap();
    let denies = vec![secret.clone(), missing.clone()];
    let before = Fingerprint::take(dir.path(), &denies);
    fs::write(&secret, "rewritten in place").unwrap();
    assert_eq!(Fingerprint::take(dir.path(), &denies), before);
    let next = secrets.path().join("auth.json.new");
    fs::write(&next, "two").unwrap();
    fs::rename(&next, &secret).unwrap();
    assert_ne!(Fingerprint::take(dir.path(), &denies), before);
    let before = Fingerprint::take(dir.path(), &denies);
    fs::write(&missing, "made during the job").unwrap();
    assert_ne!(Fingerprint::take(dir.path(), &denies), before);
}
