//! `cache ls` and `cache gc`: what is cached, and removing it with its GC roots.
//!
//! Removal takes each key's lock, so an entry being rebuilt is never pulled from under its
//! builder, and it also sweeps what crashed builders left (orphaned roots, staged
//! directories whose key nobody is building).

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Serialize;

use super::entry::{self, Invalid, Meta};
use super::{DevShellError, DevShells};
use crate::lockfile::LockFile;

#[derive(Debug, Clone, Serialize)]
pub struct ListedEntry {
    pub key: String,
    /// `ok`, or why the entry would be rebuilt on its next request.
    pub status: String,
    pub meta: Option<Meta>,
}

#[derive(Debug, Clone, Default)]
pub struct GcPolicy {
    /// Keep at most this many entries, the newest.
    pub max_entries: Option<usize>,
    /// Remove entries created longer ago than this.
    pub older_than: Option<Duration>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct GcReport {
    pub removed: Vec<String>,
    /// Entries that were skipped because a builder held their lock.
    pub busy: Vec<String>,
    pub kept: usize,
    /// Roots and staged directories with no entry, left by builders that died.
    pub swept: usize,
    /// Repository stores collected (`nix store gc` on each), and those whose collection
    /// failed, with nix's error.
    pub stores_collected: usize,
    pub stores_failed: Vec<String>,
}

impl DevShells {
    /// Every entry, newest first; broken ones are listed with the reason.
    pub fn list(&self) -> Result<Vec<ListedEntry>, DevShellError> {
        let mut listed = Vec::new();
        for key in self.keys()? {
            let (status, meta) = match entry::read(&self.layout, &key) {
                Ok(e) => ("ok".to_string(), Some(e.meta)),
                Err(Invalid::Absent) => continue,
                Err(Invalid::Broken(why)) => (why, self.read_meta(&key)),
            };
            listed.push(ListedEntry { key, status, meta });
        }
        listed.sort_by_key(|e| std::cmp::Reverse(e.meta.as_ref().map_or(0, |m| m.created)));
        Ok(listed)
    }

    fn read_meta(&self, key: &str) -> Option<Meta> {
        let bytes = std::fs::read(self.layout.entry(key).join(entry::META)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    fn keys(&self) -> Result<Vec<String>, DevShellError> {
        let dir = self.layout.entries();
        let read = match std::fs::read_dir(&dir) {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(DevShellError::io("listing", &dir, e)),
        };
        let mut keys = Vec::new();
        for item in read {
            let item = item.map_err(|e| DevShellError::io("listing", &dir, e))?;
            keys.push(item.file_name().to_string_lossy().into_owned());
        }
        Ok(keys)
    }

    /// Removes broken entries, then entries beyond the policy, then orphans.
    pub fn gc(&self, policy: &GcPolicy) -> Result<GcReport, DevShellError> {
        let mut report = GcReport::default();
        let now = entry::now_secs();
        let listed = self.list()?; // newest first
        let mut kept = 0usize;
        for item in &listed {
            let created = item.meta.as_ref().map_or(0, |m| m.created);
            let too_old = policy
                .older_than
                .is_some_and(|age| now.saturating_sub(created) >= age.as_secs());
            let too_many = policy.max_entries.is_some_and(|max| kept >= max);
            if item.status == "ok" && !too_old && !too_many {
                kept += 1;
                continue;
            }
            match self.with_key_lock(&item.key, || entry::remove(&self.layout, &item.key))? {
                Some(()) => report.removed.push(item.key.clone()),
                None => report.busy.push(item.key.clone()),
            }
        }
        report.kept = kept;
        report.swept = self.sweep_orphans()?;
        self.collect_stores(&mut report);
        Ok(report)
    }

    /// Collects each repository store's garbage: what no entry's root keeps (a removed
    /// entry's devShell, a failed build's sources). Nix's own collector, so a build running
    /// meanwhile keeps what it uses (its daemon's temporary roots). As the runner, outside any
    /// boundary: the stores are its own.
    fn collect_stores(&self, report: &mut GcReport) {
        let dir = self.state.root().join("devshell").join("stores");
        let Ok(stores) = std::fs::read_dir(&dir) else {
            return;
        };
        let nix = match super::nix_version::resolve(self.nix.as_deref(), &self.layout.probes()) {
            Ok(nix) => nix.path,
            Err(e) => {
                report.stores_failed.push(e.to_string());
                return;
            }
        };
        for store in stores.flatten() {
            let store = super::repo_store::RepoStore::at(store.path());
            let out = std::process::Command::new(&nix)
                .args(["--extra-experimental-features", "nix-command"])
                .args(["store", "gc", "--store", &store.uri()])
                .stdin(std::process::Stdio::null())
                .output();
            match out {
                Ok(o) if o.status.success() => report.stores_collected += 1,
                Ok(o) => report.stores_failed.push(format!(
                    "{}: {}",
                    store.root().display(),
                    String::from_utf8_lossy(&o.stderr).trim()
                )),
                Err(e) => report
                    .stores_failed
                    .push(format!("{}: {e}", store.root().display())),
            }
        }
    }

    /// Runs `f` holding `key`'s lock; `None` when a builder holds it.
    fn with_key_lock<T>(
        &self,
        key: &str,
        f: impl FnOnce() -> std::io::Result<T>,
    ) -> Result<Option<T>, DevShellError> {
        let path = self.layout.lock(key);
        if !self.layout.locks().exists() {
            return f()
                .map(Some)
                .map_err(|e| DevShellError::io("removing", &self.layout.entry(key), e));
        }
        let Some(_lock) =
            LockFile::try_acquire(&path).map_err(|e| DevShellError::io("locking", &path, e))?
        else {
            return Ok(None);
        };
        f().map(Some)
            .map_err(|e| DevShellError::io("removing", &self.layout.entry(key), e))
    }

    /// Roots without an entry and staged directories, for keys nobody is building now.
    fn sweep_orphans(&self) -> Result<usize, DevShellError> {
        let mut orphan_keys = BTreeSet::new();
        for (dir, split) in [(self.layout.roots(), '-'), (self.layout.tmp(), '.')] {
            let Ok(read) = std::fs::read_dir(&dir) else {
                continue;
            };
            for item in read.flatten() {
                let name = item.file_name().to_string_lossy().into_owned();
                let key = name.split(split).next().unwrap_or_default().to_string();
                if !key.is_empty() && !self.layout.entry(&key).exists() || split == '.' {
                    orphan_keys.insert(key);
                }
            }
        }
        let mut swept = 0;
        for key in orphan_keys {
            let has_entry = self.layout.entry(&key).exists();
            let cleaned = self.with_key_lock(&key, || {
                entry::remove_staged(&self.layout, &key)?;
                if !has_entry {
                    entry::remove_roots(&self.layout, &key)?;
                }
                Ok(())
            })?;
            if cleaned.is_some() {
                swept += 1;
            }
        }
        Ok(swept)
    }
}
