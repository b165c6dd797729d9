//! The one content-addressed cache of locked artifacts, under the state directory, shared by
//! every job and tenant of the runner.
//!
//! ```text
//! <state>/deps/objects/sha512/ab/ab12…   an artifact, named by the hash it was verified by
//! <state>/deps/meta/<kind>/<key>.json     what the runner learnt finding files (PyPI, crates)
//! <state>/deps/tmp/                       downloads in progress, removed if they fail
//! <state>/deps/locks/                     one fetch of an artifact at a time, across runners
//! ```
//!
//! Only the runner writes here, and an object only through [`Writer::commit`], which renames
//! the file into place once the hash of what was written equals the name it goes under: a
//! mismatch, a download cut short or a runner killed midway leaves nothing under `objects/`.
//! No job's process can read it (the state directory is hidden from every job); jobs get
//! their own locked set through the runner's proxy. Use is an object's mtime, set when a job
//! takes it, which [`DepCache::collect`] removes the least recently used by.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::digest::{Digest, Hasher};
use crate::lockfile::LockFile;
use crate::util::io::{IoContext, IoError};

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error(transparent)]
    Io(#[from] IoError),
    #[error("larger than the {limit} bytes one artifact may be (config deps.max_artifact)")]
    TooLarge { limit: u64 },
    #[error("its hash is {got}, not the {expected} its lock pins: refused, nothing stored")]
    Mismatch { expected: String, got: String },
}

/// The cache at `<state>/deps`.
#[derive(Debug, Clone)]
pub struct DepCache {
    root: PathBuf,
}

/// What the cache holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    pub objects: u64,
    pub bytes: u64,
}

/// What a collection removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Collected {
    pub removed: u64,
    pub freed: u64,
    pub kept: Stats,
}

impl DepCache {
    /// The cache under `state_root`, its directories made (private to the runner's user).
    pub fn open(state_root: &Path) -> Result<DepCache, IoError> {
        let root = state_root.join("deps");
        for sub in ["objects", "meta", "tmp", "locks"] {
            let dir = root.join(sub);
            std::fs::create_dir_all(&dir).at("creating", &dir)?;
        }
        set_private(&root)?;
        let cache = DepCache { root };
        cache.clear_tmp();
        Ok(cache)
    }

