//! The revision's lockfiles, read from the shared bare clone at the job's pinned revision:
//! never from the checkout, which the agent edits, so nothing it writes adds to what the
//! runner fetches. Each is a regular file of the tree, read as data through git, anywhere in
//! the tree (a monorepo's packages each have their own), bounded in number and size.

use std::path::Path;
use std::time::Duration;

use super::lock::LockKind;
use super::pin::Skipped;
use crate::git::{Git, GitError};

/// The most locks one revision's are read; the shallowest are taken.
pub const MAX_LOCKS: usize = 64;
/// The largest lock read (a monorepo's `package-lock.json` can be tens of MB).
pub const MAX_LOCK_BYTES: u64 = 64 << 20;
/// How long listing the tree or reading one lock may take.
const GIT_LIMIT: Duration = Duration::from_secs(60);
/// The listing of a tree is kept to this size (a tree of millions of files).
const MAX_LISTING: u64 = 256 << 20;

/// One lock of the revision.
#[derive(Debug)]
pub struct LockBlob {
    /// Its path in the revision.
    pub path: String,
    pub kind: LockKind,
    pub bytes: Vec<u8>,
}

/// The revision's locks, and those it names that are not read (a link, too large, too many).
#[derive(Debug, Default)]
pub struct Found {
    pub locks: Vec<LockBlob>,
    pub skipped: Vec<Skipped>,
}

/// Reads the locks of `rev` in the bare clone `repo`.
pub async fn locks_at(repo: &Path, rev: &str) -> Result<Found, GitError> {
    let git = Git::new(repo)?;
    let listing = git
        .bytes_bounded(
            &["ls-tree", "-r", "-z", "-l", "--full-tree", rev],
            GIT_LIMIT,
            MAX_LISTING,
        )
        .await?
        .ok_or_else(|| GitError::Failed {
            args: format!("ls-tree -r {rev}"),
            message: format!("the tree's listing is larger than {MAX_LISTING} bytes"),
        })?;
    let (mut wanted, mut found) = plan(&listing);
    for entry in wanted.drain(..) {
        let bytes = git
            .bytes_bounded(&["cat-file", "blob", &entry.oid], GIT_LIMIT, MAX_LOCK_BYTES)
            .await?;
        match bytes {
            Some(bytes) => found.locks.push(LockBlob {
                path: entry.path,
                kind: entry.kind,
                bytes,
            }),
            None => found.skipped.push(too_large(&entry.path)),
        }
    }
    Ok(found)
}

struct Wanted {
    path: String,
    oid: String,
    kind: LockKind,
}

/// Which entries of an `ls-tree -r -z -l` listing are read: pure, from the listing alone.
fn plan(listing: &[u8]) -> (Vec<Wanted>, Found) {
    let mut found = Found::default();
    let mut wanted = Vec::new();
    for record in listing.split(|b| *b == 0).filter(|r| !r.is_empty()) {
        let Some(tab) = record.iter().position(|b| *b == b'\t') else {
            continue;
        };
        let (meta, path) = (&record[..tab], &record[tab + 1..]);
        let Ok(path) = std::str::from_utf8(path) else {
            continue;
        };
        let name = path.rsplit('/').next().unwrap_or(path);
        let Some(kind) = LockKind::of(name) else {
            continue;
        };
        // Installed packages' own locks are not the project's.
        if path.split('/').any(|s| s == "node_modules") {
            continue;
        }
        let meta = String::from_utf8_lossy(meta);
        let fields: Vec<&str> = meta.split_whitespace().collect();
        let [mode, kind_word, oid, size] = fields[..] else {
            continue;
        };
        if kind_word != "blob" || !matches!(mode, "100644" | "100755") {
            found.skipped.push(Skipped {
                lock: path.to_string(),
                entry: path.to_string(),
                why: format!(
                    "not a regular file (mode {mode}{}): a lock is read only as one",
                    if mode == "120000" {
                        ", a symbolic link"
                    } else {
                        ""
                    }
                ),
            });
            continue;
        }
        if size.parse::<u64>().map_or(true, |s| s > MAX_LOCK_BYTES) {
            found.skipped.push(too_large(path));
            continue;
        }
        wanted.push(Wanted {
            path: path.to_string(),
            oid: oid.to_string(),
            kind,
        });
    }
    // The shallowest first, then by path: the same locks are taken every time.
    wanted.sort_by(|a, b| {
        let depth = |p: &str| p.matches('/').count();
        (depth(&a.path), &a.path).cmp(&(depth(&b.path), &b.path))
    });
    for extra in wanted.split_off(wanted.len().min(MAX_LOCKS)) {
        found.skipped.push(Skipped {
            lock: extra.path.clone(),
            entry: extra.path,
            why: format!("the revision has more than {MAX_LOCKS} locks; the shallowest are read"),
        });
    }
    (wanted, found)
}

fn too_large(path: &str) -> Skipped {
    Skipped {
        lock: path.to_string(),
        entry: path.to_string(),
        why: format!("larger than {MAX_LOCK_BYTES} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(entries: &[(&str, &str, u64, &str)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (mode, kind, size, path) in entries {
            out.extend_from_slice(
                format!("{mode} {kind} {} {size:>7}\t{path}\0", "a".repeat(40)).as_bytes(),
            );
        }
        out
    }

    #[test]
    fn only_regular_lock_files_outside_node_modules() {
        let l = listing(&[
            ("100644", "blob", 10, "web/package-lock.json"),
            ("100644", "blob", 10, "package-lock.json"),
            ("120000", "blob", 10, "api/Cargo.lock"),
            ("100644", "blob", 10, "node_modules/x/package-lock.json"),
            ("100644", "blob", 10, "README.md"),
            ("160000", "commit", 0, "requirements.txt"),
            ("100755", "blob", MAX_LOCK_BYTES + 1, "py/requirements.txt"),
        ]);
        let (wanted, found) = plan(&l);
        let paths: Vec<&str> = wanted.iter().map(|w| w.path.as_str()).collect();
        assert_eq!(paths, ["package-lock.json", "web/package-lock.json"]);
        let skipped: Vec<&str> = found.skipped.iter().map(|s| s.why.as_str()).collect();
        assert_eq!(skipped.len(), 3, "{skipped:?}");
        assert!(skipped[0].contains("symbolic link"), "{skipped:?}");
    }

    #[test]
    fn at_most_max_locks_the_shallowest() {
        let names: Vec<String> = (0..MAX_LOCKS + 2)
            .map(|i| format!("{}p{i:03}/Cargo.lock", "d/".repeat(i % 3)))
            .collect();
        let entries: Vec<(&str, &str, u64, &str)> = names
            .iter()
            .map(|n| ("100644", "blob", 1, n.as_str()))
            .collect();
        let (wanted, found) = plan(&listing(&entries));
        assert_eq!(wanted.len(), MAX_LOCKS);
        assert_eq!(found.skipped.len(), 2);
        assert!(found.skipped.iter().all(|s| s.lock.starts_with("d/d/")));
    }
}
