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
use super::error::{AccountFileError, CredentialError, FileProblem};
use crate::config::Account;

/// What the account's jobs will use, in a few words; or what is wrong, naming the account,
/// the config field and the file.
pub fn check(name: &str, account: &Account) -> Result<String, AccountFileError> {
    let fail = |field: &str, problem: FileProblem| AccountFileError::File {
        account: name.to_string(),
        field: field.to_string(),
        problem,
    };
    let field_of = |path: &Path| {
        account
            .secret_files(name)
            .into_iter()
            .find(|(_, p)| p == path)
            .map_or_else(|| format!("accounts.{name}"), |(field, _)| field)
    };
    // Every file the config names must be there, readable and not empty.
    for (field, path) in account.secret_files(name) {
        readable(&path).map_err(|problem| fail(&field, problem))?;
    }
    let auth_file = format!("accounts.{name}.auth_file");
    let auth_json = match account {
        Account::Opencode(a) => match &a.auth_file {
            Some(file) => Some(json_object(file).map_err(|problem| fail(&auth_file, problem))?),
            None => None,
        },
        Account::Claude(a) if a.api_key_file.is_none() && a.credentials_file.is_none() => {
            return Err(AccountFileError::NoCredential(name.to_string()));
        }
        Account::Claude(_) => None,
    };
    let route = route(name, account, auth_json.as_ref())?;
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
            let key = read_key_file(path).map_err(|e| fail(&field_of(path), e.into()))?;
            if key.chars().any(char::is_whitespace) {
                let problem = FileProblem::MoreThanOneWord { path: path.clone() };
                return Err(fail(&field_of(path), problem));
            }
            Ok(format!("an API key, {via}"))
        }
        SecretSource::AuthJson { file, provider } => {
            read_auth_json_key(file, provider).map_err(|e| fail(&auth_file, e.into()))?;
            Ok(format!("auth.json's {provider} key, {via}"))
        }
        SecretSource::ClaudeLogin(file) => {
            // No I/O until checked: the lock directory and token URL are not used by `check`.
            ClaudeLogin::new(file.clone(), Path::new("/"), String::new())
                .check()
                .map_err(|e| fail(&format!("accounts.{name}.credentials_file"), e.into()))?;
            Ok(format!("a /login, {via}"))
        }
    }
}

fn readable(path: &Path) -> Result<(), FileProblem> {
    let path_buf = || path.to_path_buf();
    let meta = std::fs::metadata(path).map_err(|source| FileProblem::Missing {
        path: path_buf(),
        source,
    })?;
    if !meta.is_file() {
        return Err(FileProblem::NotAFile { path: path_buf() });
    }
    std::fs::File::open(path).map_err(|source| FileProblem::Unreadable {
        path: path_buf(),
        source,
    })?;
    if meta.len() == 0 {
        return Err(CredentialError::Empty { path: path_buf() }.into());
    }
    Ok(())
}

fn json_object(path: &Path) -> Result<Value, FileProblem> {
    let text = zeroize::Zeroizing::new(std::fs::read_to_string(path).map_err(|source| {
        CredentialError::Read {
            path: path.to_path_buf(),
            source,
        }
    })?);
    match serde_json::from_str::<Value>(&text) {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err(FileProblem::NotAnObject {
            path: path.to_path_buf(),
        }),
        Err(source) => Err(CredentialError::NotJson {
            path: path.to_path_buf(),
            source,
        }
        .into()),
    }
}

#[cfg(test)]
#[path = "account_check_tests.rs"]
mod tests;
