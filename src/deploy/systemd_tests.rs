use super::*;

fn params() -> UnitParams {
    UnitParams {
        exec: PathBuf::from("/nix/store/abc-quest-runner-0.1.0/bin/quest-runner"),
        user: "quest-runner".into(),
        group: "quest-runner".into(),
        environment_file: None,
    }
}

/// The `[Service]` lines of a rendered unit, comments dropped.
fn service_lines(unit: &str) -> Vec<&str> {
    unit.split("\n[")
        .find(|s| s.starts_with("Service]"))
        .unwrap()
        .lines()
        .skip(1)
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect()
}

fn values<'a>(lines: &[&'a str], key: &str) -> Vec<&'a str> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
        .collect()
}

#[test]
fn shipped_settings_parse_and_every_relaxation_says_why() {
    let s = settings().unwrap();
    assert!(!s.service.is_empty());
    for setting in &s.service {
        let relaxed = matches!(setting.value, Value::Bool(false))
            || [
                "SystemCallFilter",
                "RestrictNamespaces",
                "RestrictAddressFamilies",
            ]
            .contains(&setting.key.as_str());
        if relaxed {
            assert!(setting.why.is_some(), "{} needs a why", setting.key);
        }
    }
    let mut keys: Vec<_> = s.service.iter().map(|s| s.key.as_str()).collect();
    keys.sort_unstable();
    let before = keys.len();
    keys.dedup();
    assert_eq!(
        before,
        keys.len(),
        "a key set twice would be set twice in the unit"
    );
}

#[test]
fn unit_runs_serve_with_the_required_settings() {
    let unit = render(&params()).unwrap();
    let lines = service_lines(&unit);
    let one = |key: &str| {
        let v = values(&lines, key);
        assert_eq!(v.len(), 1, "{key}: {v:?}");
        v[0]
    };
    assert_eq!(
        one("ExecStart"),
        "/nix/store/abc-quest-runner-0.1.0/bin/quest-runner serve"
    );
    assert_eq!(one("ExecReload"), "/bin/kill -HUP $MAINPID");
    assert_eq!(one("User"), "quest-runner");
    assert_eq!(one("Type"), "notify");
    assert_eq!(one("NotifyAccess"), "main");
    assert_eq!(one("WatchdogSec"), "60s");
    assert_eq!(one("KillMode"), "mixed");
    assert_eq!(one("TimeoutStopSec"), "15");
    assert_eq!(one("Delegate"), "true");
    assert_eq!(one("PrivateTmp"), "true");
    assert_eq!(one("ProtectSystem"), "strict");
    assert_eq!(one("ProtectHome"), "true");
    assert_eq!(one("NoNewPrivileges"), "true");
    assert_eq!(one("CapabilityBoundingSet"), "");
    assert_eq!(one("StateDirectory"), "quest-runner");
    assert_eq!(one("RuntimeDirectory"), "quest-runner");
    assert_eq!(one("LogsDirectory"), "quest-runner");
    let env = values(&lines, "Environment");
    assert!(
        env.contains(&"QUEST_RUNNER_STATE_DIR=%S/quest-runner"),
        "{env:?}"
    );
    assert!(
        unit.contains("\n[Install]\nWantedBy=multi-user.target\n"),
        "{unit}"
    );
}

#[test]
fn hardening_leaves_bwrap_what_it_needs() {
    let unit = render(&params()).unwrap();
    let lines = service_lines(&unit);
    // Namespaces: every kind a sandbox creates stays allowed.
    let ns = values(&lines, "RestrictNamespaces");
    assert_eq!(ns.len(), 1);
    for kind in ["user", "mnt", "pid", "net"] {
        assert!(
            ns[0].split(' ').any(|k| k == kind),
            "{kind} refused: {ns:?}"
        );
    }
    // Mount syscalls, and no blanket ~@privileged (it takes capset and pivot_root).
    let filter = values(&lines, "SystemCallFilter");
    assert!(filter.contains(&"@mount"), "{filter:?}");
    assert!(!filter
        .iter()
        .any(|f| f.contains("~@privileged") || f.contains("~@mount")));
    // Settings that break bwrap's fresh /proc or its user namespaces are off.
    for (key, forbidden) in [
        ("PrivateUsers", "true"),
        ("ProtectProc", "invisible"),
        ("ProtectKernelTunables", "true"),
        ("ProtectKernelLogs", "true"),
        ("ProcSubset", "pid"),
    ] {
        assert!(
            !values(&lines, key).contains(&forbidden),
            "{key}={forbidden}"
        );
    }
    assert!(values(&lines, "RestrictAddressFamilies").contains(&"AF_NETLINK"));
}

#[test]
fn reasons_are_written_as_comments() {
    let unit = render(&params()).unwrap();
    let why = unit
        .lines()
        .position(|l| l.starts_with("# Relaxed: the runner must keep its real uid"))
        .unwrap();
    let next_setting = unit.lines().skip(why).find(|l| !l.starts_with('#'));
    assert_eq!(next_setting, Some("PrivateUsers=false"));
    assert!(unit.lines().all(|l| l.len() <= 100), "{unit}");
}

#[test]
fn environment_file_and_group_are_written() {
    let mut p = params();
    p.group = "agents".into();
    p.environment_file = Some(PathBuf::from("/etc/quest-runner/env"));
    let unit = render(&p).unwrap();
    let lines = service_lines(&unit);
    assert_eq!(values(&lines, "Group"), ["agents"]);
    assert_eq!(values(&lines, "EnvironmentFile"), ["/etc/quest-runner/env"]);
}

#[test]
fn values_systemd_would_interpret_are_refused() {
    for exec in [
        "relative/quest-runner",
        "/opt/my runner/quest-runner",
        "/opt/100%/quest-runner",
        "/opt/$HOME/quest-runner",
    ] {
        let mut p = params();
        p.exec = PathBuf::from(exec);
        let err = render(&p).unwrap_err();
        assert!(
            matches!(err, DeployError::UnitValue { .. }),
            "{exec}: {err}"
        );
    }
    for user in ["", "-x", "a b", "root;x"] {
        let mut p = params();
        p.user = user.into();
        assert!(render(&p).is_err(), "{user:?}");
    }
}

#[test]
fn values_render_like_nixos() {
    assert_eq!(Value::Bool(true).lines(), ["true"]);
    assert_eq!(Value::Int(15).lines(), ["15"]);
    assert_eq!(Value::Text(String::new()).lines(), [""]);
    assert_eq!(
        Value::List(vec!["a".into(), "b".into()]).lines(),
        ["a", "b"]
    );
}

/// A list is one line per item, so a drop-in's line for the same key is added to it (systemd
/// merges repeated list assignments); the header says so, and how to replace one instead.
#[test]
fn drop_in_lines_extend_the_shipped_lists() {
    let unit = render(&params()).unwrap();
    let lines = service_lines(&unit);
    assert_eq!(
        values(&lines, "SystemCallFilter"),
        [
            "@system-service",
            "@mount",
            "seccomp",
            "sethostname",
            "setdomainname"
        ]
    );
    assert_eq!(
        values(&lines, "RestrictAddressFamilies"),
        ["AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"]
    );
    // An empty set: a drop-in's CapabilityBoundingSet=CAP_X after it is the whole set.
    assert_eq!(values(&lines, "CapabilityBoundingSet"), [""]);
    assert_eq!(values(&lines, "AmbientCapabilities"), [""]);
    assert!(unit.contains("`SystemCallFilter=~@clock`"), "{unit}");
    assert!(unit.contains("(`SystemCallFilter=`) replaces"), "{unit}");
}
