//! The account's real credential, held by the runner only, and put on each request the
//! gateway forwards.
//!
//! A Claude Code `/login` is held and refreshed here, as Claude Code itself does it (the
//! refresh grant at Anthropic's token endpoint with Claude Code's client id, five minutes
//! before expiry): one refresh at a time across every job of the process (an async mutex)
//! and every runner of the state directory (a lock file), re-reading the file after each
//! wait so a refresh another runner made is used, not repeated, and writing the file back by
//! rename, so a crash leaves the old login or the new one.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{HeaderValue, AUTHORIZATION};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use zeroize::Zeroizing;

use super::upstream::HttpClient;
use super::{ApplyError, CredentialError, RefreshProblem};
use crate::lockfile::LockFile;

/// Claude Code's OAuth client and token endpoint (Claude Code 2.1: `CLIENT_ID`, `TOKEN_URL`).
pub const CLAUDE_CLIENT_ID: &str = "9d1c250a-e61b-44d9-88ed-5944d1962f5e";
pub const CLAUDE_TOKEN_URL: &str = "https://platform.claude.com/v1/oauth/token";
/// The beta flag Anthropic's API wants with a login's bearer token.
const OAUTH_BETA: &str = "oauth-2025-04-20";
/// Refresh this long before the token expires (Claude Code's own margin).
const REFRESH_MARGIN: Duration = Duration::from_secs(300);
const REFRESH_TIMEOUT: Duration = Duration::from_secs(30);

/// How the agent sent its job token, and so how the provider wants the real one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthForm {
    /// `x-api-key` (Anthropic).
    ApiKeyHeader,
    /// `Authorization: Bearer` (OpenAI-compatible).
    Bearer,
}

pub enum Credential {
    /// An API key, read from its file when the job opened.
    Key(Zeroizing<String>),
    ClaudeLogin(Arc<ClaudeLogin>),
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::Key(_) => f.write_str("Key(..)"),
            Credential::ClaudeLogin(l) => write!(f, "ClaudeLogin({})", l.file.display()),
        }
    }
}

fn header(value: &str) -> Result<HeaderValue, ApplyError> {
    let mut v = HeaderValue::from_str(value).map_err(|_| ApplyError::NotAHeaderValue)?;
    v.set_sensitive(true);
    Ok(v)
}

impl Credential {
    /// Puts the credential on a request's headers (the job token already removed).
    pub async fn apply(
        &self,
        headers: &mut http::HeaderMap,
        form: AuthForm,
        client: &HttpClient,
    ) -> Result<(), ApplyError> {
        match self {
            Credential::Key(key) => {
                match form {
                    AuthForm::ApiKeyHeader => {
                        headers.insert("x-api-key", header(key)?);
                    }
                    AuthForm::Bearer => {
                        headers.insert(AUTHORIZATION, header(&format!("Bearer {}", &**key))?);
                    }
                }
                Ok(())
            }
            Credential::ClaudeLogin(login) => {
                let token = login.access_token(client).await?;
                headers.insert(AUTHORIZATION, header(&format!("Bearer {}", &*token))?);
                let beta = match headers.get("anthropic-beta").and_then(|v| v.to_str().ok()) {
                    Some(b) if b.split(',').any(|x| x.trim() == OAUTH_BETA) => b.to_string(),
                    Some(b) if !b.trim().is_empty() => format!("{b},{OAUTH_BETA}"),
                    _ => OAUTH_BETA.to_string(),
                };
                headers.insert(
                    "anthropic-beta",
                    HeaderValue::from_str(&beta).map_err(|_| ApplyError::NotAHeaderValue)?,
                );
                Ok(())
            }
        }
    }
}

