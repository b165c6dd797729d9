//! The NAR hash of a file tree, as Nix computes it for a `path:` flake input's `narHash`.
//!
//! The runner writes the lock files of the flakes it makes itself (see
//! [`crate::selftest::static_bash`]); computing the hash here spares a `nix` run per fixture
//! and ties the lock to the exact bytes on disk, which Nix checks again when it reads the input.
//!
//! The archive format: every string is its length (u64, little-endian), its bytes, and zero
//! padding to a multiple of 8; a node is `( type regular [executable ""] contents <bytes> )`,
//! `( type symlink target <target> )` or `( type directory entry ( name <n> node <node> )… )`
//! with entries sorted by name, all after the magic `nix-archive-1`.

use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use base64::Engine;
use sha2::{Digest, Sha256};

/// The SRI form Nix writes in lock files: `sha256-<base64>`.
pub fn nar_hash(path: &Path) -> std::io::Result<String> {
    let mut hasher = Sha256::new();
    put_str(&mut hasher, b"nix-archive-1");
    put_node(&mut hasher, path)?;
    Ok(format!(
        "sha256-{}",
        base64::engine::general_purpose::STANDARD.encode(hasher.finalize())
    ))
}

fn put_str(h: &mut Sha256, bytes: &[u8]) {
    h.update((bytes.len() as u64).to_le_bytes());
    h.update(bytes);
    h.update(&[0u8; 8][..(8 - bytes.len() % 8) % 8]);
}

fn put_node(h: &mut Sha256, path: &Path) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    put_str(h, b"(");
    put_str(h, b"type");
    let kind = meta.file_type();
    if kind.is_symlink() {
        put_str(h, b"symlink");
        put_str(h, b"target");
        put_str(h, std::fs::read_link(path)?.as_os_str().as_bytes());
    } else if kind.is_dir() {
        put_str(h, b"directory");
        let mut names: Vec<_> = std::fs::read_dir(path)?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()?;
        // Nix sorts entries by their bytes.
        names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        for name in names {
            put_str(h, b"entry");
            put_str(h, b"(");
            put_str(h, b"name");
            put_str(h, name.as_bytes());
            put_str(h, b"node");
            put_node(h, &path.join(&name))?;
            put_str(h, b")");
        }
    } else if kind.is_file() {
        put_str(h, b"regular");
        // Nix records only the owner's execute bit.
        if meta.permissions().mode() & 0o100 != 0 {
            put_str(h, b"executable");
            put_str(h, b"");
        }
        put_str(h, b"contents");
        // The length goes first, so the contents are streamed rather than read whole.
        let len = meta.len();
        h.update(len.to_le_bytes());
        let mut file = std::fs::File::open(path)?;
        let copied = std::io::copy(&mut (&mut file).take(len), h)?;
        if copied != len {
            return Err(std::io::Error::other(format!(
                "{} changed while it was hashed",
                path.display()
            )));
        }
        h.update(&[0u8; 8][..((8 - len % 8) % 8) as usize]);
    } else {
        return Err(std::io::Error::other(format!(
            "{} is neither a file, a directory nor a symlink: Nix cannot archive it",
            path.display()
        )));
    }
    put_str(h, b")");
    Ok(())
}

#[cfg(test)]
#[path = "nar_tests.rs"]
mod tests;
