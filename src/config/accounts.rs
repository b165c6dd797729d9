//! The logins jobs run under (`accounts` in the config). Only paths are kept: the secrets are
//! read at run time, outside the sandbox.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A login an agent runs under. Only paths are kept here: the secrets are read at run time
/// by the agent itself, outside the sandbox, and never copied into a job's files.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "agent", rename_all = "lowercase")]
pub enum Account {
    Claude(ClaudeAccount),
    Opencode(OpencodeAccount),
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClaudeAccount {
    /// A file holding an API key. Claude Code reads it through its `apiKeyHelper`, so the
    /// key is never in an environment variable its commands could inherit.
    #[serde(default)]
    pub api_key_file: Option<PathBuf>,
    /// A Claude Code config dir holding a `/login` (`.credentials.json`).
    #[serde(default)]
    pub credentials_file: Option<PathBuf>,
    /// The API endpoint (`ANTHROPIC_BASE_URL`), for gateways and tests.
    #[serde(default)]
    pub base_url: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    /// Tokens per UTC day across every job of this account, in every runner of this state
    /// directory (`<state>/gateway/budget/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<u64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OpencodeAccount {
    /// opencode's `auth.json` (from `opencode auth login`).
    #[serde(default)]
    pub auth_file: Option<PathBuf>,
    /// opencode configuration merged under the runner's own (providers, model). May name
    /// secret files with opencode's `{file:...}` syntax; never holds the secrets itself.
    #[serde(default)]
    pub config: Option<serde_json::Value>,
    /// `provider/model`.
    #[serde(default)]
    pub model: Option<String>,
    /// Tokens per UTC day, as a Claude Code account's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<u64>,
}

impl Account {
    /// The account's daily token budget.
    pub fn budget(&self) -> Option<u64> {
        match self {
            Account::Claude(a) => a.budget,
            Account::Opencode(a) => a.budget,
        }
    }

    /// The files holding this account's secrets, each with the config field naming it:
    /// the agent's own (`api_key_file`, `credentials_file`, `auth_file`) and the absolute
    /// paths an opencode `config` reads with `{file:PATH}` (relative ones and `~/` resolve in
    /// the job's private directories, not the operator's).
    pub fn secret_files(&self, name: &str) -> Vec<(String, PathBuf)> {
        let field = |f: &str| format!("accounts.{name}.{f}");
        match self {
            Account::Claude(a) => [
                ("api_key_file", &a.api_key_file),
                ("credentials_file", &a.credentials_file),
            ]
            .into_iter()
            .filter_map(|(f, p)| p.as_ref().map(|p| (field(f), p.clone())))
            .collect(),
            Account::Opencode(a) => {
                let mut files: Vec<(String, PathBuf)> = a
                    .auth_file
                    .iter()
                    .map(|p| (field("auth_file"), p.clone()))
                    .collect();
                if let Some(config) = &a.config {
                    for path in file_references(config) {
                        if Path::new(&path).is_absolute() {
                            files.push((field(&format!("config {{file:{path}}}")), path.into()));
                        }
                    }
                }
                files
            }
        }
    }

    pub fn agent(&self) -> crate::job::AgentKind {
        match self {
            Account::Claude(_) => crate::job::AgentKind::Claude,
            Account::Opencode(_) => crate::job::AgentKind::Opencode,
        }
    }
}

/// The field of account `name` that serde's error is about. serde reads an account whole
/// before its `agent` picks the variant, so its error points at the account, not the field:
/// the account is read again as that variant alone, where the position names the field.
pub fn locate_error(text: &str, name: &str) -> Option<(String, String)> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let mut account = v.get("accounts")?.get(name)?.as_object()?.clone();
    let agent = account.remove("agent")?;
    let alone = serde_json::to_string(&account).ok()?;
    let e = match agent.as_str()? {
        "claude" => serde_json::from_str::<ClaudeAccount>(&alone).err()?,
        "opencode" => serde_json::from_str::<OpencodeAccount>(&alone).err()?,
        _ => return None,
    };
    let (field, message) = crate::util::json_path::locate(&alone, &e);
    Some((format!("accounts.{name}.{}", field?), message))
}

/// The paths of opencode's `{file:PATH}` references in every string of `value`.
fn file_references(value: &serde_json::Value) -> Vec<String> {
    use serde_json::Value;
    match value {
        Value::String(s) => s
            .split("{file:")
            .skip(1)
            .filter_map(|rest| rest.split_once('}').map(|(path, _)| path.to_string()))
            .collect(),
        Value::Array(items) => items.iter().flat_map(file_references).collect(),
        Value::Object(map) => map.values().flat_map(file_references).collect(),
        _ => Vec::new(),
    }
}
