//! From what the locks pin to the artifacts the runner fetches and the metadata it serves:
//! where a requirements file names only hashes, the files on PyPI that have them; for each
//! crate, its line of crates.io's index. Each is fetched by the runner from the fixed
//! registries once and kept in the cache's `meta/`, so a warm job needs no network at all.
//!
//! What is kept is only ever tied to a hash the lock pins: a PyPI file whose sha256 is one
//! of the requirement's, an index line whose `cksum` is the lock's `checksum`. A registry
//! that answered otherwise adds nothing.

use serde::{Deserialize, Serialize};

use super::cache::DepCache;
use super::digest::{Algo, Digest, Hasher};
use super::fetch::Fetcher;
use super::pin::{pypi_normal, Artifact, Ecosystem, HashPinned, RegistryUrl, Skipped};

/// The most bytes of a PyPI simple page or a crate's index file the runner reads.
const MAX_DOCUMENT: u64 = 32 << 20;
const PYPI_JSON: &str = "application/vnd.pypi.simple.v1+json";

/// One file of a PyPI project, as kept in `meta/pypi` and served on its simple page.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct PypiFile {
    filename: String,
    url: String,
    digest: String,
    requires_python: Option<String>,
}

/// The files on PyPI that a hash-pinned requirement may be installed from on this host,
/// found by hash; `Err`: why none is.
pub async fn pypi_files(
    pin: &HashPinned,
    cache: &DepCache,
    fetcher: &Fetcher,
) -> Result<Vec<Artifact>, String> {
    let key = requirement_key(pin);
    let known: Option<Vec<PypiFile>> = cache
        .read_meta("pypi", &key)
        .and_then(|b| serde_json::from_slice(&b).ok());
    let files = match known {
        Some(files) => files,
        None => {
            let files = find_on_pypi(pin, fetcher).await?;
            let data = serde_json::to_vec(&files).map_err(|e| e.to_string())?;
            if let Err(e) = cache.write_meta("pypi", &key, &data) {
                tracing::warn!("keeping what PyPI said of {}: {e}", pin.name);
            }
            files
        }
    };
    let artifacts: Vec<Artifact> = files
        .into_iter()
        .filter_map(|f| {
            Some(Artifact {
                ecosystem: Ecosystem::Pypi,
                name: pin.name.clone(),
                version: pin.version.clone(),
                digest: Digest::from_key(&f.digest)?,
                url: RegistryUrl::parse(&f.url).ok()?,
                filename: f.filename,
                requires_python: f.requires_python,
                npm_entry: None,
                lock: pin.lock.clone(),
            })
        })
        .collect();
    if artifacts.is_empty() {
        return Err(format!(
            "no file of {}=={} on PyPI for this host has one of its {} pinned hashes",
            pin.name,
            pin.version,
            pin.hashes.len()
        ));
    }
    Ok(artifacts)
}

#[derive(Deserialize)]
struct SimplePage {
    #[serde(default)]
    files: Vec<SimpleFile>,
}

#[derive(Deserialize)]
struct SimpleFile {
    filename: String,
    url: String,
    #[serde(default)]
    hashes: std::collections::BTreeMap<String, String>,
    #[serde(rename = "requires-python")]
    requires_python: Option<String>,
}

async fn find_on_pypi(pin: &HashPinned, fetcher: &Fetcher) -> Result<Vec<PypiFile>, String> {
    let page_url = RegistryUrl::parse(&format!(
        "https://pypi.org/simple/{}/",
        pypi_normal(&pin.name)
    ))?;
    let body = fetcher
        .document(&page_url, PYPI_JSON, MAX_DOCUMENT)
        .await
        .map_err(|e| e.to_string())?;
    let page: SimplePage = serde_json::from_slice(&body)
        .map_err(|e| format!("{}: not PyPI's simple JSON: {e}", page_url.url()))?;
    let mut out = Vec::new();
    for file in page.files {
        let Some(sha) = file.hashes.get("sha256") else {
            continue;
        };
        let Ok(digest) = Digest::from_hex(Algo::Sha256, sha) else {
            continue;
        };
        if !pin.hashes.contains(&digest) || !super::lock::fits_this_host(&file.filename) {
            continue;
        }
        // Only an address the runner would fetch from is kept.
        let Ok(url) = RegistryUrl::parse(&file.url) else {
            continue;
        };
        out.push(PypiFile {
            filename: file.filename,
            url: url.url(),
            digest: digest.key(),
            requires_python: file.requires_python,
        });
    }
    Ok(out)
}

