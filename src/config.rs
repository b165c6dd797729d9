//! The runner's configuration: one JSON file, by default `<state dir>/config.json`.
//!
//! Unknown fields are refused so a misspelt setting fails loudly instead of silently doing
//! nothing. Secrets never live here: accounts point at files read at run time.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub mod postgres;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub nix: NixConfig,
    /// Logins the jobs run under, by name.
    pub accounts: BTreeMap<String, Account>,
    pub network: NetworkConfig,
    /// Run untrusted revisions (with no network and no devShell) instead of refusing them.
    pub allow_untrusted: bool,
    /// The timeout of a job that names none, e.g. `1h`.
    pub default_timeout: String,
    /// How many jobs `serve` runs at once [default: the number of cores]. Jobs mostly wait
    /// on the model, but each agent is a Node process of a few hundred MB. Read through
    /// [`Config::concurrency`]: the default is worked out only when `serve` needs it (finding
    /// the usable cores reads cgroup files, which a cache hit of `env` must not pay for).
    #[serde(rename = "concurrency", skip_serializing_if = "Option::is_none")]
    pub concurrency_setting: Option<usize>,
    /// Per-job limits of `serve` (its `--limit-*` flags win). Read at start: SIGHUP does
    /// not change them.
    #[serde(skip_serializing_if = "LimitsConfig::is_empty")]
    pub limits: LimitsConfig,
    /// Where `serve`, `submit` and the other queue commands find the jobs: the state
    /// directory's own queue when absent, else a PostgreSQL database that runners on many
    /// hosts share. Read at start: SIGHUP does not change it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueConfig>,
}

/// The shared job queue (`queue` in the config): a PostgreSQL database.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct QueueConfig {
    /// A libpq connection string (`host=db.example.org dbname=quest user=runner`), a
    /// `postgresql://` URL, or the path of the server's socket directory or socket
    /// (`/run/postgresql`). Never a password: that is `password_file`'s.
    pub postgres: String,
    /// A file holding the database password, read at each connection (so a rotated password
    /// needs no restart). Jobs' commands are denied it, as account files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_file: Option<PathBuf>,
    /// How long a claimed job stays this runner's without a renewal (renewed every third of
    /// it): a runner that dies loses its jobs to the others this long after its last renewal.
    /// Default 30s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<String>,
}

impl QueueConfig {
    /// The default of `lease`.
    pub const DEFAULT_LEASE: std::time::Duration = std::time::Duration::from_secs(30);

    /// `lease`, parsed (checked when the config was loaded).
    pub fn lease(&self) -> std::time::Duration {
        self.lease
            .as_deref()
            .and_then(|l| humantime::parse_duration(l).ok())
            .unwrap_or(Self::DEFAULT_LEASE)
    }
}

/// Per-job limits: cgroup v2 where the runner's cgroup is delegated, rlimits or nothing
/// elsewhere (`doctor` and `serve`'s log say which).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// memory.max of each job: bytes, or a size such as `"4G"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<Size>,
    /// pids.max of each job (processes and threads); RLIMIT_NPROC where there is no pids
    /// controller.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    /// cpu.max of each job, in CPUs (`1.5`): a job is throttled to that share.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    /// The most one job may have on disk at once (checkout, temp dirs, its files and git
    /// data), or `"off"` [default: 10G]. See [`crate::disk`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk: Option<Size>,
    /// Space kept free on the file systems jobs write, or `"off"` [default: 1G or 5% of the
    /// file system, the smaller].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_reserve: Option<Size>,
    /// The most model tokens a job may use (input, output, cache reads and writes), counted
    /// by the model gateway: the request after the one that reaches it is refused and the
    /// job ends (`limit_fired: "tokens"`). Read for each job, so a reload applies it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
}

impl LimitsConfig {
    /// From the config's `limits.disk` and `limits.disk_reserve` (each a size or `"off"`).
    pub fn disk_limits(&self) -> Result<crate::disk::DiskLimits, String> {
        let limit = match &self.disk {
            None => Some(crate::disk::DEFAULT_LIMIT),
            Some(size) if size.is_off() => None,
            Some(size) => Some(size.bytes().map_err(|e| format!("limits.disk: {e}"))?),
        };
        let reserve = match &self.disk_reserve {
            None => crate::disk::Reserve::Default,
            Some(size) if size.is_off() => crate::disk::Reserve::Off,
            Some(size) => crate::disk::Reserve::Bytes(
                size.bytes()
                    .map_err(|e| format!("limits.disk_reserve: {e}"))?,
            ),
        };
        Ok(crate::disk::DiskLimits { limit, reserve })
    }

