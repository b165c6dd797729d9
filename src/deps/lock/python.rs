//! Python's locks: pip's `requirements*.txt` pinned with `--hash` (what `pip install
//! --require-hashes` and `pip-compile --generate-hashes` take), and uv's `uv.lock`.
//!
//! A requirements line names a version and the hashes of the files it may be installed from,
//! but not where they are: the runner finds them on PyPI's simple page by hash
//! ([`crate::deps::resolve`]). `uv.lock` names each file's address and hash itself.

use serde::Deserialize;

use super::Parsed;
use crate::deps::digest::Digest;
use crate::deps::pin::{Artifact, Ecosystem, HashPinned, Pin, RegistryUrl};

/// The index uv.lock names for packages from PyPI.
const PYPI_SIMPLE: &str = "https://pypi.org/simple";

pub(super) fn parse_requirements(path: &str, text: &str) -> Parsed {
    let mut out = Parsed::default();
    for line in logical_lines(text) {
        let line = line.trim();
        if line.is_empty() || line.starts_with('-') {
            // Options (`-r`, `-c`, `--index-url`, ...): another requirements file is read as a
            // lock of its own when its name says it is one.
            if line.starts_with("-e") || line.starts_with("--editable") {
                out.skip(
                    path,
                    line,
                    "an editable requirement is the project's own, not a download",
                );
            }
            continue;
        }
        let (spec, options) = match line.find(" --") {
            Some(i) => (&line[..i], &line[i..]),
            None => (line, ""),
        };
        let spec = spec.split(';').next().unwrap_or(spec).trim();
        let hashes: Result<Vec<Digest>, String> = hash_options(options)
            .map(Digest::from_prefixed_hex)
            .collect();
        let hashes = match hashes {
            Ok(h) => h,
            Err(why) => {
                out.skip(path, spec, why);
                continue;
            }
        };
        if spec.contains(" @ ") || spec.contains("://") {
            out.skip(path, spec, "a direct URL, not a version from PyPI");
            continue;
        }
        let Some((name, version)) = pinned(spec) else {
            out.skip(path, spec, "not pinned to one version with ==");
            continue;
        };
        if hashes.is_empty() {
            out.skip(path, spec, "no --hash: nothing to verify it by");
            continue;
        }
        out.pins.push(Pin::Pypi(HashPinned {
            lock: path.to_string(),
            name,
            version,
            hashes,
        }));
    }
    out
}

/// The file's lines with `\`-continuations joined and comments cut.
fn logical_lines(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut current = String::new();
    for raw in text.lines() {
        // A comment starts at a `#` at the line's start or after whitespace.
        let mut line = raw;
        if let Some(i) = raw
            .char_indices()
            .find(|&(i, c)| c == '#' && (i == 0 || raw[..i].ends_with(char::is_whitespace)))
            .map(|(i, _)| i)
        {
            line = &raw[..i];
        }
        match line.trim_end().strip_suffix('\\') {
            Some(head) => {
                current.push_str(head);
                current.push(' ');
            }
            None => {
                current.push_str(line);
                lines.push(std::mem::take(&mut current));
            }
        }
    }
    if !current.is_empty() {
        lines.push(current);
    }
    lines
}

/// The values of `--hash=<v>` and `--hash <v>` in `options`.
fn hash_options(options: &str) -> impl Iterator<Item = &str> {
    let tokens: Vec<&str> = options.split_whitespace().collect();
    let mut values = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if let Some(v) = tokens[i].strip_prefix("--hash=") {
            values.push(v);
        } else if tokens[i] == "--hash" && i + 1 < tokens.len() {
            values.push(tokens[i + 1]);
            i += 1;
        }
        i += 1;
    }
    values.into_iter()
}