/// The requirement's name in `meta/pypi`: its normal name, version and hashes, hashed.
fn requirement_key(pin: &HashPinned) -> String {
    let mut hashes: Vec<String> = pin.hashes.iter().map(Digest::key).collect();
    hashes.sort();
    let mut h = Hasher::new(Algo::Sha256);
    h.update(pypi_normal(&pin.name).as_bytes());
    h.update(b"\0");
    h.update(pin.version.as_bytes());
    for k in hashes {
        h.update(b"\0");
        h.update(k.as_bytes());
    }
    h.finish().hex()
}

/// crates.io's index lines of the locked crates (their names, versions and checksums), by
/// each crate's lowercase name; the crates whose line was not found are in `Err`s.
pub async fn crate_index_lines(
    crates: &[&Artifact],
    cache: &DepCache,
    fetcher: &Fetcher,
) -> (Vec<(String, String)>, Vec<(Artifact, String)>) {
    let mut lines = Vec::new();
    let mut missing: std::collections::BTreeMap<String, Vec<&Artifact>> = Default::default();
    for a in crates {
        match cache.read_meta("crates", &a.digest.hex()) {
            Some(line) => lines.push((
                a.name.to_ascii_lowercase(),
                String::from_utf8_lossy(&line).into_owned(),
            )),
            None => missing
                .entry(a.name.to_ascii_lowercase())
                .or_default()
                .push(a),
        }
    }
    let mut failed = Vec::new();
    for (name, wanted) in missing {
        let found = match index_file(&name, fetcher).await {
            Ok(file) => file,
            Err(why) => {
                failed.extend(wanted.into_iter().map(|a| (a.clone(), why.clone())));
                continue;
            }
        };
        for a in wanted {
            match matching_line(&found, a) {
                Some(line) => {
                    if let Err(e) = cache.write_meta("crates", &a.digest.hex(), line.as_bytes()) {
                        tracing::warn!("keeping crates.io's index line of {}: {e}", a.name);
                    }
                    lines.push((name.clone(), line));
                }
                None => failed.push((
                    a.clone(),
                    format!(
                        "crates.io's index has no {} {} with the lock's checksum",
                        a.name, a.version
                    ),
                )),
            }
        }
    }
    (lines, failed)
}

async fn index_file(name: &str, fetcher: &Fetcher) -> Result<String, String> {
    let url = RegistryUrl::parse(&format!("https://index.crates.io/{}", index_path(name)))?;
    let body = fetcher
        .document(&url, "*/*", MAX_DOCUMENT)
        .await
        .map_err(|e| e.to_string())?;
    String::from_utf8(body).map_err(|_| format!("{}: not UTF-8", url.url()))
}

/// The line of `file` (one JSON object a line) for `a`'s version with its checksum.
fn matching_line(file: &str, a: &Artifact) -> Option<String> {
    #[derive(Deserialize)]
    struct Line {
        name: String,
        vers: String,
        cksum: String,
    }
    let want = a.digest.hex();
    file.lines().find_map(|text| {
        let line: Line = serde_json::from_str(text).ok()?;
        (line.name.eq_ignore_ascii_case(&a.name) && line.vers == a.version && line.cksum == want)
            .then(|| text.to_string())
    })
}

/// A crate's file in the sparse index: `1/a`, `2/ab`, `3/a/abc`, `ab/cd/abcd…`.
pub fn index_path(lower_name: &str) -> String {
    let n = lower_name;
    match n.len() {
        1 => format!("1/{n}"),
        2 => format!("2/{n}"),
        3 => format!("3/{}/{n}", &n[..1]),
        _ => format!("{}/{}/{n}", &n[..2], &n[2..4]),
    }
}

/// The pins that are not taken, as result lines.
pub fn skipped(artifact: &Artifact, why: String) -> Skipped {
    Skipped {
        lock: artifact.lock.clone(),
        entry: format!("{} {}", artifact.name, artifact.version),
        why,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_index_paths() {
        assert_eq!(index_path("a"), "1/a");
        assert_eq!(index_path("ab"), "2/ab");
        assert_eq!(index_path("abc"), "3/a/abc");
        assert_eq!(index_path("itoa"), "it/oa/itoa");
        assert_eq!(index_path("serde_json"), "se/rd/serde_json");
    }
}
