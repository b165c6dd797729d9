use super::*;
use crate::job::Trust;
use crate::sandbox::{plan as plan_policy, Platform, PolicyInputs};
use crate::workspace::WorkspacePaths;

fn policy(root: &Path) -> SandboxPolicy {
    let ws = WorkspacePaths {
        checkout: root.join("state/jobs/j1/checkout"),
        bare_clone: root.join("state/repos/r.git"),
        git_store: root.join("state/jobs/j1/git"),
        worktree_admin: root.join("state/jobs/j1/git/worktrees/checkout"),
        temp_dir: root.join("tmp/quest-job-abc"),
        job_dir: root.join("state/jobs/j1/runner"),
        helper_tmp: root.join("tmp/quest-srt-abc"),
        devshell_script: None,
    };
    plan_policy(
        &ws,
        &PolicyInputs {
            platform: Platform::Linux,
            trust: Trust::Untrusted,
            extra_hosts: vec![],
            full_access_hosts: vec![],
            dependency_hosts: Vec::new(),
            state_dir: root.join("state"),
            operator_home: None,
            private: vec![],
        },
    )
}

fn tools() -> Tools {
    Tools {
        bwrap: "/usr/bin/bwrap".into(),
        setpriv: "/usr/bin/setpriv".into(),
    }
}

/// The index of the first `option path` pair for `path`.
fn at(args: &[String], option: &str, path: &Path) -> usize {
    let p = path.to_string_lossy();
    args.windows(2)
        .position(|w| w[0] == option && w[1] == p)
        .unwrap_or_else(|| panic!("{option} {p} in {args:?}"))
}

#[test]
fn denied_trees_are_hidden_before_the_workspace_is_bound_back() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    for d in [
        "state/jobs/j1/checkout",
        "state/jobs/j1/runner/claude",
        "tmp/quest-job-abc",
    ] {
        std::fs::create_dir_all(r.join(d)).unwrap();
    }
    let policy = policy(r);
    let own = OwnFiles {
        read: vec![r.join("state/jobs/j1/runner")],
        write: vec![r.join("state/jobs/j1/runner/claude")],
        read_only: vec![r.join("state/jobs/j1/runner/claude/settings.json")],
    };
    let args = namespace_args(&policy, &own, None);
    // The state dir is in the temp dir here, hidden with all of `/tmp`.
    let hidden = at(&args, "--tmpfs", Path::new("/tmp"));
    let runner = at(&args, "--ro-bind-try", &r.join("state/jobs/j1/runner"));
    let checkout = at(&args, "--bind-try", &r.join("state/jobs/j1/checkout"));
    let config = at(&args, "--bind-try", &r.join("state/jobs/j1/runner/claude"));
    let settings = at(
        &args,
        "--ro-bind-try",
        &r.join("state/jobs/j1/runner/claude/settings.json"),
    );
    assert!(hidden < runner && runner < config && config < settings);
    assert!(hidden < checkout);
    // The system's private places go whatever the job: /root and /home are directories here.
    assert!(args.windows(2).any(|w| w == ["--tmpfs", "/root"]));
    for ns in ["--unshare-user", "--unshare-pid", "--die-with-parent"] {
        assert!(args.iter().any(|a| a == ns), "{ns}");
    }
    // The network is the plan's to add (with its bridges), never all namespaces at once.
    assert!(!args
        .iter()
        .any(|a| a == "--unshare-all" || a == "--unshare-net"));
}

#[test]
fn no_bind_is_made_where_another_of_its_step_or_a_later_write_shows_the_same_files() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let policy = policy(r);
    let runner = r.join("state/jobs/j1/runner");
    let own = OwnFiles {
        // The runner's dir and a file inside it; the checkout, also written below.
        read: vec![
            runner.join("devshell.sh"),
            runner.clone(),
            policy.checkout.clone(),
        ],
        write: vec![runner.join("claude"), runner.join("claude/projects")],
        read_only: vec![runner.join("claude/a"), runner.join("claude/a/b")],
    };
    let args = namespace_args(&policy, &own, None);
    let count = |option: &str, path: &Path| {
        let p = path.to_string_lossy();
        args.windows(3)
            .filter(|w| w[0] == option && w[1] == p && w[2] == p)
            .count()
    };
    assert_eq!(count("--ro-bind-try", &runner), 1);
    assert_eq!(count("--ro-bind-try", &runner.join("devshell.sh")), 0);
    // Read, then written: the write alone.
    assert_eq!(count("--ro-bind-try", &policy.checkout), 0);
    assert_eq!(count("--bind-try", &policy.checkout), 1);
    assert_eq!(count("--bind-try", &runner.join("claude")), 1);
    assert_eq!(count("--bind-try", &runner.join("claude/projects")), 0);
    // Read-only inside a written tree stays, once per outermost path.
    assert_eq!(count("--ro-bind-try", &runner.join("claude/a")), 1);
    assert_eq!(count("--ro-bind-try", &runner.join("claude/a/b")), 0);
}

