use super::*;

#[test]
fn transports_are_told_as_git_tells_them() {
    assert_eq!(
        Transport::of("git@github.com:o/r.git"),
        Some(Transport::Ssh)
    );
    assert_eq!(Transport::of("ssh://git@h/o/r"), Some(Transport::Ssh));
    assert_eq!(Transport::of("https://h/o/r.git"), Some(Transport::Https));
    assert_eq!(Transport::of("git://127.0.0.1:9/r"), Some(Transport::Git));
    assert_eq!(Transport::of("/srv/git/r"), Some(Transport::File));
    assert_eq!(Transport::of("ext::sh -c x"), None);
    assert_eq!(Transport::of("rel/path"), None);
}

#[test]
fn a_token_in_the_url_is_not_recorded() {
    assert_eq!(redacted("https://u:tok@h/o/r"), "https://***@h/o/r");
    assert_eq!(redacted("https://h/o/r@x"), "https://h/o/r@x");
    assert_eq!(redacted("git@h:o/r"), "git@h:o/r");
}

#[test]
fn the_credential_file_is_named_never_read_here() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "s3cr3t-token\n").unwrap();
    for t in [Transport::Https, Transport::Ssh] {
        let a = access(t, Some(&file), "x-access-token");
        let all = format!("{:?}{:?}", a.config, a.env);
        assert!(!all.contains("s3cr3t"), "{all}");
        assert!(all.contains(&*file.to_string_lossy()), "{all}");
    }
}

/// The helper as git runs it: `git credential fill` asks, and the token comes from the file.
#[test]
fn the_helper_hands_git_the_token_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("it's a token");
    std::fs::write(&file, "s3cr3t-token\n").unwrap();
    let a = access(Transport::Https, Some(&file), "bot");
    let mut cmd =
        std::process::Command::new(crate::binaries::find(crate::binaries::Tool::Git).unwrap());
    cmd.env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0");
    for setting in &a.config {
        cmd.args(["-c", setting]);
    }
    let mut child = cmd
        .args(["credential", "fill"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"protocol=https\nhost=git.example.org\n\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("username=bot\n"), "{stdout}");
    assert!(stdout.contains("password=s3cr3t-token\n"), "{stdout}");
}
