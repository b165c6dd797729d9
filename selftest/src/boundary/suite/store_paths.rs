//! The Nix store paths a job made: its store's names before the job, and the new ones after
//! (where the push credential's search looks too).

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The names in the Nix store now (none without one).
pub(super) fn store_names() -> BTreeSet<OsString> {
    std::fs::read_dir("/nix/store")
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default()
}

/// The store paths that are not in `before`.
pub(super) fn new_store_paths(before: &BTreeSet<OsString>) -> Vec<PathBuf> {
    store_names()
        .difference(before)
        .filter(|n| !n.to_string_lossy().starts_with('.'))
        .map(|n| Path::new("/nix/store").join(n))
        .collect()
}
