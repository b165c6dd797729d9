//! The lockfiles the runner reads, one parser each: pure functions from a lock's bytes (read
//! as data from the revision, never run) to what it pins ([`Parsed`]). An entry the runner
//! does not take (a git or local dependency, an address off the fixed registries, a weak
//! hash) is listed with its reason; a lock that does not parse at all is an error naming the
//! file and what is wrong with it.

mod cargo;
mod npm;
mod python;

pub use python::fits_this_host;

use super::pin::{Pin, Skipped};

/// The kinds of lock, by file name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// `package-lock.json`, `npm-shrinkwrap.json` (lockfile v2 and v3).
    Npm,
    /// `requirements*.txt` with `--hash`.
    Requirements,
    /// `uv.lock`.
    Uv,
    /// `Cargo.lock`.
    Cargo,
}

impl LockKind {
    /// The kind of a file of this name, if it is a lock the runner reads.
    pub fn of(file_name: &str) -> Option<LockKind> {
        match file_name {
            "package-lock.json" | "npm-shrinkwrap.json" => Some(LockKind::Npm),
            "uv.lock" => Some(LockKind::Uv),
            "Cargo.lock" => Some(LockKind::Cargo),
            n if n.starts_with("requirements") && n.ends_with(".txt") => {
                Some(LockKind::Requirements)
            }
            _ => None,
        }
    }
}

/// What one lock pins, and the entries it names that are not taken.
#[derive(Debug, Default)]
pub struct Parsed {
    pub pins: Vec<Pin>,
    pub skipped: Vec<Skipped>,
}

impl Parsed {
    fn skip(&mut self, lock: &str, entry: impl Into<String>, why: impl Into<String>) {
        self.skipped.push(Skipped {
            lock: lock.to_string(),
            entry: entry.into(),
            why: why.into(),
        });
    }
}

/// Parses the lock at `path` (a path in the revision, for messages) of `kind`.
pub fn parse(kind: LockKind, path: &str, bytes: &[u8]) -> Result<Parsed, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("{path} is not UTF-8: {e}"))?;
    match kind {
        LockKind::Npm => npm::parse(path, text),
        LockKind::Requirements => Ok(python::parse_requirements(path, text)),
        LockKind::Uv => python::parse_uv(path, text),
        LockKind::Cargo => cargo::parse(path, text),
    }
}

#[cfg(test)]
mod tests;
