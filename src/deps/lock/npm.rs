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
        match entry_artifact(path, key, entry) {
            Ok(Some(a)) => out.pins.push(Pin::Artifact(a)),
            Ok(None) => {}
            Err(why) => out.skip(path, key, why),
        }
    }
    Ok(out)
}

/// The artifact of one `packages` entry; `None` for one that is no download (a link, a
/// bundled package, a workspace's own), `Err` for one that is not taken.
fn entry_artifact(
    path: &str,
    key: &str,
    entry: &serde_json::Value,
) -> Result<Option<Artifact>, String> {
    let entry = entry.as_object().ok_or("the entry is not an object")?;
    let field = |f: &str| entry.get(f).and_then(|v| v.as_str());
    let flag = |f: &str| entry.get(f).and_then(|v| v.as_bool()) == Some(true);
    if flag("link") || flag("inBundle") {
        return Ok(None);
    }
    let name = match field("name") {
        Some(n) => n.to_string(),
        None => match key.rsplit_once("node_modules/") {
            Some((_, n)) => n.to_string(),
            // A workspace package (`packages/a`): the project's own, not a download.
            None => return Ok(None),
        },
    };
    let version = field("version").unwrap_or_default().to_string();
    let Some(integrity) = field("integrity") else {
        return match field("resolved") {
            Some(_) => Err("no integrity: nothing to verify it by".into()),
            None => Ok(None),
        };
    };
    // npm with `omit-lockfile-registry-resolved` writes no address for a package of the
    // default registry: it is the registry's own tarball address of the version.
    let resolved = match field("resolved") {
        Some(r) => r.to_string(),
        None => default_tarball(&name, &version),
    };
    let url = RegistryUrl::parse(&resolved)?;
    let digest = Digest::from_sri(integrity)?;
    let npm_entry = ENTRY_FIELDS
        .iter()
        .filter_map(|f| entry.get(*f).map(|v| (f.to_string(), v.clone())))
        .collect();
    Ok(Some(Artifact {
        ecosystem: Ecosystem::Npm,
        name,
        version,
        digest,
        url,
        filename: String::new(),
        requires_python: None,
        npm_entry: Some(npm_entry),
        lock: path.to_string(),
    }))
}

/// Where registry.npmjs.org serves `name`'s `version`: `/<name>/-/<basename>-<version>.tgz`,
/// the scope left out of the file's name.
fn default_tarball(name: &str, version: &str) -> String {
    let base = name.rsplit('/').next().unwrap_or(name);
    format!("https://registry.npmjs.org/{name}/-/{base}-{version}.tgz")
}
