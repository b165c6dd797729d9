use super::*;

const REV: &str = "0123456789abcdef0123456789abcdef01234567";

fn spec() -> serde_json::Value {
    serde_json::json!({
        "repo": "https://example.org/r.git",
        "rev": REV,
        "trust": "trusted",
        "agent": "claude",
        "account": "main",
        "prompt": "fix the bug",
    })
}

fn parse(v: serde_json::Value) -> Result<Job, JobError> {
    JobSpec::from_json(&v.to_string())?.validate(Duration::from_secs(3600))
}

fn error_with(mut v: serde_json::Value, key: &str, value: serde_json::Value) -> String {
    v[key] = value;
    parse(v).unwrap_err().to_string()
}

#[test]
fn a_good_job_parses_with_defaults() {
    let job = parse(spec()).unwrap();
    assert_eq!(job.timeout, Duration::from_secs(3600));
    assert_eq!(job.agent, AgentKind::Claude);
    assert!(check_id(&job.id).is_ok(), "{}", job.id);
}

#[test]
fn unknown_fields_and_bad_variants_are_named() {
    let err = error_with(spec(), "model", "x".into());
    assert!(err.contains("unknown field `model`"), "{err}");
    let err = error_with(spec(), "trust", "maybe".into());
    assert!(err.contains("maybe") && err.contains("trusted"), "{err}");
    let err = error_with(spec(), "agent", "copilot".into());
    assert!(err.contains("copilot"), "{err}");
    let mut v = spec();
    v.as_object_mut().unwrap().remove("prompt");
    assert!(parse(v)
        .unwrap_err()
        .to_string()
        .contains("missing field `prompt`"));
}

#[test]
fn field_values_are_checked() {
    for (key, value, needle) in [
        ("rev", serde_json::json!("HEAD"), "\"rev\""),
        ("id", serde_json::json!("../etc"), "\"id\""),
        ("id", serde_json::json!("a/b"), "\"id\""),
        ("id", serde_json::json!(".hidden"), "\"id\""),
        ("account", serde_json::json!("a b"), "\"account\""),
        ("prompt", serde_json::json!("  "), "\"prompt\""),
        ("timeout", serde_json::json!("soon"), "\"timeout\""),
        ("timeout", serde_json::json!("0s"), "\"timeout\""),
        ("timeout", serde_json::json!("48h"), "\"timeout\""),
        ("ref", serde_json::json!("-x"), "\"ref\""),
        ("repo", serde_json::json!("ext::sh -c evil"), "\"repo\""),
        ("repo", serde_json::json!("fd::x"), "\"repo\""),
        ("repo", serde_json::json!("/nonexistent/repo"), "\"repo\""),
        ("repo", serde_json::json!("--upload-pack=evil"), "\"repo\""),
    ] {
        let err = error_with(spec(), key, value.clone());
        assert!(err.contains(needle), "{key}={value}: {err}");
    }
    let long = "x".repeat(MAX_PROMPT_BYTES + 1);
    assert!(error_with(spec(), "prompt", long.into()).contains("limit"));
}

#[test]
fn repository_forms() {
    for ok in [
        "https://github.com/o/r.git",
        "ssh://git@host/o/r",
        "ssh://git@host:2222/o/r",
        "ssh://git@[::1]:22/o/r",
        "git@github.com:o/r.git",
        "file:///srv/r.git",
        "/tmp",
    ] {
        assert!(check_repo(ok).is_ok(), "{ok}");
    }
    // A user, host or path that starts with '-' is an option to ssh or git, not a name.
    for bad in [
        "ssh://-oProxyCommand=touch${IFS}/tmp/pwned/x",
        "ssh://git@-oProxyCommand=x/r",
        "ssh://-l@host/r",
        "ssh://host:-p/r",
        "ssh://[-oProxyCommand=x]/r",
        "git://host/-r",
        "https://host/-u",
        "file://-x/r",
        "git@-oProxyCommand=x:r",
        "host:-u/r",
    ] {
        let err = check_repo(bad).unwrap_err().to_string();
        assert!(
            err.contains("\"repo\"") && err.contains("starts with '-'"),
            "{bad}: {err}"
        );
    }
}

#[test]
fn a_value_of_the_wrong_kind_names_its_field_and_an_example() {
    for (key, value, says) in [
        (
            "timeout",
            serde_json::json!("forever"),
            "\"forever\" is not a duration",
        ),
        (
            "timeout",
            serde_json::json!(30),
            "invalid type: integer `30`",
        ),
        (
            "trust",
            serde_json::json!("maybe"),
            "unknown variant `maybe`",
        ),
    ] {
        let err = error_with(spec(), key, value);
        let field = format!("invalid job field \"{key}\": {says}");
        assert!(err.starts_with(&field), "{err}");
        assert!(err.contains(&format!("; e.g. \"{key}\": ")), "{err}");
        assert!(!err.contains("at line"), "{err}");
    }
}

/// Ids the runner accepts, each checked against what it derives from them; the ids that made
/// the runner lose a job's commits (issue 40) are refused, naming the rule.
#[test]
fn every_accepted_id_names_a_ref_git_takes() {
    for (id, rule) in [
        ("a..b", "`..`"),
        ("x.lock", "`.lock`"),
        ("x.", "ends with a dot"),
    ] {
        let err = check_id(id).unwrap_err().to_string();
        assert!(err.contains(rule) && err.contains("\"id\""), "{id}: {err}");
    }
    let mut ids: Vec<String> = Vec::new();
    // Every id of up to four characters over the ones that matter to git.
    let alphabet = ['a', '.', '-', '_'];
    let mut frontier = vec![String::new()];
    for _ in 0..4 {
        frontier = frontier
            .iter()
            .flat_map(|p| alphabet.iter().map(move |c| format!("{p}{c}")))
            .collect();
        ids.extend(frontier.iter().cloned());
    }
    // And random ones built of the pieces git's rules are about, up to past the length bound.
    let pieces = ["a", "Z9", "-", "_", ".", "..", ".lock", "lock", "x.y"];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..400 {
        let n = 1 + next() % 24;
        let id: String = (0..n)
            .map(|_| pieces[(next() % pieces.len() as u64) as usize])
            .collect();
        ids.push(id);
    }
    let accepted: Vec<&String> = ids.iter().filter(|id| check_id(id).is_ok()).collect();
    assert!(accepted.len() > 100, "too few accepted: {}", accepted.len());
    for id in accepted {
        let refname = format!("refs/quest/jobs/{id}");
        let git = std::process::Command::new("git")
            .args(["check-ref-format", &refname])
            .status()
            .unwrap();
        assert!(git.success(), "accepted {id:?}, but git refuses {refname}");
        // The job's cgroup (`job-<id>`) and directory are file names.
        assert!(format!("job-{id}").len() <= 255, "{id}");
    }
}
