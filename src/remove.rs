//! Removing a directory tree that commands of a job (or a Nix build) wrote.
//!
//! Such trees hold read-only directories: Go's module cache, for one, makes its directories
//! read-only, and so do some builds. `remove_dir_all` cannot empty those unless it runs as
//! root, and a runner that is not root would leave them behind on every job, and fail again
//! on every sweep. Nix's own cleanup makes them writable first; so does this.

use std::path::Path;

/// Removes `dir` and everything in it; a missing `dir` is not an error.
pub fn remove_tree(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            make_writable(dir);
            match std::fs::remove_dir_all(dir) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                other => other,
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Gives the owner full access to every directory under `dir`. Symlinks are not followed, so
/// nothing outside the tree changes.
fn make_writable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return;
    };
    if !meta.is_dir() {
        return;
    }
    let mode = meta.permissions().mode() | 0o700;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            make_writable(&entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn read_only_directories_are_opened_to_their_owner_and_symlinks_not_followed() {
        let root = tempfile::tempdir().unwrap();
        let tree = root.path().join("tree");
        let deep = tree.join("pkg/mod");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join("go.mod"), "module x").unwrap();
        let outside = root.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o555)).unwrap();
        std::os::unix::fs::symlink(&outside, tree.join("link")).unwrap();
        for d in [deep.as_path(), deep.parent().unwrap()] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o555)).unwrap();
        }
        make_writable(&tree);
        for d in [tree.join("pkg"), deep.clone()] {
            let mode = std::fs::metadata(&d).unwrap().permissions().mode();
            assert_eq!(mode & 0o700, 0o700, "{}", d.display());
        }
        let mode = std::fs::metadata(&outside).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o555, "the symlink's target is left alone");
        remove_tree(&tree).unwrap();
        assert!(!tree.exists() && outside.exists());
        remove_tree(&tree).unwrap();
    }
}
