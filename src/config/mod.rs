//! The runner's configuration: one JSON file, by default `<state dir>/config.json`.
//!
//! Unknown fields are refused so a misspelt setting fails loudly instead of silently doing
//! nothing. Secrets never live here: accounts point at files read at run time. The file's
//! durations and sizes are parsed once, when it is loaded (`file.rs`): [`Config`] holds them
//! typed, and serializes back to the same format.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

mod accounts;
pub mod deps;
pub mod events;
mod field;
mod file;
pub mod isolation;
mod limits;
pub mod metrics;
pub mod postgres;
pub mod push;

pub use accounts::{Account, ClaudeAccount, OpencodeAccount};
pub use deps::{DepsConfig, DepsFile};
pub use events::{EventsConfig, Webhook};
pub use field::FieldError;
pub use file::ConfigFile;
pub use isolation::IsolationConfig;
pub use limits::{Count, LimitsConfig, LimitsFile, MilliCpus, Size};
pub use metrics::MetricsConfig;
pub use postgres::{QueueConfig, QueueFile};
pub use push::PushConfig;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(try_from = "ConfigFile", into = "ConfigFile")]
pub struct Config {
    pub nix: NixConfig,
    /// Logins the jobs run under, by name.
    pub accounts: BTreeMap<String, Account>,
    pub network: NetworkConfig,
    /// Run untrusted revisions (with no network; their devShell from substitutes and sandboxed
    /// builds only, inside the job's boundary) instead of refusing them.
    pub allow_untrusted: bool,
    /// The timeout of a job that names none (`1h` in the file).
    pub default_timeout: Duration,
    /// How many jobs `serve` runs at once [default: the number of cores]. Jobs mostly wait
    /// on the model, but each agent is a Node process of a few hundred MB. Read through
    /// [`Config::concurrency`]: the default is worked out only when `serve` needs it (finding
    /// the usable cores reads cgroup files, which a cache hit of `env` must not pay for).
    /// `concurrency` in the file.
    pub concurrency_setting: Option<usize>,
    /// Per-job limits of `serve` (its `--limit-*` flags win). Read at start: SIGHUP does
    /// not change them.
    pub limits: LimitsConfig,
    /// Where `serve`, `submit` and the other queue commands find the jobs: the state
    /// directory's own queue when absent, else a PostgreSQL database that runners on many
    /// hosts share. Read at start: SIGHUP does not change it.
    pub queue: Option<QueueConfig>,
    /// Where finished jobs' commits are pushed, by repository (its URL exactly as jobs name
    /// it); a repository not named here is never pushed.
    pub push: BTreeMap<String, PushConfig>,
    /// Where `serve` answers Prometheus and health checks (off when `listen` is absent).
    pub metrics: MetricsConfig,
    /// Where `serve` sends job events (webhooks, a command); none when empty.
    pub events: EventsConfig,
    /// The dependency cache's bounds.
    pub deps: DepsConfig,
    /// Which kernel answers each trust level's commands.
    pub isolation: IsolationConfig,
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
            default_timeout: Duration::from_secs(3600),
            concurrency_setting: None,
            limits: LimitsConfig::default(),
            queue: None,
            push: BTreeMap::new(),
            metrics: MetricsConfig::default(),
            events: EventsConfig::default(),
            deps: DepsConfig::default(),
            isolation: IsolationConfig::default(),
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

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct NixConfig {
    /// Extra `--option NAME VALUE` pairs for every `nix` the runner starts (for example
    /// `"substituters": ""` on a machine without a binary cache). They can change what a
    /// devShell evaluates to, so they are part of its cache key.
    pub options: BTreeMap<String, String>,
    /// The network of the devShell's nix in the job's boundary (docs/nix.md).
    pub network: NixNetwork,
}

/// What the devShell's nix reaches from the job's boundary.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum NixNetwork {
    /// The job's own network, as its commands have it: nix's fetches (flake inputs, tarballs,
    /// git over HTTPS; in setup (a) its fixed-output builds too) go through the job's proxy
    /// and decider, to the hosts the job may reach and no other, each request in the job's
    /// network log. An untrusted revision's policy reaches no host, so neither does its nix.
    #[default]
    Proxy,
    /// No network at all: a revision builds from what the store holds.
    None,
    /// Trusted revisions' nix fetches over the host's network, as before the boundary, and so
    /// reaches whatever the host can (a loopback service, a metadata address).
    Host,
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
    /// Every secret file: the accounts', the queue database's password file, the push
    /// credentials and the webhooks' secrets, with the config field naming each.
    pub fn secret_files(&self) -> Vec<(String, PathBuf)> {
        let mut files: Vec<(String, PathBuf)> = self
            .accounts
            .iter()
            .flat_map(|(name, account)| account.secret_files(name))
            .collect();
        if let Some(file) = self.queue.as_ref().and_then(|q| q.password_file.clone()) {
            files.push(("queue.password_file".to_string(), file));
        }
        for (repo, push) in &self.push {
            if let Some(file) = &push.credential_file {
                files.push((format!("push.{repo}.credential_file"), file.clone()));
            }
        }
        for (i, hook) in self.events.webhooks.iter().enumerate() {
            let field = format!("events.webhooks[{i}].secret_file");
            files.push((field, hook.secret_file.clone()));
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
        let Some(text) = read(path, required)? else {
            return Ok(Config::default());
        };
        let config = parse(path, &text)?;
        config.check_accounts(path)?;
        config.check_private_files(path)?;
        config.check_nix_options(path)?;
        Ok(config)
    }

    /// Each account's budget is at least a token, and its secret files are absolute paths.
    fn check_accounts(&self, path: &Path) -> Result<(), ConfigError> {
        let field = |field: String, message: String| ConfigError::Field {
            path: path.to_path_buf(),
            field,
            message,
        };
        for (name, account) in &self.accounts {
            if account.budget() == Some(0) {
                return Err(field(
                    format!("accounts.{name}.budget"),
                    "must be at least 1 (tokens per day)".into(),
                ));
            }
            for (name, file) in account.secret_files(name) {
                if !file.is_absolute() {
                    let message = format!("{} is not an absolute path", file.display());
                    return Err(field(name, message));
                }
            }
        }
        Ok(())
    }

    /// Every `nix.options` name is a Nix setting's: one starting with '-' would be read by
    /// nix as a flag.
    fn check_nix_options(&self, path: &Path) -> Result<(), ConfigError> {
        for name in self.nix.options.keys() {
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
        Ok(())
    }
}

/// The file's text; `None` when it does not exist and need not.
fn read(path: &Path, required: bool) -> Result<Option<String>, ConfigError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        // ENOTDIR: a part of the default path is no directory, so there is no file
        // either; the state directory's own check names that (exit 3, not bad input).
        Err(e)
            if !required
                && (e.kind() == std::io::ErrorKind::NotFound
                    || rustix::io::Errno::from_io_error(&e) == Some(rustix::io::Errno::NOTDIR)) =>
        {
            Ok(None)
        }
        Err(source) => Err(ConfigError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The file's JSON, with its durations and sizes parsed: the one place they are.
fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
    if text.trim().is_empty() {
        return Err(ConfigError::Empty {
            path: path.to_path_buf(),
        });
    }
    let file: ConfigFile = serde_json::from_str(text).map_err(|source| {
        // A wrong value names its field and what it takes, not only serde's line and column.
        let located = match crate::util::json_path::locate(text, &source) {
            (Some(field), message) => {
                let account = field.strip_prefix("accounts.").filter(|n| !n.contains('.'));
                let refined = account.and_then(|name| accounts::locate_error(text, name));
                let (field, message) = refined.unwrap_or((field, message));
                (Some(field), message)
            }
            other => other,
        };
        match located {
            (Some(field), message) => ConfigError::Field {
                path: path.to_path_buf(),
                message: file::with_example(&field, message),
                field,
            },
            (None, _) => ConfigError::Parse {
                path: path.to_path_buf(),
                source,
            },
        }
    })?;
    Config::try_from(file).map_err(|FieldError { field, message }| ConfigError::Field {
        path: path.to_path_buf(),
        field,
        message,
    })
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
