//! Recognising Nix store paths.
//!
//! The runner roots and later mounts paths it reads back from Nix's output and from symlinks
//! on disk. Checking their shape first means a tampered cache entry or profile link cannot make
//! the runner treat an arbitrary file as part of the store.

use std::path::{Path, PathBuf};

/// Nix's base-32 alphabet: digits and lower-case letters without e, o, u and t.
const NIX_BASE32: &str = "0123456789abcdfghijklmnpqrsvwxyz";
const HASH_LEN: usize = 32;
const MAX_NAME_LEN: usize = 211;

/// The store directory: `NIX_STORE_DIR` when set (as Nix itself reads it), else `/nix/store`.
pub fn store_dir() -> PathBuf {
    std::env::var_os("NIX_STORE_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/nix/store"))
}

/// Whether `path` is a top-level store path: `<store>/<32 base-32 chars>-<name>`.
pub fn is_store_path(path: &Path, store: &Path) -> bool {
    let Ok(rest) = path.strip_prefix(store) else {
        return false;
    };
    let mut parts = rest.components();
    let (Some(std::path::Component::Normal(base)), None) = (parts.next(), parts.next()) else {
        return false;
    };
    let Some(base) = base.to_str() else {
        return false;
    };
    let Some((hash, name)) = base.split_at_checked(HASH_LEN) else {
        return false;
    };
    let Some(name) = name.strip_prefix('-') else {
        return false;
    };
    hash.chars().all(|c| NIX_BASE32.contains(c))
        && !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-._?=".contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_real_shapes_and_refuses_others() {
        let store = Path::new("/nix/store");
        let ok = "/nix/store/nhwrwi2pqnfscsrnb0qhklf4jrjp5m06-demo-shell-env";
        assert!(is_store_path(Path::new(ok), store));
        for bad in [
            "/nix/store",
            "/nix/store/short-name",
            "/nix/store/nhwrwi2pqnfscsrnb0qhklf4jrjp5m0e-demo", // 'e' is not base-32
            "/nix/store/nhwrwi2pqnfscsrnb0qhklf4jrjp5m06-demo/bin",
            "/nix/store/nhwrwi2pqnfscsrnb0qhklf4jrjp5m06-",
            "/nix/store/nhwrwi2pqnfscsrnb0qhklf4jrjp5m06-.hidden",
            "/etc/nhwrwi2pqnfscsrnb0qhklf4jrjp5m06-demo",
            "/nix/store/../etc/passwd",
        ] {
            assert!(!is_store_path(Path::new(bad), store), "{bad}");
        }
    }
}
