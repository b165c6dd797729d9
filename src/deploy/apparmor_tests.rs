use super::*;

const STORE_BWRAP: &str = "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-bubblewrap-0.11.0/bin/bwrap";

#[test]
fn template_has_one_placeholder_and_attaches_to_the_exact_path() {
    assert_eq!(TEMPLATE.matches(PLACEHOLDER).count(), 1);
    let profile = render(Path::new(STORE_BWRAP)).unwrap();
    assert!(!profile.contains(PLACEHOLDER));
    let header = format!("profile {PROFILE_NAME} {STORE_BWRAP} flags=(");
    assert!(profile.contains(&header), "{profile}");
}

/// The rules that make it a confining profile rather than an `unconfined` one.
fn rules_of<'a>(profile: &'a str, name: &str) -> Vec<&'a str> {
    let start = profile
        .lines()
        .position(|l| l.starts_with(&format!("profile {name} ")))
        .unwrap();
    profile
        .lines()
        .skip(start + 1)
        .take_while(|l| *l != "}")
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

#[test]
fn bwrap_gets_userns_and_its_children_do_not() {
    let profile = render(Path::new(STORE_BWRAP)).unwrap();
    assert!(!profile.contains("unconfined"), "never flags=(unconfined)");
    let bwrap = rules_of(&profile, PROFILE_NAME);
    assert!(bwrap.contains(&"userns,"));
    assert!(bwrap.contains(&"pix /** -> &quest_runner_bwrap//&quest_runner_bwrap_sandbox,"));
    let sandbox = rules_of(&profile, "quest_runner_bwrap_sandbox");
    for denied in ["capability", "userns", "mount"] {
        assert!(
            sandbox.contains(&format!("audit deny {denied},").as_str()),
            "{denied}: {sandbox:?}"
        );
    }
    assert!(!sandbox.iter().any(|r| r.starts_with("dbus")));
}

#[test]
fn paths_apparmor_would_read_as_patterns_are_refused() {
    for path in [
        "bwrap",
        "/nix/store/*/bin/bwrap",
        "/opt/b wrap/bwrap",
        "/opt/{a,b}/bwrap",
        "/opt/@{HOME}/bwrap",
        "/opt/x#y/bwrap",
    ] {
        let err = render(Path::new(path)).unwrap_err();
        assert!(
            matches!(err, DeployError::ProfilePath { .. }),
            "{path}: {err}"
        );
    }
    render(Path::new("/usr/bin/bwrap")).unwrap();
    render(Path::new("/nix/store/abc-gtk+-3/bin/bwrap")).unwrap();
}
