//! A job: one agent run on one pinned revision.
//!
//! Jobs come from outside (a file, the queue, later a forge's job API), so every field is
//! checked here, before anything touches the disk, and each refusal names its field.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Whether a revision's author is trusted by the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Trust {
    /// Its devShell may be built on the host and its commands may reach the registries.
    Trusted,
    /// Refused unless the operator allows untrusted jobs, which then reach no host.
    Untrusted,
}

impl Trust {
    pub fn name(self) -> &'static str {
        match self {
            Trust::Trusted => "trusted",
            Trust::Untrusted => "untrusted",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentKind {
    Claude,
    Opencode,
}

impl AgentKind {
    pub fn name(self) -> &'static str {
        match self {
            AgentKind::Claude => "claude",
            AgentKind::Opencode => "opencode",
        }
    }
}

/// A job as written in a job file (`quest-runner run --job FILE`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// Names the job's result and logs; generated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Where to fetch the revision from: a URL or a local path.
    pub repo: String,
    /// The revision: a full 40-hex-digit commit id.
    pub rev: String,
    /// The branch or tag that holds the revision.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<String>,
    pub trust: Trust,
    pub agent: AgentKind,
    /// The name of a configured account.
    pub account: String,
    pub prompt: String,
    /// A duration such as `30m`; defaults to the runner's configured timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

/// A job whose every field has been checked.
#[derive(Debug, Clone, Serialize)]
pub struct Job {
    pub id: String,
    pub repo: String,
    pub rev: String,
    pub git_ref: Option<String>,
    pub trust: Trust,
    pub agent: AgentKind,
    pub account: String,
    pub prompt: String,
    #[serde(with = "humantime_secs")]
    pub timeout: Duration,
}

/// Prompts are sent to a model; anything near this size is a mistake, not a task.
pub const MAX_PROMPT_BYTES: usize = 256 * 1024;
/// No job should hold an agent for longer than a day.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JobError {
    #[error("cannot read job file {path}: {message}")]
    Read { path: String, message: String },
    #[error("invalid job: {0}")]
    Parse(String),
    #[error("invalid job field {field:?}: {message}")]
    Field {
        field: &'static str,
        message: String,
    },
    /// A value of the wrong type, or an unknown field, found while parsing.
    #[error("invalid job field {name:?}: {message}{example}")]
    Invalid {
        name: String,
        message: String,
        example: &'static str,
    },
}

/// What a job field accepts, as docs/jobs.md's job table says.
fn example(name: &str) -> &'static str {
    match name {
        "trust" => "; e.g. \"trust\": \"trusted\" or \"untrusted\"",
        "agent" => "; e.g. \"agent\": \"claude\" or \"opencode\"",
        "timeout" => "; e.g. \"timeout\": \"30m\" (or \"2h\", \"90s\")",
        "rev" => "; e.g. \"rev\": a full 40-hex commit id",
        "repo" => "; e.g. \"repo\": \"https://github.com/owner/name\" or an absolute path",
        "prompt" => "; e.g. \"prompt\": \"fix the failing test in src/lib.rs\"",
        _ => "",
    }
}

fn field(field: &'static str, message: impl Into<String>) -> JobError {
    JobError::Field {
        field,
        message: message.into(),
    }
}