    pub fn is_empty(&self) -> bool {
        self == &LimitsConfig::default()
    }
}

/// A size in bytes, as a number or a string with a unit (`"512M"`, `"4G"`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Size {
    Bytes(u64),
    Text(String),
}

impl Size {
    /// `"off"`: the limit is not applied (only the disk limits take it).
    pub fn is_off(&self) -> bool {
        matches!(self, Size::Text(t) if t.trim().eq_ignore_ascii_case("off"))
    }

    pub fn bytes(&self) -> Result<u64, String> {
        match self {
            Size::Bytes(0) => Err("0 bytes is no limit".into()),
            Size::Bytes(b) => Ok(*b),
            Size::Text(t) => crate::util::units::parse_size(t),
        }
    }
}

/// One job per core: the agents' own work (Node, the sandbox, the job's commands) is what
/// uses the machine.
pub fn default_concurrency() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Default for Config {
    fn default() -> Config {
        Config {
            nix: NixConfig::default(),
            accounts: BTreeMap::new(),
            network: NetworkConfig::default(),
            allow_untrusted: false,
            default_timeout: "1h".to_string(),
            concurrency_setting: None,
            limits: LimitsConfig::default(),
            queue: None,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkConfig {
    /// Hosts trusted revisions may reach besides the package registries, for reads only
    /// (`GET`, `HEAD`), as the registries.
    pub extra_hosts: Vec<String>,
    /// Hosts trusted revisions may reach with every method (`PUT`, `POST`, ...): a host where
    /// jobs may publish or push. Named explicitly, never implied.
    pub full_access_hosts: Vec<String>,
}

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

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct NixConfig {
    /// Extra `--option NAME VALUE` pairs for every `nix` the runner starts (for example
    /// `"substituters": ""` on a machine without a binary cache). They can change what a
    /// devShell evaluates to, so they are part of its cache key.
    pub options: BTreeMap<String, String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid config {path}: it is empty (write {{}} for the defaults)")]
    Empty { path: PathBuf },
    #[error("invalid config {path}: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("invalid config {path}: nix option name {name:?} is not a nix setting name")]
    BadNixOption { path: PathBuf, name: String },
    /// A secret (or the config file itself) where the sandbox cannot hide it.
    #[error("invalid config {path}: {source}")]
    Placement {
        path: PathBuf,
        #[source]
        source: Box<crate::sandbox::private::PlacementError>,
    },
    #[error("invalid config {path}: {field}: {message}")]
    Field {
        path: PathBuf,
        field: String,
        message: String,
    },
}

impl Config {
    /// Every secret file: the accounts' and the queue database's password file, with the
    /// config field naming each.
    pub fn secret_files(&self) -> Vec<(String, PathBuf)> {
        let mut files: Vec<(String, PathBuf)> = self
            .accounts
            .iter()
            .flat_map(|(name, account)| account.secret_files(name))
            .collect();
        if let Some(file) = self.queue.as_ref().and_then(|q| q.password_file.clone()) {
            files.push(("queue.password_file".to_string(), file));
        }
        files
    }

    /// Every secret file and the config file (when there is one), each with the directories
    /// that hide it from jobs' commands, resolved now; or why one cannot be hidden.
    pub fn hide_private_files(
        &self,
        config_file: Option<&Path>,
    ) -> Result<Vec<crate::sandbox::HiddenFile>, crate::sandbox::private::PlacementError> {
        use crate::sandbox::{private, PrivateKind};
        let platform = crate::sandbox::Platform::current();
        let mut hidden = Vec::new();
        // No file, nothing to hide (the default place, in the state directory, is hidden whole).
        if let Some(file) = config_file.filter(|f| f.symlink_metadata().is_ok()) {
            hidden.push(private::hide(
                "the config file",
                file,
                PrivateKind::Config,
                platform,
            )?);
        }
        for (what, file) in self.secret_files() {
            hidden.push(private::hide(&what, &file, PrivateKind::Account, platform)?);
        }
        Ok(hidden)
    }

    /// Refuses a secret (or the config file at `path` itself) in a directory the sandbox
    /// cannot hide from jobs (see `sandbox::private`): judged by what exists now, the rest by
    /// its path; a job checks again, fully, before it starts.
    pub fn check_private_files(&self, path: &Path) -> Result<(), ConfigError> {
        use crate::sandbox::{private, PrivateKind};
        let platform = crate::sandbox::Platform::current();
        let placement = |source| ConfigError::Placement {
            path: path.to_path_buf(),
            source: Box::new(source),
        };
        let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        private::check("the config file", &absolute, PrivateKind::Config, platform)
            .map_err(placement)?;
        for (field, file) in self.secret_files() {
            private::check(&field, &file, PrivateKind::Account, platform).map_err(placement)?;
        }
        Ok(())
    }

    /// Jobs at once for `serve`: the setting, else one per usable core.
    pub fn concurrency(&self) -> usize {
        self.concurrency_setting.unwrap_or_else(default_concurrency)
    }

    /// Loads `path`. A missing file is an error only when the operator named it (`required`);
    /// the default location may simply not exist yet.
    pub fn load(path: &Path, required: bool) -> Result<Config, ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            // ENOTDIR: a part of the default path is no directory, so there is no file
            // either; the state directory's own check names that (exit 3, not bad input).
            Err(e)
                if !required
                    && (e.kind() == std::io::ErrorKind::NotFound
                        || rustix::io::Errno::from_io_error(&e)
                            == Some(rustix::io::Errno::NOTDIR)) =>
            {
                return Ok(Config::default())
            }
            Err(source) => {
                return Err(ConfigError::Read {
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        if text.trim().is_empty() {
            return Err(ConfigError::Empty {
                path: path.to_path_buf(),
            });
        }
        let config: Config = serde_json::from_str(&text).map_err(|source| ConfigError::Parse {
            path: path.to_path_buf(),
            source,
        })?;
        humantime::parse_duration(&config.default_timeout).map_err(|e| ConfigError::Field {
            path: path.to_path_buf(),
            field: "default_timeout".to_string(),
            message: e.to_string(),
        })?;
        if config.concurrency_setting == Some(0) {
            return Err(ConfigError::Field {
                path: path.to_path_buf(),
                field: "concurrency".to_string(),
                message: "must be at least 1".to_string(),
            });
        }
        let field = |field: &str, message: String| ConfigError::Field {
            path: path.to_path_buf(),
            field: field.to_string(),
            message,
        };
        if let Some(memory) = &config.limits.memory {
            memory.bytes().map_err(|m| field("limits.memory", m))?;
        }
        config.limits.disk_limits().map_err(|m| {
            let (name, message) = m.split_once(": ").unwrap_or(("limits.disk", &m));
            field(name, message.to_string())
        })?;
        if config.limits.tokens == Some(0) {
            return Err(field("limits.tokens", "must be at least 1".into()));
        }
        if config.limits.pids == Some(0) {
            return Err(field("limits.pids", "must be at least 1".into()));
        }
        if let Some(cpus) = config.limits.cpus {
            crate::util::units::parse_cpus(&cpus.to_string())
                .map_err(|m| field("limits.cpus", m))?;
        }
        if let Some(queue) = &config.queue {
            postgres::check(queue).map_err(|m| field("queue", m))?;
        }
        for (name, account) in &config.accounts {
            if account.budget() == Some(0) {
                return Err(field(
                    &format!("accounts.{name}.budget"),
                    "must be at least 1 (tokens per day)".into(),
                ));
            }
            for (field, file) in account.secret_files(name) {
                if !file.is_absolute() {
                    return Err(ConfigError::Field {
                        path: path.to_path_buf(),
                        field,
                        message: format!("{} is not an absolute path", file.display()),
                    });
                }
            }
        }
        config.check_private_files(path)?;
        for name in config.nix.options.keys() {
            // An option name starting with '-' would be read by nix as a flag.
            let valid = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                && !name.starts_with('-');
            if !valid {
                return Err(ConfigError::BadNixOption {
                    path: path.to_path_buf(),
                    name: name.clone(),
                });
            }
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
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
}