/// Reads a key file: the whole file, surrounding whitespace trimmed.
pub fn read_key_file(path: &Path) -> Result<Zeroizing<String>, CredentialError> {
    let text = read_secret(path)?;
    let key = Zeroizing::new(text.trim().to_string());
    if key.is_empty() {
        return Err(CredentialError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(key)
}

/// A file that holds a secret, which is wiped from memory once dropped.
fn read_secret(path: &Path) -> Result<Zeroizing<String>, CredentialError> {
    std::fs::read_to_string(path)
        .map(Zeroizing::new)
        .map_err(|source| CredentialError::Read {
            path: path.to_path_buf(),
            source,
        })
}

fn parse_json(path: &Path, text: &str) -> Result<Value, CredentialError> {
    serde_json::from_str(text).map_err(|source| CredentialError::NotJson {
        path: path.to_path_buf(),
        source,
    })
}

/// The `key` of an opencode `auth.json` entry of type `api`.
pub fn read_auth_json_key(
    path: &Path,
    provider: &str,
) -> Result<Zeroizing<String>, CredentialError> {
    let v = parse_json(path, &read_secret(path)?)?;
    let key = v
        .get(provider)
        .filter(|e| e.get("type").and_then(Value::as_str) == Some("api"))
        .and_then(|e| e.get("key"))
        .and_then(Value::as_str)
        .filter(|k| !k.is_empty())
        .ok_or_else(|| CredentialError::NoApiKey {
            path: path.to_path_buf(),
            provider: provider.to_string(),
        })?;
    Ok(Zeroizing::new(key.to_string()))
}

/// A login's tokens, as `.credentials.json`'s `claudeAiOauth` holds them.
#[derive(Clone)]
struct OAuth {
    access: Zeroizing<String>,
    refresh: Zeroizing<String>,
    /// Milliseconds since the epoch.
    expires_at: u64,
    scopes: Vec<String>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl OAuth {
    fn fresh(&self) -> bool {
        self.expires_at > now_ms() + REFRESH_MARGIN.as_millis() as u64
    }
}

/// One `/login`, shared by every job of its account in this process.
pub struct ClaudeLogin {
    pub file: PathBuf,
    lock: PathBuf,
    token_url: String,
    held: tokio::sync::Mutex<Option<OAuth>>,
    /// How many refreshes this process made (for tests and the log).
    pub refreshes: std::sync::atomic::AtomicU64,
}

impl ClaudeLogin {
    /// `lock_dir`: where runners of one state directory take the refresh lock.
    pub fn new(file: PathBuf, lock_dir: &Path, token_url: String) -> ClaudeLogin {
        use sha2::Digest;
        let hash =
            crate::util::hex::encode(sha2::Sha256::digest(file.as_os_str().as_encoded_bytes()));
        ClaudeLogin {
            lock: lock_dir.join(format!("login-{}.lock", &hash[..16])),
            file,
            token_url,
            held: tokio::sync::Mutex::new(None),
            refreshes: Default::default(),
        }
    }

    /// Whether the login's file holds a login (its tokens may be expired: they are refreshed).
    pub fn check(&self) -> Result<(), CredentialError> {
        self.read().map(|_| ())
    }

    fn read(&self) -> Result<(Value, OAuth), CredentialError> {
        let path = &self.file;
        let v = parse_json(path, &read_secret(path)?)?;
        let o = v
            .get("claudeAiOauth")
            .ok_or_else(|| CredentialError::NoLogin { path: path.clone() })?;
        let s = |field: &'static str| {
            o.get(field)
                .and_then(Value::as_str)
                .map(|s| Zeroizing::new(s.to_string()))
                .ok_or_else(|| CredentialError::MissingField {
                    path: path.clone(),
                    field,
                })
        };
        let oauth = OAuth {
            access: s("accessToken")?,
            refresh: s("refreshToken")?,
            expires_at: o.get("expiresAt").and_then(Value::as_u64).unwrap_or(0),
            scopes: o
                .get("scopes")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
        };
        Ok((v, oauth))
    }

    /// A valid access token, refreshed first if it expires within five minutes.
    pub async fn access_token(&self, client: &HttpClient) -> Result<Zeroizing<String>, ApplyError> {
        let mut held = self.held.lock().await;
        if let Some(t) = held.as_ref().filter(|t| t.fresh()) {
            return Ok(t.access.clone());
        }
        // Someone (another runner, an operator's new /login) may have renewed it already.
        let (_, t) = self.read()?;
        if t.fresh() {
            let access = t.access.clone();
            *held = Some(t);
            return Ok(access);
        }
        if let Some(dir) = self.lock.parent() {
            std::fs::create_dir_all(dir).map_err(|source| ApplyError::LockDir {
                dir: dir.to_path_buf(),
                source,
            })?;
        }
        let _lock = tokio::time::timeout(REFRESH_TIMEOUT, LockFile::acquire(&self.lock))
            .await
            .map_err(|_| ApplyError::LockHeld {
                lock: self.lock.clone(),
                secs: REFRESH_TIMEOUT.as_secs(),
            })?
            .map_err(|source| ApplyError::Lock {
                lock: self.lock.clone(),
                source,
            })?;
        let (mut file, t) = self.read()?;
        if t.fresh() {
            let access = t.access.clone();
            *held = Some(t);
            return Ok(access);
        }
        let renewed = tokio::time::timeout(REFRESH_TIMEOUT, self.refresh(client, &t))
            .await
            .map_err(|_| ApplyError::RefreshTimeout {
                file: self.file.clone(),
                secs: REFRESH_TIMEOUT.as_secs(),
            })?
            .map_err(|problem| ApplyError::Refresh {
                file: self.file.clone(),
                problem,
            })?;
        self.refreshes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        file["claudeAiOauth"]["accessToken"] = json!(&*renewed.access);
        file["claudeAiOauth"]["refreshToken"] = json!(&*renewed.refresh);
        file["claudeAiOauth"]["expiresAt"] = json!(renewed.expires_at);
        file["claudeAiOauth"]["scopes"] = json!(renewed.scopes);
        let data = Zeroizing::new(serde_json::to_vec_pretty(&file).unwrap_or_default());
        let dir = self.file.parent().unwrap_or(Path::new("/"));
        // The new refresh token replaces the old one, which the provider may have revoked:
        // losing this write would lose the login, so it fails the request loudly.
        crate::util::fs::write_atomically(dir, &self.file, &data).map_err(|source| {
            ApplyError::Write {
                file: self.file.clone(),
                source,
            }
        })?;
        tracing::info!(file = %self.file.display(), "refreshed the Claude login");
        let access = renewed.access.clone();
        *held = Some(renewed);
        Ok(access)
    }

    async fn refresh(&self, client: &HttpClient, t: &OAuth) -> Result<OAuth, RefreshProblem> {
        let fail = |e: &dyn std::fmt::Display| RefreshProblem::Request(e.to_string());
        let mut body = json!({
            "grant_type": "refresh_token",
            "refresh_token": &*t.refresh,
            "client_id": CLAUDE_CLIENT_ID,
        });
        if !t.scopes.is_empty() {
            body["scope"] = json!(t.scopes.join(" "));
        }
        let body = Zeroizing::new(body.to_string());
        let request = http::Request::post(&self.token_url)
            .header("content-type", "application/json")
            .body(
                Full::new(Bytes::from(body.as_bytes().to_vec()))
                    .map_err(|never| match never {})
                    .boxed(),
            )
            .map_err(|e| fail(&e))?;
        let response = client.request(request).await.map_err(|e| fail(&e))?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| fail(&e))?
            .to_bytes();
        if !status.is_success() {
            // The body names the error (invalid_grant, ...), never a token.
            let text = String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned();
            return Err(RefreshProblem::Status { status, text });
        }
        let v: Value = serde_json::from_slice(&bytes).map_err(RefreshProblem::NotJson)?;
        let access = v
            .get("access_token")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or(RefreshProblem::NoAccessToken)?;
        let expires_in = v.get("expires_in").and_then(Value::as_u64).unwrap_or(3600);
        Ok(OAuth {
            access: Zeroizing::new(access.to_string()),
            refresh: v
                .get("refresh_token")
                .and_then(Value::as_str)
                .map(|s| Zeroizing::new(s.to_string()))
                .unwrap_or_else(|| t.refresh.clone()),
            expires_at: now_ms() + expires_in * 1000,
            scopes: v
                .get("scope")
                .and_then(Value::as_str)
                .map(|s| s.split_whitespace().map(str::to_string).collect())
                .unwrap_or_else(|| t.scopes.clone()),
        })
    }
}
