use super::*;
use crate::preflight::Status;

fn facts(uid: u32, config: &[(&str, &str)]) -> Facts {
    Facts {
        uid,
        user: if uid == 0 {
            "root".into()
        } else {
            "svc".into()
        },
        groups: vec!["svc".into()],
        version: Ok("2.8.0".into()),
        config: config
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        state_dir: "/nix/var/nix".into(),
        state_dir_exists: true,
        state_dir_writable: uid == 0,
        socket: "/nix/var/nix/daemon-socket/socket".into(),
        socket_exists: false,
        ping: None,
        build_group_members: Some(10),
    }
}

fn named<'a>(checks: &'a [Check], name: &str) -> &'a Check {
    checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no check {name}: {checks:?}"))
}

const STOCK: &[(&str, &str)] = &[("build-users-group", "nixbld"), ("sandbox", "true")];

#[test]
fn root_with_build_users_and_the_sandbox_passes() {
    let checks = checks(&facts(0, STOCK));
    assert!(checks.iter().all(|c| c.status == Status::Ok), "{checks:?}");
    assert!(named(&checks, "nix store").detail.contains("single-user"));
}

#[test]
fn a_missing_or_empty_build_users_group_fails_with_its_fix() {
    let mut f = facts(0, STOCK);
    f.build_group_members = None;
    let c = named(&checks(&f), "nix build users").clone();
    assert!(!c.passed());
    assert!(c.detail.contains("group nixbld does not exist"), "{c:?}");
    assert!(c.fix.unwrap().contains("groupadd --system nixbld"));

    f.build_group_members = Some(0);
    let c = named(&checks(&f), "nix build users").clone();
    assert!(!c.passed() && c.detail.contains("no members"), "{c:?}");

    // An empty build-users-group builds as root: nothing to make.
    let f = facts(0, &[("build-users-group", ""), ("sandbox", "true")]);
    assert!(named(&checks(&f), "nix build users").passed());
}

#[test]
fn build_users_are_the_daemons_business() {
    let mut f = facts(1000, STOCK);
    f.socket_exists = true;
    f.ping = Some(Ok(()));
    f.build_group_members = None;
    let checks = checks(&f);
    assert!(checks.iter().all(|c| c.name != "nix build users"));
    assert!(checks.iter().all(|c| c.passed()), "{checks:?}");
    assert!(named(&checks, "nix store").detail.contains("nix-daemon at"));
}

#[test]
fn a_user_without_store_access_or_daemon_is_told_both_ways_out() {
    let c = named(&checks(&facts(1000, STOCK)), "nix store").clone();
    assert!(!c.passed());
    assert!(
        c.detail
            .contains("svc (uid 1000) cannot write the Nix store"),
        "{c:?}"
    );
    assert!(
        c.detail.contains("/nix/var/nix/daemon-socket/socket"),
        "{c:?}"
    );
    let fix = c.fix.unwrap();
    assert!(fix.contains("root") && fix.contains("nix-daemon"), "{fix}");
}

#[test]
fn root_opens_the_local_store_before_nix_made_it() {
    // A fresh nix-bin: /nix/var/nix appears on root's first nix run.
    let mut f = facts(0, STOCK);
    f.state_dir_exists = false;
    f.state_dir_writable = false;
    assert_eq!(f.store(), Store::Local);
    assert!(checks(&f).iter().all(|c| c.passed()), "{:?}", checks(&f));
}

#[test]
fn a_user_without_nix_dirs_would_get_a_chroot_store_the_sandbox_cannot_see() {
    let mut f = facts(1000, STOCK);
    f.state_dir_exists = false;
    assert_eq!(f.store(), Store::Chroot);
    let c = named(&checks(&f), "nix store").clone();
    assert!(
        !c.passed() && c.detail.contains("~/.local/share/nix/root"),
        "{c:?}"
    );
    // A daemon's socket wins, as in Nix.
    f.socket_exists = true;
    assert_eq!(f.store(), Store::Daemon(f.socket.clone()));
}

#[test]
fn a_daemon_that_refuses_the_user_names_allowed_users() {
    let mut f = facts(
        1000,
        &[("allowed-users", "root @wheel"), ("sandbox", "true")],
    );
    f.socket_exists = true;
    f.ping = Some(Err("unexpected end-of-file".into()));
    let c = named(&checks(&f), "nix store").clone();
    assert!(!c.passed());
    assert!(c.detail.contains("refused svc"), "{c:?}");
    assert!(
        c.detail
            .contains("allowed-users = root @wheel does not name svc"),
        "{c:?}"
    );
    assert!(c.fix.unwrap().contains("allowed-users"));

    // A group the user is in counts.
    f.config.insert("allowed-users".into(), "@svc".into());
    let c = named(&checks(&f), "nix store").clone();
    assert!(!c.detail.contains("does not name"), "{c:?}");
}

#[test]
fn a_daemon_that_is_not_running_is_told_to_start() {
    let mut f = facts(1000, STOCK);
    f.socket_exists = true;
    f.ping = Some(Err(
        "cannot connect to socket at '/nix/var/nix/daemon-socket/socket': Connection refused"
            .into(),
    ));
    let c = named(&checks(&f), "nix store").clone();
    assert!(!c.passed(), "{c:?}");
    assert!(c.fix.unwrap().contains("start nix-daemon"));
}

#[test]
fn the_store_setting_and_a_unix_socket_are_followed() {
    let mut f = facts(0, &[("store", "daemon")]);
    assert_eq!(f.store(), Store::Daemon(f.socket.clone()));
    f.config
        .insert("store".into(), "unix:///run/qr/socket".into());
    assert_eq!(f.store(), Store::Daemon("/run/qr/socket".into()));
    f.config.insert("store".into(), "ssh://builder".into());
    assert_eq!(f.store(), Store::Other("ssh://builder".into()));
}

#[test]
fn the_sandbox_off_is_a_warning_that_says_what_it_means() {
    let checks = checks(&facts(
        0,
        &[("build-users-group", "nixbld"), ("sandbox", "false")],
    ));
    let c = named(&checks, "nix build sandbox");
    assert!(c.status == Status::Warn, "{c:?}");
    assert!(c.detail.contains("runner's rights"), "{c:?}");
    assert!(c.fix.as_ref().unwrap().contains("sandbox = true"));
}

#[test]
fn nix_without_flakes_fails() {
    let mut f = facts(0, STOCK);
    f.version = Ok("2.3.16".into());
    let c = named(&checks(&f), "nix flakes").clone();
    assert!(!c.passed() && c.detail.contains("2.3.16"), "{c:?}");
    f.version = Err("nix not found".into());
    assert!(!named(&checks(&f), "nix flakes").passed());
}

#[test]
fn the_host_is_described_without_failing() {
    // On the test host: whatever its setup, gathering works and names this user.
    let f = Facts::gather();
    assert!(!f.user.is_empty());
    assert!(!checks(&f).is_empty());
}