impl JobSpec {
    pub fn from_file(path: &Path) -> Result<JobSpec, JobError> {
        let text = std::fs::read_to_string(path).map_err(|e| JobError::Read {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        JobSpec::from_json(&text)
    }

    /// serde's messages already name the unknown or missing field, or the bad variant.
    pub fn from_json(text: &str) -> Result<JobSpec, JobError> {
        serde_json::from_str(text).map_err(|e| match crate::util::json_path::locate(text, &e) {
            (Some(name), message) => JobError::Invalid {
                example: example(&name),
                name,
                message,
            },
            (None, message) => JobError::Parse(message),
        })
    }

    /// Checks every field; `default_timeout` applies when the job names none.
    pub fn validate(self, default_timeout: Duration) -> Result<Job, JobError> {
        let id = match self.id {
            Some(id) => {
                check_id(&id)?;
                id
            }
            None => new_id(),
        };
        check_repo(&self.repo)?;
        let rev = self.rev.to_ascii_lowercase();
        if !crate::util::git_names::is_full_rev(&rev) {
            return Err(field(
                "rev",
                format!("{:?} is not a full 40-hex-digit commit id", self.rev),
            ));
        }
        if let Some(r) = &self.git_ref {
            if !crate::util::git_names::is_ref_name(r) {
                return Err(field("ref", format!("{r:?} is not a branch or tag name")));
            }
        }
        if !is_name(&self.account) {
            return Err(field(
                "account",
                format!(
                    "{:?} is not an account name (letters, digits, . _ -)",
                    self.account
                ),
            ));
        }
        if self.prompt.trim().is_empty() {
            return Err(field("prompt", "is empty"));
        }
        if self.prompt.len() > MAX_PROMPT_BYTES {
            return Err(field(
                "prompt",
                format!(
                    "is {} bytes; the limit is {MAX_PROMPT_BYTES}",
                    self.prompt.len()
                ),
            ));
        }
        if self.prompt.contains('\0') {
            return Err(field("prompt", "contains a NUL byte"));
        }
        let timeout = match &self.timeout {
            None => default_timeout,
            Some(text) => {
                let t = humantime::parse_duration(text).map_err(|e| {
                    let why = format!("{text:?} is not a duration ({e}){}", example("timeout"));
                    field("timeout", why)
                })?;
                if t.is_zero() || t > MAX_TIMEOUT {
                    return Err(field(
                        "timeout",
                        format!("{text:?} is not between 1s and 24h"),
                    ));
                }
                t
            }
        };
        Ok(Job {
            id,
            repo: self.repo,
            rev,
            git_ref: self.git_ref,
            trust: self.trust,
            agent: self.agent,
            account: self.account,
            prompt: self.prompt,
            timeout,
        })
    }
}

/// Job ids name directories under the state dir and the job's ref in its repository's shared
/// clone (`refs/quest/jobs/<id>`), so an id must be a plain file name and a ref name at once:
/// one git refuses (`a..b`, `x.lock`, `x.`) would let the job run and then lose its commits.
/// What else the runner derives from an id (its cgroup, its bridge's sockets) holds for every
/// id this accepts: the length bound keeps `job-<id>` a file name, and the sockets' addresses
/// do not contain the id (src/agentnet.rs).
pub fn check_id(id: &str) -> Result<(), JobError> {
    match id_problem(id) {
        None => Ok(()),
        Some(rule) => Err(field(
            "id",
            format!("{id:?} is not a job id: {rule} ({ID_RULES})"),
        )),
    }
}

/// The rules of [`check_id`], as an error states them.
pub const ID_RULES: &str = "a job id is 1-64 letters, digits, . _ -, not starting or ending \
     with a dot, without `..`, not ending in `.lock`";

/// The first rule `id` breaks, if any.
fn id_problem(id: &str) -> Option<&'static str> {
    if id.is_empty() || id.len() > 64 {
        Some("it is empty or longer than 64 bytes")
    } else if !id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-')
    {
        Some("it has a character other than letters, digits, . _ -")
    } else if id.starts_with('.') {
        Some("it starts with a dot")
    } else if id.ends_with('.') {
        Some("it ends with a dot, which git refuses in a ref name")
    } else if id.contains("..") {
        Some("it contains `..`, which git refuses in a ref name")
    } else if id.ends_with(".lock") {
        Some("it ends in `.lock`, which git refuses in a ref name")
    } else {
        None
    }
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s != "."
        && s != ".."
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-')
}

/// A time-ordered, unique id: `YYYYMMDDTHHMMSS-<6 hex>`.
fn new_id() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let stamp = humantime::format_rfc3339_seconds(SystemTime::now())
        .to_string()
        .replace(['-', ':'], "")
        .trim_end_matches('Z')
        .to_string();
    let noise = now.subsec_nanos() ^ std::process::id().rotate_left(16);
    format!("{stamp}-{:06x}", noise & 0xff_ffff)
}

/// Git URLs the runner fetches from: https, ssh, git, file, scp-like `user@host:path`, or an
/// existing local path. `ext::` and other transport helpers could run programs.
fn check_repo(repo: &str) -> Result<(), JobError> {
    if repo.trim().is_empty() {
        return Err(field("repo", "is empty"));
    }
    if repo.starts_with('-') || repo.chars().any(|c| c.is_control()) {
        return Err(field(
            "repo",
            format!("{repo:?} is not a repository URL or path"),
        ));
    }
    if let Some((scheme, rest)) = repo.split_once("://") {
        if !matches!(scheme, "https" | "http" | "ssh" | "git" | "file") {
            return Err(field(
                "repo",
                format!("the {scheme}:// transport is not allowed"),
            ));
        }
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (user, host) = match authority.rsplit_once('@') {
            Some((user, host)) => (Some(user), host),
            None => (None, authority),
        };
        let host = host.trim_start_matches('[');
        let port = host.rsplit_once(':').map(|(_, port)| port);
        return no_option_like(repo, [user, Some(host), port, Some(path)]);
    }
    if repo.contains("::") {
        return Err(field(
            "repo",
            format!("{repo:?}: transport helpers are not allowed"),
        ));
    }
    if Path::new(repo).is_absolute() || repo.starts_with('.') {
        if !Path::new(repo).exists() {
            return Err(field("repo", format!("{repo} does not exist")));
        }
        return Ok(());
    }
    // scp-like syntax: [user@]host:path
    if let Some((authority, path)) = repo
        .split_once(':')
        .filter(|(host, _)| !host.is_empty() && !host.contains('/'))
    {
        let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        return no_option_like(repo, [Some(host.trim_start_matches('[')), Some(path)]);
    }
    Err(field(
        "repo",
        format!("{repo:?} is not a repository URL or absolute path"),
    ))
}

/// Refuses a URL whose user, host, port or path starts with `-`: git hands the host to ssh as an
/// argument, so `ssh://-oProxyCommand=...` would be an ssh option that runs a program (git
/// itself blocks it too, but only when the fetch runs; a job is refused at validation).
fn no_option_like<const N: usize>(repo: &str, parts: [Option<&str>; N]) -> Result<(), JobError> {
    match parts.into_iter().flatten().find(|p| p.starts_with('-')) {
        Some(part) => Err(field(
            "repo",
            format!(
                "{repo:?}: {part:?} starts with '-', which ssh and git would read as an option"
            ),
        )),
        None => Ok(()),
    }
}

mod humantime_secs {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }
}

#[cfg(test)]
#[path = "job_tests.rs"]
mod tests;