/// A denied write outside every writable tree is bound nowhere: it is read-only under `/`
/// already, or hidden, and a bind would show the host's files again (srt's `/tmp/claude`
/// under the hidden `/tmp`). Inside a writable tree it is bound read-only.
#[test]
fn a_denied_write_is_bound_only_inside_a_writable_tree() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let mut policy = policy(r);
    let inside = policy.checkout.join(".mcp.json");
    let hidden = std::path::PathBuf::from(crate::sandbox::policy::SRT_SHARED_TMP);
    let system = std::path::PathBuf::from("/usr/share/qr-denied");
    policy.deny_write = vec![inside.clone(), hidden.clone(), system.clone()];
    let args = namespace_args(&policy, &OwnFiles::default(), None);
    let bound = |path: &Path| {
        let p = path.to_string_lossy();
        args.windows(3)
            .any(|w| w[0].ends_with("bind-try") && w[1] == p && w[2] == p)
    };
    assert!(bound(&inside), "{args:?}");
    assert!(!bound(&hidden) && !bound(&system), "{args:?}");
}

#[test]
fn a_root_runner_starts_the_namespace_as_the_agent_identity() {
    let root = tempfile::tempdir().unwrap();
    let policy = policy(root.path());
    let passwd = root.path().join("passwd");
    let confined = plan(
        &policy,
        &OwnFiles::default(),
        Identity::Agent,
        Some(&passwd),
        &tools(),
        (Path::new("/co"), None),
    );
    assert_eq!(confined.program, PathBuf::from("/usr/bin/setpriv"));
    let args = confined.args(Path::new("/bin/agent"), &["-p".to_string()]);
    let id = AGENT_ID.to_string();
    assert_eq!(
        args[..9],
        [
            "--reuid",
            &id,
            "--regid",
            &id,
            "--clear-groups",
            "--pdeathsig",
            "KILL",
            "--",
            "/usr/bin/bwrap"
        ]
    );
    let tail = &args[args.len() - 5..];
    assert_eq!(tail, ["--chdir", "/co", "--", "/bin/agent", "-p"]);
    let passwd_at = at(&args, "--ro-bind", &passwd);
    assert_eq!(args[passwd_at + 2], "/etc/passwd");
    assert!(confined.sources().contains(&passwd));
    // The agent's own arguments are not the namespace's: a `--bind` among them is no source.
    let hostile = confined.args(Path::new("/bin/agent"), &["--bind".into(), "/etc".into()]);
    assert_eq!(hostile.len(), args.len() + 1);
    assert!(!confined.sources().contains(&PathBuf::from("/etc")));

    let as_runner = plan(
        &policy,
        &OwnFiles::default(),
        Identity::Runner,
        None,
        &tools(),
        (Path::new("/co"), None),
    );
    assert_eq!(as_runner.program, PathBuf::from("/usr/bin/bwrap"));
    assert_eq!(as_runner.prefix[0], "--unshare-user");
}

#[test]
fn a_bridged_network_starts_the_agent_through_the_bridge() {
    let root = tempfile::tempdir().unwrap();
    let policy = policy(root.path());
    let bridge = NetBridge {
        runner: "/bin/quest-runner".into(),
        dir: "/state/jobs/j1/runner/net".into(),
        ports: vec![4000, 4001],
        owner: Some(AGENT_ID),
    };
    let confined = plan(
        &policy,
        &OwnFiles::default(),
        Identity::Runner,
        None,
        &tools(),
        (Path::new("/co"), Some(&bridge)),
    );
    let args = confined.args(Path::new("/bin/agent"), &["-p".to_string()]);
    let chdir = args.iter().position(|a| a == "--chdir").unwrap();
    assert!(args[..chdir].iter().any(|a| a == "--unshare-net"));
    assert_eq!(
        args[chdir..],
        [
            "--chdir",
            "/co",
            "--",
            "/bin/quest-runner",
            crate::agentnet::FLAG,
            "inside",
            "/state/jobs/j1/runner/net",
            "4000,4001",
            "--",
            "/bin/agent",
            "-p"
        ]
    );
    // Without ports the namespace's network is loopback alone, and no bridge starts.
    let none = NetBridge {
        ports: vec![],
        ..bridge
    };
    let alone = plan(
        &policy,
        &OwnFiles::default(),
        Identity::Runner,
        None,
        &tools(),
        (Path::new("/co"), Some(&none)),
    );
    assert!(alone.prefix.iter().any(|a| a == "--unshare-net"));
    assert!(!alone.prefix.iter().any(|a| a == crate::agentnet::FLAG));
}
