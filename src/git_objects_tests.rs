use super::*;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t", "-C"])
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn finds_loose_and_packed_objects_and_refuses_others() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    git(&work, &["init", "-q"]);
    std::fs::write(work.join("a"), "a").unwrap();
    git(&work, &["add", "a"]);
    git(&work, &["commit", "-qm", "one"]);
    let first = git(&work, &["rev-parse", "HEAD"]);
    let dot_git = git_dir(&work).unwrap();
    assert!(has_object(&dot_git, &first).unwrap(), "loose");

    let bare = dir.path().join("bare");
    git(
        dir.path(),
        &["clone", "-q", "--bare", work.to_str().unwrap(), "bare"],
    );
    assert_eq!(git_dir(&bare).unwrap(), bare);
    git(&bare, &["repack", "-adq"]);
    assert!(has_object(&bare, &first).unwrap(), "packed");
    let absent = "0123456789abcdef0123456789abcdef01234567";
    assert!(!has_object(&bare, absent).unwrap());
    assert!(git_dir(dir.path()).is_none());
}
