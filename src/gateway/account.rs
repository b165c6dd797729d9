//! Which accounts the gateway serves, where their requests go and where their secret is: a
//! pure plan from the configuration, carried out when a job opens (the secret is read then).
//!
//! Served: Claude Code API keys and `/login`s (the runner refreshes the login itself), and
//! opencode providers whose key is an `auth.json` entry of type `api` or the provider's
//! `options.apiKey` (a `{file:...}` reference). Not served, and so run as before with the
//! account's file linked into the agent's private dirs: opencode's OAuth entries (`type:
//! "oauth"`), which opencode's provider plugins refresh and turn into requests of their own
//! (see docs/jobs.md).

use super::AccountError;
use std::path::PathBuf;

use serde_json::Value;

use super::upstream::UpstreamUrl;
use crate::config::{Account, ClaudeAccount, OpencodeAccount};

/// Anthropic's API, where Claude Code goes without a `base_url`.
pub const ANTHROPIC_API: &str = "https://api.anthropic.com";

/// Providers opencode knows without a `baseURL`, and where their APIs are.
const OPENCODE_DEFAULT_URLS: &[(&str, &str)] = &[
    ("anthropic", "https://api.anthropic.com/v1"),
    ("openai", "https://api.openai.com/v1"),
];

/// Where the account's secret is; read when a job opens, never copied into the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// The whole file, whitespace trimmed (an API key file, an opencode `{file:...}`).
    File(PathBuf),
    /// The `key` of an opencode `auth.json` entry of type `api`.
    AuthJson { file: PathBuf, provider: String },
    /// A Claude Code `/login`'s `.credentials.json`, refreshed by the runner.
    ClaudeLogin(PathBuf),
}

/// How one account's jobs reach their model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Through the gateway.
    Gateway {
        upstream: UpstreamUrl,
        secret: SecretSource,
        /// opencode: the provider whose `baseURL` and `apiKey` the job's config points at the
        /// gateway.
        provider: Option<String>,
    },
    /// The agent holds the account's file itself, as before the gateway; `why` says why.
    Direct { why: String },
}

/// The route of `account` (named `name`). `auth_json` is the opencode account's `auth.json`
/// as read now (`None` when it has none or it cannot be read).
pub fn route(
    name: &str,
    account: &Account,
    auth_json: Option<&Value>,
) -> Result<Route, AccountError> {
    match account {
        Account::Claude(a) => claude(name, a),
        Account::Opencode(a) => opencode(name, a, auth_json),
    }
}

fn claude(name: &str, a: &ClaudeAccount) -> Result<Route, AccountError> {
    let upstream =
        UpstreamUrl::parse(a.base_url.as_deref().unwrap_or(ANTHROPIC_API)).map_err(|source| {
            AccountError::BaseUrl {
                account: name.to_string(),
                source,
            }
        })?;
    let secret = match (&a.api_key_file, &a.credentials_file) {
        (Some(key), _) => SecretSource::File(key.clone()),
        (None, Some(login)) => SecretSource::ClaudeLogin(login.clone()),
        (None, None) => {
            return Err(AccountError::NoCredentials {
                account: name.to_string(),
            })
        }
    };
    Ok(Route::Gateway {
        upstream,
        secret,
        provider: None,
    })
}

fn opencode(
    name: &str,
    a: &OpencodeAccount,
    auth_json: Option<&Value>,
) -> Result<Route, AccountError> {
    let account = || name.to_string();
    let model = a
        .model
        .as_deref()
        .or_else(|| config_str(a, &["model"]))
        .ok_or_else(|| AccountError::NoModel { account: account() })?;
    let Some((provider, _)) = model.split_once('/') else {
        return Err(AccountError::ModelWithoutProvider {
            account: account(),
            model: model.to_string(),
        });
    };
    let options = |key: &str| config_str(a, &["provider", provider, "options", key]);
    let entry = auth_json.and_then(|v| v.get(provider));
    let entry_type = entry.and_then(|e| e.get("type")).and_then(Value::as_str);
    let secret = match (options("apiKey"), entry_type, &a.auth_file) {
        (Some(key), _, _) => match key.strip_prefix("{file:").and_then(|k| k.strip_suffix('}')) {
            Some(path) if path.starts_with('/') => SecretSource::File(PathBuf::from(path)),
            _ => {
                return Err(AccountError::KeyNotAFileReference {
                    account: account(),
                    provider: provider.to_string(),
                })
            }
        },
        (None, Some("api"), Some(file)) => SecretSource::AuthJson {
            file: file.clone(),
            provider: provider.to_string(),
        },
        (None, Some(other), _) => {
            return Ok(Route::Direct {
                why: format!(
                    "its auth.json entry for {provider} is a {other} login, which opencode's own \
                     provider code refreshes and sends"
                ),
            })
        }
        (None, None, _) => {
            return Err(AccountError::NoKey {
                account: account(),
                provider: provider.to_string(),
            })
        }
    };
    let url = options("baseURL")
        .map(str::to_string)
        .or_else(|| {
            OPENCODE_DEFAULT_URLS
                .iter()
                .find(|(p, _)| *p == provider)
                .map(|(_, u)| u.to_string())
        })
        .ok_or_else(|| AccountError::NoBaseUrl {
            account: account(),
            provider: provider.to_string(),
        })?;
    let upstream = UpstreamUrl::parse(&url).map_err(|source| AccountError::ProviderBaseUrl {
        account: account(),
        provider: provider.to_string(),
        source,
    })?;
    Ok(Route::Gateway {
        upstream,
        secret,
        provider: Some(provider.to_string()),
    })
}

