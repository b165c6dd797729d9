//! Per-job limits (`limits` in the config): as the file writes them ([`LimitsFile`]: sizes
//! with units, `"off"`, CPUs as a fraction) and as the runner uses them ([`LimitsConfig`]:
//! bytes, thousandths of a CPU, the disk limits), parsed once when the config is loaded.

use serde::{Deserialize, Serialize};

use super::field::FieldError;
use crate::disk::{DiskLimits, Reserve, DEFAULT_FILES, DEFAULT_LIMIT};

/// Per-job limits: cgroup v2 where the runner's cgroup is delegated, rlimits or nothing
/// elsewhere (`doctor` and `serve`'s log say which).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LimitsConfig {
    /// memory.max of each job, in bytes.
    pub memory: Option<u64>,
    /// pids.max of each job (processes and threads); RLIMIT_NPROC where there is no pids
    /// controller.
    pub pids: Option<u64>,
    /// cpu.max of each job: a job is throttled to that share.
    pub cpus: Option<MilliCpus>,
    /// The most one job may have on disk at once (checkout, temp dirs, its files and git
    /// data), in bytes and in files, and the bytes and inodes kept free for the next job.
    /// See [`crate::disk`].
    pub disk: DiskLimits,
    /// The most model tokens a job may use (input, output, cache reads and writes), counted
    /// by the model gateway: the request after the one that reaches it is refused and the
    /// job ends (`limit_fired: "tokens"`). Read for each job, so a reload applies it.
    pub tokens: Option<u64>,
}

/// A CPU share in thousandths of a CPU (`1.5` in the config is `MilliCpus(1500)`), as cgroup's
/// cpu.max wants it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MilliCpus(pub u64);

/// `limits` as the config file writes it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsFile {
    /// Bytes, or a size such as `"4G"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<Size>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    /// In CPUs (`1.5`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    /// A size, or `"off"` [default: 10G].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk: Option<Size>,
    /// A size, or `"off"` [default: 1G or 5% of the file system, the smaller].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_reserve: Option<Size>,
    /// Files (inodes), or `"off"` [default: 1000000].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_files: Option<Count>,
    /// Inodes, or `"off"` [default: 65536 or 5% of the file system's, the smaller].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_reserve_files: Option<Count>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
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

/// A number of files, as a number or `"off"` (a string of digits is read as the number).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Count {
    Number(u64),
    Text(String),
}

impl Count {
    /// The number, or `None` for `"off"`.
    pub fn limit(&self) -> Result<Option<u64>, String> {
        let n = match self {
            Count::Number(n) => *n,
            Count::Text(t) if t.trim().eq_ignore_ascii_case("off") => return Ok(None),
            Count::Text(t) => t.trim().parse().map_err(|_| {
                format!("{t:?} is not a number of files (a whole number, or \"off\")")
            })?,
        };
        match n {
            0 => Err("0 files is no limit (use \"off\")".into()),
            n => Ok(Some(n)),
        }
    }
}

/// `"off"`, or the number.
fn count_field(n: Option<u64>) -> Count {
    n.map_or_else(|| Count::Text("off".into()), Count::Number)
}

impl LimitsFile {
    /// From the config's `limits.disk`, `limits.disk_files` and their reserves (each a size or
    /// a count, or `"off"`); an error names the field.
    pub fn disk_limits(&self) -> Result<DiskLimits, FieldError> {
        let limit = match &self.disk {
            None => Some(DEFAULT_LIMIT),
            Some(size) if size.is_off() => None,
            Some(size) => Some(
                size.bytes()
                    .map_err(|e| FieldError::new("limits.disk", e))?,
            ),
        };
        let reserve = match &self.disk_reserve {
            None => Reserve::Default,
            Some(size) if size.is_off() => Reserve::Off,
            Some(size) => Reserve::Amount(
                size.bytes()
                    .map_err(|e| FieldError::new("limits.disk_reserve", e))?,
            ),
        };
        let files = match &self.disk_files {
            None => Some(DEFAULT_FILES),
            Some(n) => n
                .limit()
                .map_err(|e| FieldError::new("limits.disk_files", e))?,
        };
        let reserve_files = match &self.disk_reserve_files {
            None => Reserve::Default,
            Some(n) => n
                .limit()
                .map_err(|e| FieldError::new("limits.disk_reserve_files", e))?
                .map_or(Reserve::Off, Reserve::Amount),
        };
        Ok(DiskLimits {
            limit,
            files,
            reserve,
            reserve_files,
        })
    }

    pub fn is_empty(&self) -> bool {
        self == &LimitsFile::default()
    }

    /// The typed limits, or the first field that is wrong.
    pub fn parse(&self) -> Result<LimitsConfig, FieldError> {
        let memory = self
            .memory
            .as_ref()
            .map(|m| m.bytes().map_err(|m| FieldError::new("limits.memory", m)))
            .transpose()?;
        let disk = self.disk_limits()?;
        if self.tokens == Some(0) {
            return Err(FieldError::new("limits.tokens", "must be at least 1"));
        }
        if self.pids == Some(0) {
            return Err(FieldError::new("limits.pids", "must be at least 1"));
        }
        let cpus = self
            .cpus
            .map(|c| crate::util::units::parse_cpus(&c.to_string()))
            .transpose()
            .map_err(|m| FieldError::new("limits.cpus", m))?;
        Ok(LimitsConfig {
            memory,
            pids: self.pids,
            cpus: cpus.map(MilliCpus),
            disk,
            tokens: self.tokens,
        })
    }
}

impl From<&LimitsConfig> for LimitsFile {
    /// As the file would say it; a default leaves its field out.
    fn from(limits: &LimitsConfig) -> LimitsFile {
        let disk = match limits.disk.limit {
            Some(DEFAULT_LIMIT) => None,
            Some(bytes) => Some(Size::Bytes(bytes)),
            None => Some(Size::Text("off".into())),
        };
        let disk_reserve = match limits.disk.reserve {
            Reserve::Default => None,
            Reserve::Off => Some(Size::Text("off".into())),
            Reserve::Amount(bytes) => Some(Size::Bytes(bytes)),
        };
        let disk_files = match limits.disk.files {
            Some(DEFAULT_FILES) => None,
            n => Some(count_field(n)),
        };
        let disk_reserve_files = match limits.disk.reserve_files {
            Reserve::Default => None,
            Reserve::Off => Some(count_field(None)),
            Reserve::Amount(n) => Some(count_field(Some(n))),
        };
        LimitsFile {
            memory: limits.memory.map(Size::Bytes),
            pids: limits.pids,
            cpus: limits.cpus.map(|c| c.0 as f64 / 1000.0),
            disk,
            disk_reserve,
            disk_files,
            disk_reserve_files,
            tokens: limits.tokens,
        }
    }
}
