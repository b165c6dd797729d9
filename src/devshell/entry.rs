//! Cache entries on disk.
//!
//! ```text
//! <state>/devshell/v1/entries/<key>/meta.json   what was built, and the script's checksum
//! <state>/devshell/v1/entries/<key>/env.sh      the rendered script
//! <state>/devshell/v1/roots/<key>               nix profile link: the GC root of the env
//! <state>/devshell/v1/locks/<key>.lock          held while one process builds <key>
//! <state>/devshell/v1/tmp/<key>.<random>/       an entry being written
//! ```
//!
//! An entry appears by renaming a complete directory into `entries/`, so a reader sees all of
//! it or none of it. The root lives outside the entry because Nix records an indirect root by
//! the link's path, and a link moved after creation would stop protecting anything.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::key::FORMAT_VERSION;
use crate::store_path;

pub const SCRIPT: &str = "env.sh";
pub const META: &str = "meta.json";

#[derive(Debug, Clone)]
pub struct Layout {
    pub base: PathBuf,
}

impl Layout {
    pub fn new(state_root: &Path) -> Layout {
        Layout {
            base: state_root
                .join("devshell")
                .join(format!("v{FORMAT_VERSION}")),
        }
    }
    pub fn entries(&self) -> PathBuf {
        self.base.join("entries")
    }
    pub fn entry(&self, key: &str) -> PathBuf {
        self.entries().join(key)
    }
    pub fn roots(&self) -> PathBuf {
        self.base.join("roots")
    }
    pub fn root(&self, key: &str) -> PathBuf {
        self.roots().join(key)
    }
    pub fn locks(&self) -> PathBuf {
        self.base.join("locks")
    }
    pub fn lock(&self, key: &str) -> PathBuf {
        self.locks().join(format!("{key}.lock"))
    }
    pub fn tmp(&self) -> PathBuf {
        self.base.join("tmp")
    }
    pub fn probes(&self) -> PathBuf {
        self.base.join("nix-versions")
    }
}

/// What an entry records about itself.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Meta {
    pub format: u32,
    pub key: String,
    pub rev: String,
    pub attr: String,
    pub system: String,
    pub nix_version: String,
    /// Seconds since the epoch.
    pub created: u64,
    /// `None` when the revision has no `flake.nix`: that answer is cached too.
    pub shell: Option<ShellMeta>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ShellMeta {
    pub url: String,
    pub store_path: PathBuf,
    pub script_sha256: String,
    /// The store paths the devShell needs (`nix path-info --recursive` of `store_path`): the
    /// job's view of the store. Empty in an entry written before it was recorded: the job
    /// then sees the whole store.
    #[serde(default)]
    pub closure: Vec<PathBuf>,
    /// The root of the repository's store the closure lives in
    /// ([`super::repo_store::RepoStore`]); `None`: the store the runner's nix opens (an
    /// operator's own request).
    #[serde(default)]
    pub store: Option<PathBuf>,
}

/// A verified entry.
#[derive(Debug, Clone)]
pub struct Entry {
    pub meta: Meta,
    pub dir: PathBuf,
    /// The script's bytes, read while verifying it (so a hit reads it once).
    pub script: Option<Vec<u8>>,
}

/// Why an entry on disk cannot be used. It is rebuilt, never served.
#[derive(Debug)]
pub enum Invalid {
    Absent,
    Broken(String),
}

pub fn sha256_hex(data: &[u8]) -> String {
    crate::util::hex::encode(Sha256::digest(data))
}

/// Reads and checks the entry for `key`: metadata readable and about this key, script
/// matching its checksum, GC root present and pointing at the recorded store path.
pub fn read(layout: &Layout, key: &str) -> Result<Entry, Invalid> {
    let dir = layout.entry(key);
    let meta_bytes = match std::fs::read(dir.join(META)) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !dir.exists() => {
            return Err(Invalid::Absent)
        }
        Err(e) => return Err(Invalid::Broken(format!("metadata unreadable: {e}"))),
    };
    let meta: Meta = serde_json::from_slice(&meta_bytes)
        .map_err(|e| Invalid::Broken(format!("metadata corrupt: {e}")))?;
    if meta.key != key || meta.format != FORMAT_VERSION {
        return Err(Invalid::Broken("metadata belongs to another key".into()));
    }
    let Some(shell) = &meta.shell else {
        return Ok(Entry {
            meta,
            dir,
            script: None,
        });
    };
    let script = std::fs::read(dir.join(SCRIPT))
        .map_err(|e| Invalid::Broken(format!("script unreadable: {e}")))?;
    if sha256_hex(&script) != shell.script_sha256 {
        return Err(Invalid::Broken("script does not match its checksum".into()));
    }
    check_root(layout, key, shell)?;
    Ok(Entry {
        meta,
        dir,
        script: Some(script),
    })
}

fn check_root(layout: &Layout, key: &str, shell: &ShellMeta) -> Result<(), Invalid> {
    let store_path = &shell.store_path;
    let resolved = super::repo_store::link_target(&layout.root(key))
        .map_err(|e| Invalid::Broken(format!("GC root gone: {e}")))?;
    if &resolved != store_path {
        return Err(Invalid::Broken(format!(
            "GC root points at {} instead of {}",
            resolved.display(),
            store_path.display()
        )));
    }
    if !store_path::is_store_path(store_path, &store_path::store_dir()) {
        return Err(Invalid::Broken(format!(
            "{} is not a store path",
            store_path.display()
        )));
    }
    let real = super::repo_store::located(shell.store.as_deref(), store_path);
    if !real.exists() {
        return Err(Invalid::Broken(format!(
            "{} is gone from its store",
            real.display()
        )));
    }
    Ok(())
}

/// Moves a complete entry directory into place, replacing nothing: the caller removed any
/// broken entry for this key while holding the key's lock.
pub fn commit(layout: &Layout, staged: tempfile::TempDir, key: &str) -> std::io::Result<PathBuf> {
    let target = layout.entry(key);
    std::fs::create_dir_all(layout.entries())?;
    std::fs::rename(staged.path(), &target)?;
    // The directory now lives under its final name; the TempDir must not delete it.
    let _ = staged.keep();
    sync_dir(&layout.entries())?;
    Ok(target)
}

pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Writes `name` into the staged directory and flushes it, so a rename after a crash never
/// publishes an empty file.
pub fn write_file(dir: &Path, name: &str, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create(dir.join(name))?;
    f.write_all(data)?;
    f.sync_all()
}

/// Removes the entry and every root of `key` (the profile link and its generations).
pub fn remove(layout: &Layout, key: &str) -> std::io::Result<()> {
    match std::fs::remove_dir_all(layout.entry(key)) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    remove_roots(layout, key)
}

/// Removes `roots/<key>` and `roots/<key>-N-link`.
pub fn remove_roots(layout: &Layout, key: &str) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(layout.roots()) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name == key || name.starts_with(&format!("{key}-")) {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// Removes staged directories of `key` left by a process that died while writing them.
pub fn remove_staged(layout: &Layout, key: &str) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(layout.tmp()) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with(&format!("{key}."))
        {
            std::fs::remove_dir_all(entry.path())?;
        }
    }
    Ok(())
}

pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs()
}
