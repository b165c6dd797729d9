use super::*;

struct Fixture {
    _dir: tempfile::TempDir,
    dbs: Databases,
}

/// Databases of the given files; `getent` is the host's real one, which reads the host's
/// databases, so a lookup it answers is told apart from one the fixture's files answer.
fn fixture(passwd: &str, group: &str, nsswitch: &str) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let dbs = Databases {
        passwd: write("passwd", passwd),
        group: write("group", group),
        nsswitch: write("nsswitch.conf", nsswitch),
        getent: Some(binaries::find(Tool::Getent).expect("getent (libc-bin) on PATH")),
    };
    Fixture { _dir: dir, dbs }
}

const PASSWD: &str = "alice:x:1500:1500:Alice:/home/alice:/bin/sh\n+nis::::::\n";
const GROUP: &str = "alice:x:1500:\nwheel:x:10:bob, alice\nempty:x:20:\n";

#[test]
fn the_files_answer_without_asking_anything() {
    let f = fixture(PASSWD, GROUP, "passwd: files\ngroup: files\n");
    let (name, groups) = f.dbs.user_and_groups(1500);
    assert_eq!(name, "alice");
    assert_eq!(groups, ["alice", "wheel"]);
    assert_eq!(f.dbs.group(Key::Name("wheel")).unwrap().members.len(), 2);
    assert_eq!(f.dbs.group(Key::Name("empty")).unwrap().members.len(), 0);
}

#[test]
fn a_user_only_another_source_knows_is_asked_of_getent() {
    // uid 0 is not in the fixture's passwd; the host's getent knows it as root. With
    // `files` alone it stays a number, so the answer below comes from getent.
    let files_only = fixture(PASSWD, GROUP, "passwd: files\ngroup: files\n");
    assert_eq!(files_only.dbs.user_and_groups(0).0, "0");
    let f = fixture(
        PASSWD,
        GROUP,
        "passwd: files systemd\ngroup: files systemd\n",
    );
    let (name, groups) = f.dbs.user_and_groups(0);
    assert_eq!(name, "root");
    assert_eq!(
        groups.first().map(String::as_str),
        Some("root"),
        "{groups:?}"
    );
    assert!(f.dbs.group(Key::Name("root")).is_some());
    assert!(f.dbs.group(Key::Name("no-such-group-qr")).is_none());
}

#[test]
fn no_getent_means_numbers_not_a_failure() {
    let mut f = fixture("", "", "passwd: files sss\ngroup: files sss\n");
    f.dbs.getent = None;
    assert_eq!(f.dbs.user_and_groups(0), ("0".to_string(), Vec::new()));
}

#[test]
fn missing_files_are_empty_databases() {
    let mut f = fixture("", "", "");
    f.dbs.passwd = PathBuf::from("/nonexistent/passwd");
    f.dbs.nsswitch = PathBuf::from("/nonexistent/nsswitch.conf");
    assert_eq!(f.dbs.user_and_groups(1500).0, "1500");
}

#[test]
fn nsswitch_lines_are_read_as_glibc_reads_them() {
    let conf = "# passwd: files ldap\npasswd:   files   # systemd\n\
                group: files [SUCCESS=merge] [NOTFOUND=return ] files\n\
                hosts: files dns\nshadow: compat\n";
    assert!(!names_other_sources(conf, "passwd"));
    assert!(!names_other_sources(conf, "group"));
    assert!(names_other_sources(conf, "hosts"));
    assert!(names_other_sources(conf, "shadow"));
    assert!(!names_other_sources(conf, "netgroup"));
    assert!(names_other_sources("group: files systemd", "group"));
}

#[test]
fn entries_parse_and_nis_lines_do_not() {
    assert_eq!(
        parse_passwd("bob:x:7:8::/:/bin/false"),
        Some(User {
            name: "bob".into(),
            uid: 7,
            gid: 8
        })
    );
    assert_eq!(parse_passwd("+bob::::::"), None);
    assert_eq!(parse_passwd("bob:x:seven:8::/:"), None);
    assert_eq!(parse_group("g:x:9").unwrap().members, Vec::<String>::new());
    assert_eq!(parse_group("g:x:9:a,,b").unwrap().members, ["a", "b"]);
}
