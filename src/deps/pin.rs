//! What a lock pins, as the runner takes it: each artifact by its hash, at an address on one
//! of the fixed public registries, or the reason an entry is not taken.
//!
//! Every string here came from a file of the revision's, so an address is taken apart and
//! checked before it names anything: `https` only, a host of [`REGISTRIES`], a path without
//! a query, fragment, `..` or control character. What a job is later served is looked up by
//! the same canonical path ([`RegistryUrl::key`]), so two spellings cannot name two things.

use serde::Serialize;

use super::digest::Digest;
pub use crate::sandbox::policy::REGISTRIES;

/// The ecosystem an artifact belongs to: how its metadata is found and served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Ecosystem {
    Npm,
    Pypi,
    Crates,
}

/// An `https` address on one of the fixed registries.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct RegistryUrl {
    pub host: String,
    /// The path as the lock spells it (and as it is fetched).
    pub path: String,
}

impl RegistryUrl {
    /// `url` if it is an address the runner fetches from.
    pub fn parse(url: &str) -> Result<RegistryUrl, String> {
        let rest = url
            .strip_prefix("https://")
            .ok_or_else(|| format!("{url:?} is not an https address on a fixed registry"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, "/"),
        };
        let host = authority
            .strip_suffix(":443")
            .unwrap_or(authority)
            .to_ascii_lowercase();
        if !REGISTRIES.contains(&host.as_str()) {
            return Err(format!(
                "{url:?} is not on the fixed registries ({})",
                REGISTRIES.join(", ")
            ));
        }
        // A fragment (pip's `#sha256=`) is the client's, never sent.
        let path = path.split('#').next().unwrap_or(path);
        canonical_path(path).map_err(|why| format!("{url:?}: {why}"))?;
        Ok(RegistryUrl {
            host,
            path: path.to_string(),
        })
    }

    /// What a job's request for this artifact is looked up by.
    pub fn key(&self) -> (String, String) {
        // parse checked it.
        let path = canonical_path(&self.path).unwrap_or_default();
        (self.host.clone(), path)
    }

    pub fn url(&self) -> String {
        format!("https://{}{}", self.host, self.path)
    }
}

/// `path` percent-decoded, if it is a plain path: absolute, no query, no `.` or `..`
/// segment, no control character or backslash.
pub fn canonical_path(path: &str) -> Result<String, String> {
    if !path.starts_with('/') {
        return Err("the path is not absolute".into());
    }
    if path.contains('?') {
        return Err("an artifact's address takes no query".into());
    }
    let decoded = percent_encoding::percent_decode_str(path)
        .decode_utf8()
        .map_err(|_| "the path is not UTF-8 once decoded".to_string())?;
    if decoded.chars().any(|c| c.is_control() || c == '\\') {
        return Err("the path holds a control character or a backslash".into());
    }
    if decoded.split('/').any(|s| s == "." || s == "..") {
        return Err("the path holds a . or .. segment".into());
    }
    Ok(decoded.into_owned())
}

/// One artifact a lock pins by its address and hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Artifact {
    pub ecosystem: Ecosystem,
    pub name: String,
    pub version: String,
    #[serde(serialize_with = "key")]
    pub digest: Digest,
    pub url: RegistryUrl,
    /// The file's name on the registry (PyPI's wheel or sdist name; empty elsewhere).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub filename: String,
    /// PyPI's `requires-python` of the file, which pip selects by.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requires_python: Option<String>,
    /// npm's version entry for a packument: its `dependencies`, `bin`, `engines`, ... as the
    /// lock records them.
    #[serde(skip)]
    pub npm_entry: Option<serde_json::Map<String, serde_json::Value>>,
    /// The lock that pins it, as a path in the revision.
    pub lock: String,
}

fn key<S: serde::Serializer>(d: &Digest, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&d.key())
}

/// A PyPI requirement pinned by hashes only (`name==version --hash=sha256:…`): its files are
/// found on PyPI's simple page, by hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HashPinned {
    /// The lock that pins it, as a path in the revision.
    pub lock: String,
    pub name: String,
    pub version: String,
    pub hashes: Vec<Digest>,
}

/// What a lock pins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pin {
    Artifact(Artifact),
    Pypi(HashPinned),
}

/// An entry of a lock that is not taken, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Skipped {
    /// The lock file, as a path in the revision.
    pub lock: String,
    /// The entry, as its lock names it.
    pub entry: String,
    pub why: String,
}

/// PEP 503's normal form of a project name: lowercase, every run of `-`, `_`, `.` one `-`.
pub fn pypi_normal(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut dash = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            dash = true;
            continue;
        }
        if dash && !out.is_empty() {
            out.push('-');
        }
        dash = false;
        out.push(c.to_ascii_lowercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_addresses_on_the_fixed_registries() {
        let u = RegistryUrl::parse("https://registry.npmjs.org/@types%2fnode/-/node-1.0.0.tgz")
            .unwrap();
        assert_eq!(u.key().1, "/@types/node/-/node-1.0.0.tgz");
        for bad in [
            "http://registry.npmjs.org/a/-/a-1.tgz",
            "https://evil.example/a/-/a-1.tgz",
            "https://registry.npmjs.org.evil.example/a",
            "https://registry.npmjs.org/a/../b",
            "https://registry.npmjs.org/a/%2e%2e/b",
            "https://registry.npmjs.org/a?x=1",
            "https://registry.npmjs.org/a%00b",
            "git+ssh://git@github.com/a/b.git",
            "file:../local",
        ] {
            assert!(RegistryUrl::parse(bad).is_err(), "{bad}");
        }
        let f =
            RegistryUrl::parse("https://files.pythonhosted.org:443/packages/a/b/x.whl#sha256=00")
                .unwrap();
        assert_eq!(f.path, "/packages/a/b/x.whl");
    }

    #[test]
    fn pypi_names_normalise() {
        assert_eq!(pypi_normal("Foo.Bar__baz"), "foo-bar-baz");
        assert_eq!(pypi_normal("six"), "six");
    }
}
