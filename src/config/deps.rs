//! `deps` in the config: the bounds of the dependency cache ([`crate::deps`]), as the file
//! writes them (sizes with units) and as the runner uses them (bytes).

use serde::{Deserialize, Serialize};

use super::field::FieldError;
use super::limits::Size;

/// The most the cache holds by default: a few hundred projects' locks.
pub const DEFAULT_CACHE_SIZE: u64 = 20 << 30;
/// The largest artifact fetched by default (the largest wheels, torch's, are ~1 GB).
pub const DEFAULT_MAX_ARTIFACT: u64 = 2 << 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DepsConfig {
    /// Past this, a job's fetch is followed by removing the least recently used artifacts
    /// (`quest-runner cache gc` does the same at any time).
    pub cache_size: u64,
    /// An artifact larger than this is refused, and nothing of it stored.
    pub max_artifact: u64,
}

impl Default for DepsConfig {
    fn default() -> DepsConfig {
        DepsConfig {
            cache_size: DEFAULT_CACHE_SIZE,
            max_artifact: DEFAULT_MAX_ARTIFACT,
        }
    }
}

/// `deps` as the config file writes it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DepsFile {
    /// A size [default: 20G].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_size: Option<Size>,
    /// A size [default: 2G].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_artifact: Option<Size>,
}

impl DepsFile {
    pub fn is_empty(&self) -> bool {
        *self == DepsFile::default()
    }

    pub fn parse(&self) -> Result<DepsConfig, FieldError> {
        let size = |field: &str, v: &Option<Size>, default: u64| match v {
            None => Ok(default),
            Some(s) => s
                .bytes()
                .map_err(|e| FieldError::new(&format!("deps.{field}"), e)),
        };
        Ok(DepsConfig {
            cache_size: size("cache_size", &self.cache_size, DEFAULT_CACHE_SIZE)?,
            max_artifact: size("max_artifact", &self.max_artifact, DEFAULT_MAX_ARTIFACT)?,
        })
    }
}

impl From<&DepsConfig> for DepsFile {
    fn from(c: &DepsConfig) -> DepsFile {
        let size = |v: u64, default: u64| (v != default).then_some(Size::Bytes(v));
        DepsFile {
            cache_size: size(c.cache_size, DEFAULT_CACHE_SIZE),
            max_artifact: size(c.max_artifact, DEFAULT_MAX_ARTIFACT),
        }
    }
}
