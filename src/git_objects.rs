//! Reading just enough of a git directory to answer "is this a repository, and does it hold
//! this object?" without starting git.
//!
//! The devShell cache answers a hit without running any program (a `git` start costs more than
//! the whole hit), yet a request naming a revision its repository does not have must still be
//! refused. Loose objects and version-2 pack indexes, plus alternates, cover every repository
//! git itself writes.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The git directory of `repo`: `repo` itself for a bare repository, `repo/.git` for a
/// checkout. `None` when `repo` is neither.
pub fn git_dir(repo: &Path) -> Option<PathBuf> {
    let looks_like_git_dir =
        |dir: &Path| dir.join("HEAD").is_file() && dir.join("objects").is_dir();
    if looks_like_git_dir(repo) {
        return Some(repo.to_path_buf());
    }
    let dotgit = repo.join(".git");
    if looks_like_git_dir(&dotgit) {
        return Some(dotgit);
    }
    None
}

/// Whether the object `oid` (40 hex digits) is stored in `git_dir`.
pub fn has_object(git_dir: &Path, oid: &str) -> io::Result<bool> {
    let raw = decode_oid(oid)?;
    has_object_in(&git_dir.join("objects"), oid, &raw, 0)
}

fn decode_oid(oid: &str) -> io::Result<[u8; 20]> {
    let mut raw = [0u8; 20];
    crate::util::hex::decode_to_slice(oid, &mut raw)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{oid}: {e}")))?;
    Ok(raw)
}

fn has_object_in(objects: &Path, oid: &str, raw: &[u8; 20], depth: u8) -> io::Result<bool> {
    if objects.join(&oid[..2]).join(&oid[2..]).is_file() {
        return Ok(true);
    }
    let packs = objects.join("pack");
    if let Ok(entries) = std::fs::read_dir(&packs) {
        for entry in entries {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "idx") && pack_index_contains(&path, raw)? {
                return Ok(true);
            }
        }
    }
    // Alternates chain to other object directories; git itself stops at depth 5.
    if depth < 5 {
        if let Ok(text) = std::fs::read_to_string(objects.join("info").join("alternates")) {
            for line in text
                .lines()
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
            {
                let alt = objects.join(line);
                if has_object_in(&alt, oid, raw, depth + 1)? {
                    return Ok(true);
                }
            }
        }
    }
    Ok(false)
}

/// Binary search in a version-2 pack index: a 256-entry fan-out table of cumulative counts
/// by first byte, then the sorted object names.
fn pack_index_contains(path: &Path, raw: &[u8; 20]) -> io::Result<bool> {
    const HEADER: u64 = 8;
    const FANOUT: u64 = 256 * 4;
    let file = File::open(path)?;
    let mut header = [0u8; 8];
    file.read_exact_at(&mut header, 0)?;
    if header != [0xff, b't', b'O', b'c', 0, 0, 0, 2] {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not a version 2 pack index", path.display()),
        ));
    }
    let first = u64::from(raw[0]);
    let count_before = |byte: u64| -> io::Result<u64> {
        if byte == 0 {
            return Ok(0);
        }
        let mut word = [0u8; 4];
        file.read_exact_at(&mut word, HEADER + (byte - 1) * 4)?;
        Ok(u64::from(u32::from_be_bytes(word)))
    };
    let (mut lo, mut hi) = (count_before(first)?, count_before(first + 1)?);
    let mut name = [0u8; 20];
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        file.read_exact_at(&mut name, HEADER + FANOUT + mid * 20)?;
        match name.cmp(raw) {
            std::cmp::Ordering::Equal => return Ok(true),
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
        }
    }
    Ok(false)
}

#[cfg(test)]
#[path = "git_objects_tests.rs"]
mod tests;
