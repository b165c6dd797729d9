//! Knowing which Nix will run without running it on every request.
//!
//! Nix's version is part of the cache key, but `nix --version` costs more than a whole cache
//! hit. The answer is kept under the state directory, keyed by a fingerprint of the binary
//! (its resolved path, size, inode and modification time), so it is asked once per binary.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::DevShellError;
use crate::binaries::{self, Tool};

use crate::util::fs::write_atomically;

#[derive(Debug, Clone)]
pub struct NixBinary {
    pub path: PathBuf,
    pub version: String,
}

/// Finds `nix` and its version, asking the binary only the first time it is seen.
pub fn resolve(chosen: Option<&Path>, probe_dir: &Path) -> Result<NixBinary, DevShellError> {
    let path = match chosen {
        Some(path) => path.to_path_buf(),
        None => binaries::find(Tool::Nix)?,
    };
    let fingerprint =
        fingerprint(&path).map_err(|source| DevShellError::io("inspecting", &path, source))?;
    let cached = probe_dir.join(format!("{fingerprint}.version"));
    if let Ok(version) = std::fs::read_to_string(&cached) {
        let version = version.trim();
        if !version.is_empty() {
            return Ok(NixBinary {
                path,
                version: version.to_string(),
            });
        }
    }
    let version = ask_version(&path)?;
    // Only a cache: failing to record it costs a `nix --version` next time, nothing more.
    let _ = write_atomically(probe_dir, &cached, version.as_bytes());
    Ok(NixBinary { path, version })
}

fn fingerprint(path: &Path) -> std::io::Result<String> {
    let resolved = std::fs::canonicalize(path)?;
    let meta = std::fs::metadata(&resolved)?;
    let mut hasher = Sha256::new();
    hasher.update(resolved.as_os_str().as_encoded_bytes());
    for n in [
        meta.len(),
        meta.ino(),
        meta.dev(),
        meta.mtime() as u64,
        meta.mtime_nsec() as u64,
    ] {
        hasher.update(n.to_le_bytes());
    }
    Ok(crate::util::hex::encode(&hasher.finalize()[..16]))
}

fn ask_version(path: &Path) -> Result<String, DevShellError> {
    let out = std::process::Command::new(path)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|source| DevShellError::io("running", path, source))?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "nix (Nix) 2.8.0"
    let version = text
        .split_whitespace()
        .last()
        .unwrap_or_default()
        .to_string();
    if !out.status.success() || !version.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(DevShellError::Nix {
            what: format!("{} --version", path.display()),
            message: format!(
                "unexpected answer {:?} {}",
                text.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    Ok(version)
}

/// The Nix system double of this build of the runner, as Nix spells it.
pub fn current_system() -> String {
    let os = match std::env::consts::OS {
        "macos" => "darwin",
        other => other,
    };
    format!("{}-{os}", std::env::consts::ARCH)
}
