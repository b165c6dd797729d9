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
