use super::*;

#[test]
fn unknown_fields_and_bad_option_names_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.json");
    std::fs::write(&path, r#"{"nix":{"option":{}}}"#).unwrap();
    let err = Config::load(&path, true).unwrap_err().to_string();
    assert!(err.contains("option"), "{err}");
    std::fs::write(&path, r#"{"nix":{"options":{"--impure":"x"}}}"#).unwrap();
    let err = Config::load(&path, true).unwrap_err().to_string();
    assert!(err.contains("--impure"), "{err}");
    std::fs::write(&path, r#"{"nix":{"options":{"substituters":""}}}"#).unwrap();
    assert_eq!(
        Config::load(&path, true).unwrap().nix.options["substituters"],
        ""
    );
}

#[test]
fn accounts_parse_by_agent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.json");
    std::fs::write(
        &path,
        r#"{"accounts":{
            "c":{"agent":"claude","api_key_file":"/run/keys/anthropic"},
            "o":{"agent":"opencode","auth_file":"/run/keys/auth.json","model":"p/m"}}}"#,
    )
    .unwrap();
    let config = Config::load(&path, true).unwrap();
    assert_eq!(config.accounts["c"].agent(), crate::job::AgentKind::Claude);
    assert_eq!(
        config.accounts["o"].agent(),
        crate::job::AgentKind::Opencode
    );
    std::fs::write(
        &path,
        r#"{"accounts":{"c":{"agent":"claude","api_key":"sk-x"}}}"#,
    )
    .unwrap();
    let err = Config::load(&path, true).unwrap_err().to_string();
    assert!(err.contains("api_key"), "{err}");
    std::fs::write(
        &path,
        r#"{"accounts":{"c":{"agent":"claude","api_key_file":"rel"}}}"#,
    )
    .unwrap();
    let err = Config::load(&path, true).unwrap_err().to_string();
    assert!(
        err.contains("accounts.c") && err.contains("absolute"),
        "{err}"
    );
}

/// Every secret the runner (or its gateway) reads is under the rule the account keys are:
/// the queue's password file, a Claude login the gateway refreshes by rename, and a key an
/// opencode config reads with `{file:...}` are refused in a directory commands need, named
/// by their field; in a directory of their own (a temp dir, as the tests keep them) they
/// load and are hidden with it.
#[test]
fn every_secret_file_is_placed_by_the_same_rule() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.json");
    let cases = [
        (
            "queue.password_file",
            r#"{"queue":{"postgres":"/run/postgresql","password_file":"FILE"}}"#,
        ),
        (
            "accounts.login.credentials_file",
            r#"{"accounts":{"login":{"agent":"claude","credentials_file":"FILE"}}}"#,
        ),
        (
            "accounts.oc.config {file:FILE}",
            r#"{"accounts":{"oc":{"agent":"opencode","model":"p/m","config":
                {"provider":{"p":{"options":{"apiKey":"{file:FILE}"}}}}}}}"#,
        ),
    ];
    let secrets = dir.path().join("secrets");
    std::fs::create_dir(&secrets).unwrap();
    let kept = secrets.join("secret");
    std::fs::write(&kept, "s").unwrap();
    for (field, text) in cases {
        for refused in ["/etc/qr-test-secret", "/usr/share/qr-test-secret"] {
            std::fs::write(&path, text.replace("FILE", refused)).unwrap();
            let err = Config::load(&path, true).unwrap_err().to_string();
            let named = format!("{} = {refused}", field.replace("FILE", refused));
            assert!(
                err.contains(&named) && err.contains("Fix: move it"),
                "{named:?} in {err}"
            );
        }
        let kept_text = kept.to_str().unwrap();
        std::fs::write(&path, text.replace("FILE", kept_text)).unwrap();
        let config = Config::load(&path, true).expect("a directory of its own loads");
        let hidden = config.hide_private_files(Some(&path)).unwrap();
        let what = field.replace("FILE", kept_text);
        let entry = hidden.iter().find(|h| h.what == what).expect(&what);
        let real = std::fs::canonicalize(&secrets).unwrap();
        assert!(
            entry.dirs.iter().any(|d| d.dir == real),
            "{what}: {:?}",
            entry.dirs
        );
    }
}

#[test]
fn missing_default_is_empty_but_missing_named_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.json");
    assert_eq!(Config::load(&path, false).unwrap(), Config::default());
    assert!(Config::load(&path, true).is_err());
}

#[test]
fn a_wrong_value_names_its_field_and_an_accepted_example() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.json");
    for (text, says) in [
        (
            r#"{"accounts": {"w": {"agent": "claude", "budget": "20M", "api_key_file": "/k"}}}"#,
            "accounts.w.budget: invalid type: string \"20M\", expected u64; e.g. \"budget\": 20000000",
        ),
        (
            r#"{"default_timeout": "forever"}"#,
            "default_timeout: \"forever\" is not a duration",
        ),
        (
            r#"{"network": {"extra_hosts": "a.example"}}"#,
            "network.extra_hosts: invalid type: string \"a.example\", expected a sequence; e.g. [",
        ),
        (
            r#"{"accounts": {"w": {"agent": "claude", "colour": 1}}}"#,
            "accounts.w.colour: unknown field `colour`",
        ),
    ] {
        std::fs::write(&path, text).unwrap();
        let err = Config::load(&path, true).unwrap_err().to_string();
        let want = format!("invalid config {}: {says}", path.display());
        assert!(err.starts_with(&want), "{err}\nwanted: {want}");
        assert!(!err.contains("at line"), "{err}");
    }
    std::fs::write(&path, r#"{"accounts": "#).unwrap();
    let err = Config::load(&path, true).unwrap_err().to_string();
    assert!(
        err.contains("at line 1"),
        "a syntax error keeps its position: {err}"
    );
}

#[test]
fn events_are_checked_when_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    for (events, field) in [
        (
            serde_json::json!({"webhooks": [{"url": "ftp://x/", "secret_file": "/run/s"}]}),
            "events.webhooks[0].url",
        ),
        (
            serde_json::json!({"webhooks": [{"url": "http://127.0.0.1:1/", "secret_file": "s"}]}),
            "events.webhooks[0].secret_file",
        ),
        (serde_json::json!({"command": ["hook"]}), "events.command"),
    ] {
        std::fs::write(&path, serde_json::json!({ "events": events }).to_string()).unwrap();
        match Config::load(&path, true) {
            Err(ConfigError::Field { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{events}: {other:?}"),
        }
    }
    let unknown = serde_json::json!({"events": {"webhook": []}});
    std::fs::write(&path, unknown.to_string()).unwrap();
    assert!(Config::load(&path, true).is_err());
}
