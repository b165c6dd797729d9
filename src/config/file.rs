//! The config file as people write it (`"1h"`, `"4G"`, `1.5`), and the one step that turns it
//! into [`Config`]'s typed values. A value that does not parse is an error naming its field
//! (`limits.memory: "4X": unknown unit`), so the rest of the runner never parses again.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::limits::LimitsFile;
use super::postgres::QueueFile;
use super::{Account, Config, NetworkConfig, NixConfig};

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
}

impl Default for ConfigFile {
    fn default() -> ConfigFile {
        ConfigFile::from(Config::default())
    }
}

/// A config field whose value is wrong, and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: &str, message: impl Into<String>) -> FieldError {
        FieldError {
            field: field.to_string(),
            message: message.into(),
        }
    }
}

impl TryFrom<ConfigFile> for Config {
    type Error = FieldError;

    /// Parses every value that has a unit, in the order of the file's fields.
    fn try_from(file: ConfigFile) -> Result<Config, FieldError> {
        let default_timeout = humantime::parse_duration(&file.default_timeout)
            .map_err(|e| FieldError::new("default_timeout", e.to_string()))?;
        if file.concurrency == Some(0) {
            return Err(FieldError::new("concurrency", "must be at least 1"));
        }
        let limits = file.limits.parse()?;
        let queue = file
            .queue
            .map(QueueFile::parse)
            .transpose()
            .map_err(|m| FieldError::new("queue", m))?;
        Ok(Config {
            nix: file.nix,
            accounts: file.accounts,
            network: file.network,
            allow_untrusted: file.allow_untrusted,
            default_timeout,
            concurrency_setting: file.concurrency,
            limits,
            queue,
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
        }
    }
}
