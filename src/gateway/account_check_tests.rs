use super::*;
use crate::config::{ClaudeAccount, OpencodeAccount};
use std::path::PathBuf;

fn claude_key(path: PathBuf) -> Account {
    Account::Claude(ClaudeAccount {
        api_key_file: Some(path),
        ..Default::default()
    })
}

fn opencode(auth: PathBuf) -> Account {
    Account::Opencode(OpencodeAccount {
        auth_file: Some(auth),
        model: Some("anthropic/claude-sonnet-4-5".into()),
        ..Default::default()
    })
}

fn err(account: &Account) -> String {
    check("work", account)
        .expect_err("the account must be refused")
        .to_string()
}

#[test]
fn a_good_key_file_passes() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, "sk-ant-test\n").unwrap();
    let ok = check("work", &claude_key(key)).unwrap();
    assert!(
        ok.contains("API key") && ok.contains("api.anthropic.com"),
        "{ok}"
    );
}

#[test]
fn each_bad_key_file_names_the_account_the_field_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "").unwrap();
    let blank = dir.path().join("blank");
    std::fs::write(&blank, " \n").unwrap();
    let json = dir.path().join("creds.json");
    std::fs::write(&json, "{\"claudeAiOauth\": {\"accessToken\": \"a\"}}").unwrap();
    for (path, says) in [
        (&missing, "No such file"),
        (&empty, "is empty"),
        (&blank, "is empty"),
        (&json, "more than one word"),
        (&dir.path().to_path_buf(), "is not a file"),
    ] {
        let e = err(&claude_key(path.clone()));
        let field = "account work: accounts.work.api_key_file: ";
        assert!(e.starts_with(field), "{e}");
        assert!(
            e.contains(&path.display().to_string()) && e.contains(says),
            "{e}"
        );
    }
}

#[test]
fn an_account_with_no_credential_says_which_fields_to_set() {
    let e = err(&Account::Claude(ClaudeAccount::default()));
    assert!(e.contains("account work has no credential"), "{e}");
    assert!(
        e.contains("accounts.work.api_key_file") && e.contains("credentials_file"),
        "{e}"
    );
}

#[test]
fn a_login_file_must_hold_a_login() {
    let dir = tempfile::tempdir().unwrap();
    let creds = dir.path().join(".credentials.json");
    std::fs::write(&creds, "{\"other\": 1}").unwrap();
    let account = Account::Claude(ClaudeAccount {
        credentials_file: Some(creds.clone()),
        ..Default::default()
    });
    let e = err(&account);
    assert!(
        e.contains("accounts.work.credentials_file") && e.contains("claudeAiOauth"),
        "{e}"
    );
    std::fs::write(
        &creds,
        "{\"claudeAiOauth\": {\"accessToken\": \"a\", \"refreshToken\": \"r\", \"expiresAt\": 1}}",
    )
    .unwrap();
    assert!(check("work", &account).unwrap().contains("/login"));
}

#[test]
fn an_opencode_auth_file_must_be_an_object_with_the_providers_key() {
    let dir = tempfile::tempdir().unwrap();
    let auth = dir.path().join("auth.json");
    for (text, says) in [
        ("not json", "is not JSON"),
        ("[1]", "is not a JSON object"),
        (
            "{\"openai\": {\"type\": \"api\", \"key\": \"k\"}}",
            "no key for provider anthropic",
        ),
        (
            "{\"anthropic\": {\"type\": \"api\", \"key\": \"\"}}",
            "no api key for anthropic",
        ),
    ] {
        std::fs::write(&auth, text).unwrap();
        let e = err(&opencode(auth.clone()));
        assert!(e.contains("work") && e.contains(says), "{text}: {e}");
    }
    std::fs::write(
        &auth,
        "{\"anthropic\": {\"type\": \"api\", \"key\": \"k\"}}",
    )
    .unwrap();
    assert!(check("work", &opencode(auth))
        .unwrap()
        .contains("anthropic"));
}