/// `name[extras]==version` (or `===`), as a name and a version.
fn pinned(spec: &str) -> Option<(String, String)> {
    let end = spec
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        .unwrap_or(spec.len());
    let (name, rest) = spec.split_at(end);
    let mut rest = rest.trim_start();
    if let Some(after) = rest.strip_prefix('[') {
        rest = after.split_once(']')?.1.trim_start();
    }
    let version = rest
        .strip_prefix("===")
        .or_else(|| rest.strip_prefix("=="))?
        .trim();
    let valid = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+' | '!'))
    };
    (valid(name) && valid(version) && !version.contains('*'))
        .then(|| (name.to_string(), version.to_string()))
}

#[derive(Deserialize)]
struct UvLock {
    version: Option<u64>,
    #[serde(default)]
    package: Vec<UvPackage>,
}

#[derive(Deserialize)]
struct UvPackage {
    name: String,
    version: Option<String>,
    source: Option<toml::Table>,
    sdist: Option<UvFile>,
    #[serde(default)]
    wheels: Vec<UvFile>,
}

#[derive(Deserialize)]
struct UvFile {
    url: Option<String>,
    hash: Option<String>,
}

pub(super) fn parse_uv(path: &str, text: &str) -> Result<Parsed, String> {
    let lock: UvLock =
        toml::from_str(text).map_err(|e| format!("{path} is not a uv lockfile: {e}"))?;
    if lock.version != Some(1) {
        return Err(format!(
            "{path} is uv lockfile version {:?}; the runner reads version 1",
            lock.version
        ));
    }
    let mut out = Parsed::default();
    for p in lock.package {
        let version = p.version.unwrap_or_default();
        let entry = format!("{}=={version}", p.name);
        let registry = p
            .source
            .as_ref()
            .and_then(|s| s.get("registry"))
            .and_then(|r| r.as_str());
        match registry {
            Some(r) if r.trim_end_matches('/') == PYPI_SIMPLE => {}
            Some(r) => {
                out.skip(path, entry, format!("from the index {r}, not PyPI"));
                continue;
            }
            // The project itself, a workspace member, a path, git or URL source.
            None => continue,
        }
        for file in p.sdist.iter().chain(&p.wheels) {
            let (Some(url), Some(hash)) = (&file.url, &file.hash) else {
                out.skip(path, &entry, "a file without its url and hash");
                continue;
            };
            let filename = url.rsplit('/').next().unwrap_or_default().to_string();
            if !fits_this_host(&filename) {
                continue;
            }
            let parsed = RegistryUrl::parse(url)
                .and_then(|u| Digest::from_prefixed_hex(hash).map(|d| (u, d)));
            match parsed {
                Ok((url, digest)) => out.pins.push(Pin::Artifact(Artifact {
                    ecosystem: Ecosystem::Pypi,
                    name: p.name.clone(),
                    version: version.clone(),
                    digest,
                    url,
                    filename,
                    requires_python: None,
                    npm_entry: None,
                    lock: path.to_string(),
                })),
                Err(why) => out.skip(path, &entry, why),
            }
        }
    }
    Ok(out)
}

/// Whether a Python distribution file could be installed on this host: an sdist, or a wheel
/// for any platform or this one's (a lock lists wheels for every platform; fetching all of
/// them would fetch many times what a job can use).
pub fn fits_this_host(filename: &str) -> bool {
    let Some(stem) = filename.strip_suffix(".whl") else {
        return filename.ends_with(".tar.gz") || filename.ends_with(".zip");
    };
    let Some(platforms) = stem.rsplit('-').next() else {
        return false;
    };
    let arch = std::env::consts::ARCH;
    platforms.split('.').any(|tag| {
        tag == "any"
            || match std::env::consts::OS {
                "linux" => tag.contains("linux") && tag.ends_with(arch),
                "macos" => {
                    tag.starts_with("macosx")
                        && (tag.ends_with(if arch == "aarch64" { "arm64" } else { arch })
                            || tag.ends_with("universal2"))
                }
                _ => false,
            }
    })
}
