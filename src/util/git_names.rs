//! What the runner accepts as a git branch or tag name and as a commit id: one definition
//! each, for the job's fields, the devShell's flake URL and the checkout's HEAD.

/// A conservative subset of `git check-ref-format`, enough that the name cannot smuggle
/// anything into the flake URL.
pub fn is_ref_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('-')
        && !name.contains("..")
        && !name.ends_with('/')
        && !name.ends_with(".lock")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+".contains(c))
}

/// A full commit id: 40 hex digits (either case; callers lowercase it where they keep it).
pub fn is_full_rev(rev: &str) -> bool {
    rev.len() == 40 && rev.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_revs_are_40_hex_digits() {
        assert!(is_full_rev(&"a".repeat(40)));
        assert!(is_full_rev(&"0123456789ABCDEFabcdef".repeat(2)[..40]));
        assert!(!is_full_rev(&"a".repeat(39)));
        assert!(!is_full_rev(&"a".repeat(41)));
        assert!(!is_full_rev(&"g".repeat(40)));
    }
}
