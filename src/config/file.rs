//! The config file as people write it (`"1h"`, `"4G"`, `1.5`), and the one step that turns it
//! into [`Config`]'s typed values. A value that does not parse is an error naming its field
//! (`limits.memory: "4X": unknown unit`), so the rest of the runner never parses again.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::deps::DepsFile;
use super::field::FieldError;
use super::limits::LimitsFile;
use super::postgres::QueueFile;
use super::{
    Account, Config, EventsConfig, IsolationConfig, MetricsConfig, NetworkConfig, NixConfig,
    PushConfig,
};

/// The config file's fields; [`Config`] documents what each means.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ConfigFile {
    pub nix: NixConfig,
    pub accounts: BTreeMap<String, Account>,
    pub network: NetworkConfig,
    pub allow_untrusted: bool,
    /// A duration such as `1h`.
    pub default_timeout: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<usize>,
    #[serde(skip_serializing_if = "LimitsFile::is_empty")]
    pub limits: LimitsFile,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueFile>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub push: BTreeMap<String, PushConfig>,
    #[serde(skip_serializing_if = "MetricsConfig::is_default")]
    pub metrics: MetricsConfig,
    #[serde(skip_serializing_if = "EventsConfig::is_default")]
    pub events: EventsConfig,
    #[serde(skip_serializing_if = "DepsFile::is_empty")]
    pub deps: DepsFile,
    #[serde(skip_serializing_if = "IsolationConfig::is_default")]
    pub isolation: IsolationConfig,
}

impl Default for ConfigFile {
    fn default() -> ConfigFile {
        ConfigFile::from(Config::default())
    }
}

/// `message` and what `field` accepts, as docs/jobs.md's example config writes it.
pub fn with_example(field: &str, message: String) -> String {
    let last = field.rsplit('.').next().unwrap_or(field);
    let example = match last {
        "budget" => "\"budget\": 20000000 (tokens per UTC day, a whole number)",
        "tokens" => "\"tokens\": 2000000 (a whole number)",
        "agent" => "\"agent\": \"claude\" or \"opencode\"",
        "api_key_file" | "credentials_file" | "auth_file" | "password_file" => {
            "an absolute path, e.g. \"/run/secrets/anthropic-key\""
        }
        "default_timeout" => "\"default_timeout\": \"1h\" (or \"30m\", \"90s\")",
        "concurrency" => "\"concurrency\": 4",
        "allow_untrusted" => "\"allow_untrusted\": true",
        "extra_hosts" | "full_access_hosts" => "[\"mirror.example.org\"]",
        "memory" | "disk" | "disk_reserve" | "cache_size" | "max_artifact" => {
            "\"4G\" (or \"512M\", a number of bytes)"
        }
        "pids" => "\"pids\": 1024",
        "untrusted" | "trusted" => "\"gvisor\" or \"namespace\"",
        "cpus" => "\"cpus\": 1.5",
        "options" => "\"options\": {\"substituters\": \"\"}",
        "model" => "\"model\": \"anthropic/claude-sonnet-4-5\"",
        "base_url" => "\"base_url\": \"https://api.anthropic.com\"",
        "namespace" => "\"namespace\": \"quest\" (pushed branches are quest/...)",
        "branch" => "\"branch\": \"{job}\" (the job's id, under the namespace)",
        "listen" => "\"listen\": \"127.0.0.1:9477\" (an address and port)",
        "secret_file" => "an absolute path, e.g. \"/run/secrets/quest-webhook\"",
        "url" => "\"url\": \"https://hooks.example.org/quest\"",
        _ if message.starts_with("unknown field") => return message,
        _ => return format!("{message} (see the example config in docs/jobs.md)"),
    };
    format!("{message}; e.g. {example}")
}

impl TryFrom<ConfigFile> for Config {
    type Error = FieldError;

    /// Parses every value that has a unit, in the order of the file's fields.
    fn try_from(file: ConfigFile) -> Result<Config, FieldError> {
        let default_timeout = humantime::parse_duration(&file.default_timeout).map_err(|e| {
            let message = format!("{:?} is not a duration ({e})", file.default_timeout);
            FieldError::new("default_timeout", with_example("default_timeout", message))
        })?;
        if file.concurrency == Some(0) {
            return Err(FieldError::new("concurrency", "must be at least 1"));
        }
        let limits = file.limits.parse()?;
        let deps = file.deps.parse()?;
        let queue = file
            .queue
            .map(QueueFile::parse)
            .transpose()
            .map_err(|e| FieldError::new(&format!("queue.{}", e.field), e.message))?;
        super::push::check_all(&file.push)?;
        file.metrics.check()?;
        file.events.check()?;
        Ok(Config {
            nix: file.nix,
            accounts: file.accounts,
            network: file.network,
            allow_untrusted: file.allow_untrusted,
            default_timeout,
            concurrency_setting: file.concurrency,
            limits,
            queue,
            push: file.push,
            metrics: file.metrics,
            events: file.events,
            deps,
            isolation: file.isolation,
        })
    }
}

impl From<Config> for ConfigFile {
    /// What the file would say: durations and sizes written back with their units.
    fn from(config: Config) -> ConfigFile {
        ConfigFile {
            nix: config.nix,
            accounts: config.accounts,
            network: config.network,
            allow_untrusted: config.allow_untrusted,
            default_timeout: humantime::format_duration(config.default_timeout).to_string(),
            concurrency: config.concurrency_setting,
            limits: LimitsFile::from(&config.limits),
            queue: config.queue.map(QueueFile::from),
            push: config.push,
            metrics: config.metrics,
            events: config.events,
            deps: DepsFile::from(&config.deps),
            isolation: config.isolation,
        }
    }
}
