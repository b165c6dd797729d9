use super::*;

const STORE_BWRAP: &str = "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-bubblewrap-0.11.0/bin/bwrap";
const SECCOMP: &str =
    "/opt/npm/lib/node_modules/@anthropic-ai/sandbox-runtime/vendor/seccomp/x64/apply-seccomp";

const NIX_DAEMON: &str = "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-nix-2.28.0/bin/nix";

fn programs(bwrap: &str, seccomp: &str) -> Programs {
    Programs {
        bwrap: bwrap.into(),
        apply_seccomp: seccomp.into(),
        nix_daemon: NIX_DAEMON.into(),
    }
}

fn render_store() -> String {
    render(&programs(STORE_BWRAP, SECCOMP)).unwrap()
}

#[test]
fn template_attaches_to_the_exact_path_and_names_it_in_the_nesting_rules() {
    // The attachment, and the exec rules of the job's namespace and of bwrap itself.
    assert_eq!(TEMPLATE.matches(PLACEHOLDER).count(), 3);
    let profile = render_store();
    assert!(!profile.contains(PLACEHOLDER));
    assert!(!profile.contains(SECCOMP_PLACEHOLDER));
    assert!(!profile.contains(NIX_DAEMON_PLACEHOLDER));
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
    let profile = render_store();
    assert!(!profile.contains("unconfined"), "never flags=(unconfined)");
    let nested = format!("px {STORE_BWRAP} -> quest_runner_bwrap//&quest_runner_bwrap_nested,");
    let bwrap = rules_of(&profile, PROFILE_NAME);
    assert!(bwrap.contains(&"userns,"));
    assert!(bwrap.contains(&nested.as_str()), "{bwrap:?}");
    assert!(bwrap.contains(&"pix /** -> quest_runner_bwrap//&quest_runner_bwrap_agent,"));
    // The job's namespace: no userns of its own, only this bwrap and srt's seccomp helper, by
    // their exact paths.
    let seccomp = format!("px {SECCOMP} -> quest_runner_bwrap//&quest_runner_bwrap_seccomp,");
    let agent = rules_of(&profile, "quest_runner_bwrap_agent");
    assert!(agent.contains(&nested.as_str()), "{agent:?}");
    let daemon = format!("px {NIX_DAEMON} -> quest_runner_bwrap//&quest_runner_nix_daemon,");
    assert!(agent.contains(&daemon.as_str()), "{agent:?}");
    assert!(!agent
        .iter()
        .any(|r| r.contains("->") && *r != nested && *r != seccomp && *r != daemon));
    // Every profile a task running the helper may hold sends it to the helper's profile (the
    // new label is the union of each profile's transition).
    for name in [
        PROFILE_NAME,
        "quest_runner_bwrap_agent",
        "quest_runner_bwrap_nested",
        "quest_runner_bwrap_sandbox",
    ] {
        assert!(
            rules_of(&profile, name).contains(&seccomp.as_str()),
            "{name}"
        );
    }
    // The devShell's nix-daemon may build in Nix's sandbox; its builders are commands.
    assert!(bwrap.contains(&daemon.as_str()), "{bwrap:?}");
    let nix = rules_of(&profile, "quest_runner_nix_daemon");
    assert!(nix.contains(&"userns,") && nix.contains(&"capability,"));
    assert!(nix.contains(&"pix /** -> quest_runner_bwrap//&quest_runner_bwrap_sandbox,"));
    // The helper may make namespaces; what it runs is a command again.
    let helper = rules_of(&profile, "quest_runner_bwrap_seccomp");
    assert!(helper.contains(&"userns,"));
    assert!(helper.contains(&"pix /** -> quest_runner_bwrap//&quest_runner_bwrap_sandbox,"));
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
        let err = render(&programs(path, SECCOMP)).unwrap_err();
        assert!(
            matches!(err, DeployError::ProfilePath { .. }),
            "{path}: {err}"
        );
    }
    render(&programs("/usr/bin/bwrap", SECCOMP)).unwrap();
    render(&programs("/nix/store/abc-gtk+-3/bin/bwrap", SECCOMP)).unwrap();
    let err = render(&programs("/usr/bin/bwrap", "/opt/@{x}/apply-seccomp")).unwrap_err();
    assert!(matches!(err, DeployError::ProfilePath { .. }), "{err}");
}