fn config_str<'a>(a: &'a OpencodeAccount, path: &[&str]) -> Option<&'a str> {
    let mut v = a.config.as_ref()?;
    for key in path {
        v = v.get(key)?;
    }
    v.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn oc(config: Option<Value>, model: &str) -> Account {
        Account::Opencode(OpencodeAccount {
            auth_file: Some("/s/auth.json".into()),
            config,
            model: Some(model.into()),
            ..Default::default()
        })
    }

    #[test]
    fn claude_accounts_go_through_the_gateway() {
        let key = Account::Claude(ClaudeAccount {
            api_key_file: Some("/s/key".into()),
            ..Default::default()
        });
        let Route::Gateway {
            upstream, secret, ..
        } = route("w", &key, None).unwrap()
        else {
            panic!()
        };
        assert_eq!(upstream.display(), "https://api.anthropic.com");
        assert_eq!(secret, SecretSource::File("/s/key".into()));
        let login = Account::Claude(ClaudeAccount {
            credentials_file: Some("/s/.credentials.json".into()),
            base_url: Some("http://127.0.0.1:9".into()),
            ..Default::default()
        });
        let Route::Gateway { secret, .. } = route("l", &login, None).unwrap() else {
            panic!()
        };
        assert_eq!(
            secret,
            SecretSource::ClaudeLogin("/s/.credentials.json".into())
        );
    }

    #[test]
    fn opencode_api_entries_and_file_keys_go_through_oauth_stays_direct() {
        let auth = json!({"anthropic": {"type": "api", "key": "sk"}, "openai": {"type": "oauth"}});
        let r = route("o", &oc(None, "anthropic/claude-x"), Some(&auth)).unwrap();
        assert_eq!(
            r,
            Route::Gateway {
                upstream: UpstreamUrl::parse("https://api.anthropic.com/v1").unwrap(),
                secret: SecretSource::AuthJson {
                    file: "/s/auth.json".into(),
                    provider: "anthropic".into()
                },
                provider: Some("anthropic".into()),
            }
        );
        let r = route("o", &oc(None, "openai/gpt-x"), Some(&auth)).unwrap();
        assert!(matches!(r, Route::Direct { .. }), "{r:?}");
        let custom = json!({"provider": {"mine": {"options": {
            "baseURL": "http://127.0.0.1:1/v1", "apiKey": "{file:/s/mine-key}"}}}});
        let r = route("o", &oc(Some(custom), "mine/m"), None).unwrap();
        let Route::Gateway {
            upstream, secret, ..
        } = r
        else {
            panic!()
        };
        assert_eq!(upstream.base_path, "/v1");
        assert_eq!(secret, SecretSource::File("/s/mine-key".into()));
    }

    #[test]
    fn opencode_mistakes_are_named() {
        let literal = json!({"provider": {"p": {"options": {"baseURL": "http://x/v1", "apiKey": "sk-live"}}}});
        let e = route("o", &oc(Some(literal), "p/m"), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("{file:"), "{e}");
        let auth = json!({"p": {"type": "api", "key": "k"}});
        let e = route("o", &oc(None, "p/m"), Some(&auth))
            .unwrap_err()
            .to_string();
        assert!(e.contains("baseURL"), "{e}");
        let e = route("o", &oc(None, "nomodel"), Some(&auth))
            .unwrap_err()
            .to_string();
        assert!(e.contains("provider/model"), "{e}");
        let e = route("o", &oc(None, "q/m"), Some(&auth))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no key for provider q"), "{e}");
    }
}
