//! Cargo's `Cargo.lock`: each package from crates.io with its `checksum`, the SHA-256 of the
//! `.crate` file (format versions 2 to 4 inline; version 1 in its `[metadata]` table).

use std::collections::BTreeMap;

use serde::Deserialize;

use super::Parsed;
use crate::deps::digest::{Algo, Digest};
use crate::deps::pin::{Artifact, Ecosystem, Pin, RegistryUrl};

/// The source crates.io's packages have in a lock, whichever protocol fetched them.
const CRATES_IO: &[&str] = &[
    "registry+https://github.com/rust-lang/crates.io-index",
    "sparse+https://index.crates.io/",
];

#[derive(Deserialize)]
struct CargoLock {
    #[serde(default)]
    package: Vec<Package>,
    #[serde(default)]
    metadata: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct Package {
    name: String,
    version: String,
    source: Option<String>,
    checksum: Option<String>,
}

pub(super) fn parse(path: &str, text: &str) -> Result<Parsed, String> {
    let lock: CargoLock =
        toml::from_str(text).map_err(|e| format!("{path} is not a Cargo lockfile: {e}"))?;
    let mut out = Parsed::default();
    for p in lock.package {
        let entry = format!("{} {}", p.name, p.version);
        let Some(source) = &p.source else {
            // A workspace member or path dependency: the project's own.
            continue;
        };
        if !CRATES_IO.contains(&source.as_str()) {
            out.skip(path, entry, format!("from {source}, not crates.io"));
            continue;
        }
        let checksum = p.checksum.clone().or_else(|| {
            lock.metadata
                .get(&format!("checksum {} {} ({source})", p.name, p.version))
                .cloned()
        });
        let Some(checksum) = checksum else {
            out.skip(path, entry, "no checksum: nothing to verify it by");
            continue;
        };
        let valid_name = !p.name.is_empty()
            && p.name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        let valid_version = !p.version.is_empty()
            && p.version
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+'));
        if !valid_name || !valid_version {
            out.skip(path, entry, "not a crate name and version");
            continue;
        }
        let url = RegistryUrl::parse(&crate_url(&p.name, &p.version));
        let digest = Digest::from_hex(Algo::Sha256, &checksum);
        match (url, digest) {
            (Ok(url), Ok(digest)) => out.pins.push(Pin::Artifact(Artifact {
                ecosystem: Ecosystem::Crates,
                name: p.name,
                version: p.version,
                digest,
                url,
                filename: String::new(),
                requires_python: None,
                npm_entry: None,
                lock: path.to_string(),
            })),
            (Err(why), _) | (_, Err(why)) => out.skip(path, entry, why),
        }
    }
    Ok(out)
}

/// Where crates.io serves a crate's file: the address the index's `config.json` the runner
/// serves ([`crate::deps::served`]) tells cargo.
pub fn crate_url(name: &str, version: &str) -> String {
    format!("https://static.crates.io/crates/{name}/{name}-{version}.crate")
}
