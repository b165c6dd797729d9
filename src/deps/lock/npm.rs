//! npm's `package-lock.json` and `npm-shrinkwrap.json`, lockfile versions 2 and 3: the
//! `packages` map, each installed package with its `resolved` address and `integrity`.
//! Version 1 (npm 6 and older) keeps a nested tree that later npm rewrites on install; it is
//! refused with the command that upgrades it.

use serde::Deserialize;

use super::Parsed;
use crate::deps::digest::Digest;
use crate::deps::pin::{Artifact, Ecosystem, Pin, RegistryUrl};

#[derive(Deserialize)]
struct NpmLock {
    #[serde(rename = "lockfileVersion")]
    version: Option<u64>,
    #[serde(default)]
    packages: serde_json::Map<String, serde_json::Value>,
}

/// The fields of a version entry a packument carries, when the lock has them.
const ENTRY_FIELDS: &[&str] = &[
    "dependencies",
    "optionalDependencies",
    "peerDependencies",
    "peerDependenciesMeta",
    "bin",
    "engines",
    "os",
    "cpu",
    "license",
    "hasInstallScript",
    "deprecated",
];

pub(super) fn parse(path: &str, text: &str) -> Result<Parsed, String> {
    let lock: NpmLock =
        serde_json::from_str(text).map_err(|e| format!("{path} is not an npm lockfile: {e}"))?;
    match lock.version {
        Some(2 | 3) => {}
        Some(v) => {
            return Err(format!(
                "{path} is lockfile version {v}; the runner reads versions 2 and 3 \
                 (`npm install --package-lock-only` with npm 7 or later writes one)"
            ))
        }
        None => {
            return Err(format!(
                "{path} has no lockfileVersion: not an npm lockfile"
            ))
        }
    }
    let mut out = Parsed::default();
    for (key, entry) in &lock.packages {
        // The root project, and workspaces' own directories.
        if key.is_empty() {
            continue;
        }
        let Some(entry) = entry.as_object() else {
            out.skip(path, key, "the entry is not an object");
            continue;
        };
        let field = |f: &str| entry.get(f).and_then(|v| v.as_str());
        if entry.get("link").and_then(|v| v.as_bool()) == Some(true)
            || entry.get("inBundle").and_then(|v| v.as_bool()) == Some(true)
        {
            continue;
        }
        let name = match field("name") {
            Some(n) => n.to_string(),
            None => match key.rsplit_once("node_modules/") {
                Some((_, n)) => n.to_string(),
                // A workspace package (`packages/a`): the project's own, not a download.
                None => continue,
            },
        };
        let version = field("version").unwrap_or_default().to_string();
        let Some(integrity) = field("integrity") else {
            if field("resolved").is_some() {
                out.skip(path, key, "no integrity: nothing to verify it by");
            }
            continue;
        };
        // npm with `omit-lockfile-registry-resolved` writes no address for a package of the
        // default registry: it is the registry's own tarball address of the version.
        let resolved = match field("resolved") {
            Some(r) => r.to_string(),
            None => default_tarball(&name, &version),
        };
        let url = match RegistryUrl::parse(&resolved) {
            Ok(u) => u,
            Err(why) => {
                out.skip(path, key, why);
                continue;
            }
        };
        let digest = match Digest::from_sri(integrity) {
            Ok(d) => d,
            Err(why) => {
                out.skip(path, key, why);
                continue;
            }
        };
        let npm_entry = ENTRY_FIELDS
            .iter()
            .filter_map(|f| entry.get(*f).map(|v| (f.to_string(), v.clone())))
            .collect();
        out.pins.push(Pin::Artifact(Artifact {
            ecosystem: Ecosystem::Npm,
            name,
            version,
            digest,
            url,
            filename: String::new(),
            requires_python: None,
            npm_entry: Some(npm_entry),
            lock: path.to_string(),
        }));
    }
    Ok(out)
}

/// Where registry.npmjs.org serves `name`'s `version`: `/<name>/-/<basename>-<version>.tgz`,
/// the scope left out of the file's name.
fn default_tarball(name: &str, version: &str) -> String {
    let base = name.rsplit('/').next().unwrap_or(name);
    format!("https://registry.npmjs.org/{name}/-/{base}-{version}.tgz")
}