    /// The cache under `state_root` as it is, for reading (`doctor`): nothing is made.
    pub fn existing(state_root: &Path) -> Option<DepCache> {
        let root = state_root.join("deps");
        root.join("objects").is_dir().then_some(DepCache { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the object of `digest` is (or would be).
    pub fn object(&self, digest: &Digest) -> PathBuf {
        let hex = digest.hex();
        self.root
            .join("objects")
            .join(digest.algo.name())
            .join(&hex[..2])
            .join(hex)
    }

    /// The object's size, if the cache holds it (a regular file, never a link).
    pub fn size(&self, digest: &Digest) -> Option<u64> {
        let meta = std::fs::symlink_metadata(self.object(digest)).ok()?;
        meta.file_type().is_file().then_some(meta.len())
    }

    /// Marks the object as used now, for the least-recently-used collection.
    pub fn touch(&self, digest: &Digest) {
        let _ = set_mtime(&self.object(digest), SystemTime::now());
    }

    /// Holds the fetch of `digest` against every other runner on this state directory.
    pub async fn lock(&self, digest: &Digest) -> Result<LockFile, IoError> {
        let path = self.root.join("locks").join(digest.key());
        LockFile::acquire(&path).await.at("locking", &path)
    }

    /// A writer for the object of `digest`, which takes at most `limit` bytes.
    pub fn writer(&self, digest: &Digest, limit: u64) -> Result<Writer, IoError> {
        let tmp = tempfile::Builder::new()
            .prefix(&format!("{}.", digest.key()))
            .tempfile_in(self.root.join("tmp"))
            .at("creating a download in", &self.root.join("tmp"))?;
        Ok(Writer {
            file: std::io::BufWriter::with_capacity(1 << 16, tmp),
            hasher: Hasher::new(digest.algo),
            expected: digest.clone(),
            target: self.object(digest),
            written: 0,
            limit,
        })
    }

    /// A document the runner keeps about artifacts (`kind` and `key` are the runner's, never
    /// a lock's text).
    pub fn meta(&self, kind: &str, key: &str) -> PathBuf {
        self.root
            .join("meta")
            .join(kind)
            .join(format!("{key}.json"))
    }

    /// Reads a document of [`DepCache::meta`], if there is one.
    pub fn read_meta(&self, kind: &str, key: &str) -> Option<Vec<u8>> {
        std::fs::read(self.meta(kind, key)).ok()
    }

    /// Writes a document of [`DepCache::meta`] whole or not at all.
    pub fn write_meta(&self, kind: &str, key: &str, data: &[u8]) -> Result<(), IoError> {
        let path = self.meta(kind, key);
        let dir = self.root.join("meta").join(kind);
        std::fs::create_dir_all(&dir).at("creating", &dir)?;
        crate::util::fs::write_atomically(&dir, &path, data).at("writing", &path)
    }

    /// How many objects the cache holds, and their bytes.
    pub fn stats(&self) -> Stats {
        let mut stats = Stats::default();
        for (_, meta) in self.objects() {
            stats.objects += 1;
            stats.bytes += meta.len();
        }
        stats
    }

    /// Removes the least recently used objects until the cache holds at most `limit` bytes,
    /// never one of `in_use` (the digests of running jobs, by key).
    pub fn collect(&self, limit: u64, in_use: &HashSet<String>) -> Collected {
        let mut objects: Vec<(PathBuf, std::fs::Metadata)> = self.objects();
        let mut total: u64 = objects.iter().map(|(_, m)| m.len()).sum();
        objects.sort_by_key(|(_, m)| m.modified().unwrap_or(SystemTime::UNIX_EPOCH));
        let mut out = Collected::default();
        for (path, meta) in &objects {
            if total <= limit {
                break;
            }
            let key = path
                .file_name()
                .and_then(|n| n.to_str())
                .zip(
                    path.parent()
                        .and_then(|p| p.parent())
                        .and_then(|p| p.file_name()),
                )
                .map(|(hex, algo)| format!("{}-{hex}", algo.to_string_lossy()));
            if key.is_some_and(|k| in_use.contains(&k)) {
                continue;
            }
            if std::fs::remove_file(path).is_ok() {
                total -= meta.len();
                out.removed += 1;
                out.freed += meta.len();
            }
        }
        out.kept = self.stats();
        out
    }

    /// Every object file with its metadata.
    fn objects(&self) -> Vec<(PathBuf, std::fs::Metadata)> {
        let mut out = Vec::new();
        let Ok(algos) = std::fs::read_dir(self.root.join("objects")) else {
            return out;
        };
        for algo in algos.flatten() {
            let Ok(fans) = std::fs::read_dir(algo.path()) else {
                continue;
            };
            for fan in fans.flatten() {
                let Ok(files) = std::fs::read_dir(fan.path()) else {
                    continue;
                };
                for file in files.flatten() {
                    if let Ok(meta) = file.metadata() {
                        if meta.is_file() {
                            out.push((file.path(), meta));
                        }
                    }
                }
            }
        }
        out
    }

    /// Downloads a runner killed midway left behind (none of them is an object).
    fn clear_tmp(&self) {
        let tmp = self.root.join("tmp");
        let Ok(entries) = std::fs::read_dir(&tmp) else {
            return;
        };
        let stale = SystemTime::now() - std::time::Duration::from_secs(24 * 3600);
        for e in entries.flatten() {
            // Another runner's download in progress is younger than a day.
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t < stale);
            if old {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Sets a file's times: an object is read-only, which its owner may still do this to.
fn set_mtime(path: &Path, at: SystemTime) -> std::io::Result<()> {
    let since = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let t = rustix::fs::Timespec {
        tv_sec: since.as_secs() as i64,
        tv_nsec: since.subsec_nanos() as _,
    };
    let times = rustix::fs::Timestamps {
        last_access: t,
        last_modification: t,
    };
    rustix::fs::utimensat(
        rustix::fs::CWD,
        path,
        &times,
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )?;
    Ok(())
}

fn set_private(dir: &Path) -> Result<(), IoError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).at("securing", dir)
}

/// One object being written: a temporary file beside the cache's objects that becomes one
/// only if what was written has the hash it is to be named by. Dropped without
/// [`Writer::commit`], the file is removed.
pub struct Writer {
    file: std::io::BufWriter<tempfile::NamedTempFile>,
    hasher: Hasher,
    expected: Digest,
    target: PathBuf,
    written: u64,
    limit: u64,
}

impl Writer {
    pub fn write(&mut self, chunk: &[u8]) -> Result<(), CacheError> {
        self.written += chunk.len() as u64;
        if self.written > self.limit {
            return Err(CacheError::TooLarge { limit: self.limit });
        }
        self.hasher.update(chunk);
        self.file
            .write_all(chunk)
            .context("writing a download")
            .map_err(CacheError::from)
    }

    /// Verifies the hash and moves the file into place; the object's size.
    pub fn commit(self) -> Result<u64, CacheError> {
        let got = self.hasher.finish();
        if got != self.expected {
            return Err(CacheError::Mismatch {
                expected: self.expected.key(),
                got: got.key(),
            });
        }
        let tmp = self
            .file
            .into_inner()
            .map_err(|e| e.into_error())
            .context("writing a download")?;
        // On disk before it is named: a crash leaves no object with less than its bytes.
        tmp.as_file().sync_data().context("syncing a download")?;
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o444))
            .context("making a download read-only")?;
        if let Some(dir) = self.target.parent() {
            std::fs::create_dir_all(dir).at("creating", dir)?;
        }
        tmp.persist(&self.target)
            .map_err(|e| e.error)
            .at("storing", &self.target)?;
        Ok(self.written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deps::digest::Algo;

    fn digest_of(data: &[u8]) -> Digest {
        let mut h = Hasher::new(Algo::Sha512);
        h.update(data);
        h.finish()
    }

    #[test]
    fn only_verified_bytes_become_objects() {
        let state = tempfile::tempdir().unwrap();
        let cache = DepCache::open(state.path()).unwrap();
        let good = digest_of(b"left-pad");
        let mut w = cache.writer(&good, 100).unwrap();
        w.write(b"left-").unwrap();
        w.write(b"pad").unwrap();
        assert_eq!(w.commit().unwrap(), 8);
        assert_eq!(cache.size(&good), Some(8));
        assert_eq!(std::fs::read(cache.object(&good)).unwrap(), b"left-pad");

        let other = digest_of(b"something else");
        let mut w = cache.writer(&other, 100).unwrap();
        w.write(b"left-pad").unwrap();
        let err = w.commit().unwrap_err();
        assert!(matches!(err, CacheError::Mismatch { .. }), "{err}");
        assert_eq!(cache.size(&other), None);

        let mut w = cache.writer(&other, 4).unwrap();
        assert!(matches!(
            w.write(b"12345"),
            Err(CacheError::TooLarge { .. })
        ));
        drop(w);
        // Nothing half-written is left anywhere.
        let tmp: Vec<_> = std::fs::read_dir(cache.root().join("tmp"))
            .unwrap()
            .collect();
        assert!(tmp.is_empty(), "{tmp:?}");
        assert_eq!(
            cache.stats(),
            Stats {
                objects: 1,
                bytes: 8
            }
        );
    }

    #[test]
    fn collection_removes_the_least_recently_used_but_not_what_runs() {
        let state = tempfile::tempdir().unwrap();
        let cache = DepCache::open(state.path()).unwrap();
        let mut digests = Vec::new();
        for (i, data) in [b"aaaa", b"bbbb", b"cccc"].iter().enumerate() {
            let d = digest_of(*data);
            let mut w = cache.writer(&d, 100).unwrap();
            w.write(*data).unwrap();
            w.commit().unwrap();
            let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1000 + i as u64);
            set_mtime(&cache.object(&d), at).unwrap();
            digests.push(d);
        }
        let in_use = HashSet::from([digests[0].key()]);
        let out = cache.collect(4, &in_use);
        assert_eq!(out.removed, 2);
        assert_eq!(
            out.kept,
            Stats {
                objects: 1,
                bytes: 4
            }
        );
        assert!(cache.size(&digests[0]).is_some());
    }
}
