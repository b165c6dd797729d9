//! The runner's configuration: one JSON file, by default `<state dir>/config.json`.
//!
//! Unknown fields are refused so a misspelt setting fails loudly instead of silently doing
//! nothing. Secrets never live here: accounts point at files read at run time.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub nix: NixConfig,
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
    #[error("invalid config {path}: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("invalid config {path}: nix option name {name:?} is not a nix setting name")]
    BadNixOption { path: PathBuf, name: String },
}

impl Config {
    /// Loads `path`. A missing file is an error only when the operator named it (`required`);
    /// the default location may simply not exist yet.
    pub fn load(path: &Path, required: bool) -> Result<Config, ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => {
                return Ok(Config::default())
            }
            Err(source) => {
                return Err(ConfigError::Read {
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        let config: Config = serde_json::from_str(&text).map_err(|source| ConfigError::Parse {
            path: path.to_path_buf(),
            source,
        })?;
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
    fn missing_default_is_empty_but_missing_named_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent.json");
        assert_eq!(Config::load(&path, false).unwrap(), Config::default());
        assert!(Config::load(&path, true).is_err());
    }
}
