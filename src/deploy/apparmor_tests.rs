use super::*;

const STORE_BWRAP: &str = "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-bubblewrap-0.11.0/bin/bwrap";

#[test]
fn template_attaches_to_the_exact_path_and_names_it_in_the_nesting_rules() {
    // The attachment, and the exec rules of the job's namespace and of bwrap itself.
    assert_eq!(TEMPLATE.matches(PLACEHOLDER).count(), 3);
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
    let nested = format!("px {STORE_BWRAP} -> quest_runner_bwrap//&quest_runner_bwrap_nested,");
    let bwrap = rules_of(&profile, PROFILE_NAME);
    assert!(bwrap.contains(&"userns,"));
    assert!(bwrap.contains(&nested.as_str()), "{bwrap:?}");
    assert!(bwrap.contains(&"pix /** -> quest_runner_bwrap//&quest_runner_bwrap_agent,"));
    // The job's namespace: no userns of its own, only this bwrap, by its exact path.
    let agent = rules_of(&profile, "quest_runner_bwrap_agent");
    assert!(agent.contains(&nested.as_str()), "{agent:?}");
    assert!(!agent.iter().any(|r| r.contains("->") && *r != nested));
    // The inner bwrap: userns, and its commands stacked with the sandbox profile.
    let inner = rules_of(&profile, "quest_runner_bwrap_nested");
    assert!(inner.contains(&"userns,"));
    assert!(inner.contains(&"pix /** -> quest_runner_bwrap//&quest_runner_bwrap_sandbox,"));
    let sandbox = rules_of(&profile, "quest_runner_bwrap_sandbox");
    assert!(sandbox.contains(&"pix /** -> &quest_runner_bwrap_sandbox,"));
    for confined in [&agent, &sandbox] {
        for denied in ["capability", "userns", "mount"] {
            assert!(
                confined.contains(&format!("audit deny {denied},").as_str()),
                "{denied}: {confined:?}"
            );
        }
        assert!(!confined.iter().any(|r| r.starts_with("dbus")));
    }
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
