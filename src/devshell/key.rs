//! The cache key of a devShell: everything that can change the rendered script.
//!
//! The repository is part of it only as the store a job's build writes (its repository's,
//! `super::repo_store`): a commit id names the whole tree, but a job's devShell must come from
//! its own repository's store, never another tenant's. Nix's version, the system, the
//! attribute and the extra Nix options are, and so is the format version of the script this
//! runner renders.

use std::collections::BTreeMap;

use serde::Serialize;
use sha2::{Digest, Sha256};

/// Bump when the rendered script or the entry layout changes; old entries then simply miss.
pub const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Serialize)]
pub struct KeyInputs<'a> {
    pub format: u32,
    pub rev: &'a str,
    pub attr: &'a str,
    pub system: &'a str,
    pub nix_version: &'a str,
    pub nix_options: &'a BTreeMap<String, String>,
    /// The repository store a job's build writes; `None` for the runner's own store.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store: Option<&'a str>,
}

/// 32 hex digits (128 bits) of SHA-256 over the inputs' canonical JSON.
pub fn cache_key(inputs: &KeyInputs<'_>) -> String {
    // Serialising a struct of strings and a BTreeMap cannot fail, and its field order is fixed.
    let json = serde_json::to_vec(inputs).unwrap_or_default();
    let digest = Sha256::digest(&json);
    crate::util::hex::encode(&digest[..16])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(rev: &str, attr: &str, version: &str, opts: &BTreeMap<String, String>) -> String {
        cache_key(&KeyInputs {
            format: FORMAT_VERSION,
            rev,
            attr,
            system: "x86_64-linux",
            nix_version: version,
            nix_options: opts,
            store: None,
        })
    }

    #[test]
    fn every_input_changes_the_key() {
        let none = BTreeMap::new();
        let some = BTreeMap::from([("substituters".to_string(), String::new())]);
        let base = key("a", "devShells.x.default", "2.8.0", &none);
        assert_eq!(base.len(), 32);
        assert_eq!(base, key("a", "devShells.x.default", "2.8.0", &none));
        assert_ne!(base, key("b", "devShells.x.default", "2.8.0", &none));
        assert_ne!(base, key("a", "devShells.x.other", "2.8.0", &none));
        assert_ne!(base, key("a", "devShells.x.default", "2.26.3", &none));
        assert_ne!(base, key("a", "devShells.x.default", "2.8.0", &some));
    }
}
