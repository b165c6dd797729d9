use super::*;

fn config(namespace: &str, branch: &str) -> PushConfig {
    PushConfig {
        remote: None,
        namespace: namespace.into(),
        branch: branch.into(),
        credential_file: None,
        username: None,
        untrusted: false,
    }
}

#[test]
fn the_branch_is_under_the_namespace() {
    let c = config("quest", "{job}");
    c.check("push.r").unwrap();
    assert_eq!(c.branch_ref("j1").unwrap(), "refs/heads/quest/j1");
    let c = config("bots/quest", "job-{job}/work");
    c.check("push.r").unwrap();
    assert_eq!(
        c.branch_ref("j1").unwrap(),
        "refs/heads/bots/quest/job-j1/work"
    );
}

#[test]
fn templates_that_leave_the_namespace_are_refused() {
    for (ns, branch, field) in [
        ("quest", "../main", "push.r.branch"),
        ("quest", "/{job}", "push.r.branch"),
        ("quest", "{job}/../../main", "push.r.branch"),
        ("quest", "main", "push.r.branch"),
        ("quest", "{job}.lock", "push.r.branch"),
        // `j.lo` is a job id: its branch would end in `.lock`.
        ("quest", "{job}ck", "push.r.branch"),
        ("quest", "{job}{x}", "push.r.branch"),
        ("", "{job}", "push.r.namespace"),
        ("../tags", "{job}", "push.r.namespace"),
        ("-x", "{job}", "push.r.namespace"),
        ("quest/", "{job}", "push.r.namespace"),
    ] {
        let err = config(ns, branch).check("push.r").unwrap_err();
        assert_eq!(err.field, field, "{ns:?} {branch:?}: {err}");
    }
}

#[test]
fn a_repository_is_found_by_its_exact_url_only() {
    let push = BTreeMap::from([
        (
            "https://example.org/a/b.git".to_string(),
            config("one", "{job}"),
        ),
        ("c".to_string(), config("two", "{job}")),
    ]);
    assert_eq!(
        for_repo(&push, "https://example.org/a/b.git")
            .unwrap()
            .namespace,
        "one"
    );
    // A job naming another host's repository of the same name gets no push (nor its
    // credential).
    assert!(for_repo(&push, "https://elsewhere.example/a/b.git").is_none());
    assert!(for_repo(&push, "git@example.org:x/c.git").is_none());
    assert!(for_repo(&push, "https://example.org/a/d.git").is_none());
}
