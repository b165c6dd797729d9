//! Whether an account's files would let a job reach its model, checked before anything of a
//! job is done: `doctor`, `submit` and `run` (exit 2) and the runner's admission. Without it,
//! a missing key file showed only once the job's devShell had been built, as exit 1.
//!
//! The same reads a job's open does ([`super::credentials`], [`super::account::route`]), so
//! what passes here is what the job will find, unless the file changes in between.

use std::path::Path;

use serde_json::Value;

use super::account::{route, Route, SecretSource};
use super::credentials::{read_auth_json_key, read_key_file, ClaudeLogin};
use crate::config::Account;

/// What the account's jobs will use, in a few words; or what is wrong, naming the account,
/// the config field and the file.
pub fn check(name: &str, account: &Account) -> Result<String, String> {
    let fail = |field: &str, message: String| Err(format!("account {name}: {field}: {message}"));
    let field_of = |path: &Path| {
        account
            .secret_files(name)
            .into_iter()
            .find(|(_, p)| p == path)
            .map_or_else(|| format!("accounts.{name}"), |(field, _)| field)
    };
    // Every file the config names must be there, readable and not empty.
    for (field, path) in account.secret_files(name) {
        if let Err(message) = readable(&path) {
            return fail(&field, message);
        }
    }
    let auth_json = match account {
        Account::Opencode(a) => match &a.auth_file {
            Some(file) => match json_object(file) {
                Ok(v) => Some(v),
                Err(message) => return fail(&format!("accounts.{name}.auth_file"), message),
            },
            None => None,
        },
        Account::Claude(a) if a.api_key_file.is_none() && a.credentials_file.is_none() => {
            return Err(format!(
                "account {name} has no credential: set accounts.{name}.api_key_file (a file \
                 holding the API key, e.g. \"/run/secrets/anthropic-key\") or \
                 accounts.{name}.credentials_file (a /login's .credentials.json)"
            ));
        }
        Account::Claude(_) => None,
    };
    let route = route(name, account, auth_json.as_ref()).map_err(|e| e.to_string())?;
    let Route::Gateway {
        upstream, secret, ..
    } = route
    else {
        return Ok("its agent holds the login itself".into());
    };
    let via = format!(
        "through the gateway to {}://{}",
        upstream.scheme, upstream.authority
    );
    match &secret {
        SecretSource::File(path) => {
            let key = read_key_file(path)
                .map_err(|m| format!("account {name}: {}: {m}", field_of(path)))?;
            if key.chars().any(char::is_whitespace) {
                return fail(
                    &field_of(path),
                    format!(
                        "{} holds more than one word: a key file holds the key alone \
                         (a /login's .credentials.json goes in credentials_file)",
                        path.display()
                    ),
                );
            }
            Ok(format!("an API key, {via}"))
        }
        SecretSource::AuthJson { file, provider } => {
            read_auth_json_key(file, provider)
                .map_err(|m| format!("account {name}: accounts.{name}.auth_file: {m}"))?;
            Ok(format!("auth.json's {provider} key, {via}"))
        }
        SecretSource::ClaudeLogin(file) => {
            // No I/O until checked: the lock directory and token URL are not used by `check`.
            ClaudeLogin::new(file.clone(), Path::new("/"), String::new())
                .check()
                .map_err(|m| format!("account {name}: accounts.{name}.credentials_file: {m}"))?;
            Ok(format!("a /login, {via}"))
        }
    }
}

fn readable(path: &Path) -> Result<(), String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a file", path.display()));
    }
    std::fs::File::open(path).map_err(|e| format!("{}: cannot be read: {e}", path.display()))?;
    if meta.len() == 0 {
        return Err(format!("{} is empty", path.display()));
    }
    Ok(())
}

fn json_object(path: &Path) -> Result<Value, String> {
    let text = zeroize::Zeroizing::new(
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?,
    );
    match serde_json::from_str::<Value>(&text) {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err(format!(
            "{} is not a JSON object (opencode's auth.json: {{\"anthropic\": {{\"type\": \"api\", \"key\": \"...\"}}}})",
            path.display()
        )),
        Err(e) => Err(format!("{} is not JSON: {e}", path.display())),
    }
}

#[cfg(test)]
#[path = "account_check_tests.rs"]
mod tests;
