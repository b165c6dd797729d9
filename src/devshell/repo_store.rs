//! A Nix store per repository: the tenancy of what a job's nix can name.
//!
//! A store path is named by its hash, and a path that is valid in the store a build uses is
//! that build's to take: `builtins.appendContext`, a `path:` input locked by another path's
//! `narHash`, or a fixed-output derivation whose hash is another path's all pull it in
//! without reading a file of the host, so no path rule stops them. The host's store holds
//! every repository's sources and outputs and the operator's `nix-store --add`s, and its
//! database lists them. So a job's nix never opens it: each repository gets a store of its
//! own under the state directory (a Nix "chroot store", `local?root=<dir>`, whose paths are
//! still named `/nix/store/...`), served by the runner's own daemon for the run
//! ([`super::daemon`]) and mounted at the store's place in the client's namespace and the
//! job's. What is shared between repositories is only what is substituted from the
//! configured binary caches: public by definition, and checked against their keys.
//!
//! The host's store is not chained in as a substituter: Nix accepts a content-addressed path
//! (every source, every `nix-store --add`) from a substituter without a signature, so a chain
//! would hand back exactly what this separation keeps apart.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::DevShellError;

/// The store of one repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoStore {
    /// The chroot: the store's files are at `<root>/nix/store`, its database at
    /// `<root>/nix/var/nix/db`.
    root: PathBuf,
}

impl RepoStore {
    /// The store of the repository whose bare clone is at `repo` (canonical), under `base`
    /// (the devShell cache's directory). Named by a hash of the clone's path: the same
    /// repository always gets the same store, and a name chosen by no one.
    pub fn for_repo(base: &Path, repo: &Path) -> RepoStore {
        let digest = Sha256::digest(repo.as_os_str().as_encoded_bytes());
        let name: String = digest[..10].iter().map(|b| format!("{b:02x}")).collect();
        RepoStore {
            root: base.join("stores").join(name),
        }
    }

    /// A store at `root` (an entry records where its closure lives).
    pub fn at(root: PathBuf) -> RepoStore {
        RepoStore { root }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the store's paths are on the host: `<root>` + the store's logical directory.
    pub fn real_store_dir(&self) -> PathBuf {
        real_dir(&self.root)
    }

    /// Nix's URI for the store, opened directly (the runner, outside the boundary).
    pub fn uri(&self) -> String {
        format!("local?root={}", self.root.display())
    }

    /// Where `store_path` (a logical `/nix/store/...` path) is on the host.
    pub fn real_path(&self, store_path: &Path) -> PathBuf {
        let store = crate::store_path::store_dir();
        match store_path.strip_prefix(&store) {
            Ok(rest) => self.real_store_dir().join(rest),
            Err(_) => store_path.to_path_buf(),
        }
    }

    /// Makes the store's directories, so its store directory can be mounted before its daemon
    /// has opened it. Nix sets their owners and modes itself when it first opens the store.
    pub fn ensure(&self) -> Result<(), DevShellError> {
        let dir = self.real_store_dir();
        std::fs::create_dir_all(&dir).map_err(|e| DevShellError::io("creating", &dir, e))
    }
}

impl RepoStore {
    /// Removes the lock files in the store that no process holds: those of builds whose
    /// daemon is gone. A lock another run's daemon holds (a concurrent job of the same
    /// repository) is left alone. As Nix does with a stale lock, the file is marked before it
    /// is unlinked, so a process that opened it meanwhile knows to take a new one. Returns
    /// the paths those locks were for that exist: each was being written when its build
    /// stopped, unless it was made valid just before.
    pub fn clear_stale_locks(&self) -> Vec<PathBuf> {
        use rustix::fs::FlockOperation;
        let dir = self.real_store_dir();
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Vec::new();
        };
        let mut targets = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "lock") {
                continue;
            }
            let Ok(mut file) = std::fs::OpenOptions::new().write(true).open(&path) else {
                continue;
            };
            if rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
                continue;
            }
            let _ = std::io::Write::write_all(&mut file, b"d");
            if let Err(e) = std::fs::remove_file(&path) {
                tracing::warn!(path = %path.display(), "removing a stale lock: {e}");
            }
            let target = path.with_extension("");
            if std::fs::symlink_metadata(&target).is_ok() {
                targets.push(target);
            }
        }
        targets
    }
}

/// Where `store_path` (a logical `/nix/store/...` path) is on the host: under the repository
/// store at `root`, or where it is named when `None` (the host's store).
pub fn located(root: Option<&Path>, store_path: &Path) -> PathBuf {
    match root {
        Some(root) => RepoStore::at(root.to_path_buf()).real_path(store_path),
        None => store_path.to_path_buf(),
    }
}

/// `<root>` joined with the store's logical directory (`/nix/store` → `<root>/nix/store`).
pub fn real_dir(root: &Path) -> PathBuf {
    let store = crate::store_path::store_dir();
    let rel = store.strip_prefix("/").unwrap_or(&store);
    root.join(rel)
}

/// Where the link at `link` leads in the store: links followed by their text, not resolved
/// on the host (a repository's store paths are named `/nix/store/...` but live under its
/// root). Nix's profile links are a link to a generation link to the store path.
pub fn link_target(link: &Path) -> std::io::Result<PathBuf> {
    let store = crate::store_path::store_dir();
    let mut at = link.to_path_buf();
    for _ in 0..8 {
        let next = std::fs::read_link(&at)?;
        let next = match next.is_absolute() {
            true => next,
            false => at.parent().unwrap_or(Path::new("/")).join(next),
        };
        if next.starts_with(&store) {
            return Ok(next);
        }
        at = next;
    }
    Err(std::io::Error::other(format!(
        "{} leads to no store path within 8 links",
        link.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_repository_gets_a_store_of_its_own() {
        let base = Path::new("/state/devshell");
        let a = RepoStore::for_repo(base, Path::new("/state/repos/a.git"));
        let b = RepoStore::for_repo(base, Path::new("/state/repos/b.git"));
        assert_ne!(a, b);
        assert_eq!(
            a,
            RepoStore::for_repo(base, Path::new("/state/repos/a.git"))
        );
        assert!(a.root().starts_with("/state/devshell/stores"));
        assert!(a.uri().starts_with("local?root=/state/devshell/stores/"));
    }

    #[test]
    fn a_store_path_lives_under_the_root() {
        let s = RepoStore::at(PathBuf::from("/r"));
        let store = crate::store_path::store_dir();
        let p = store.join("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-x");
        let real = s.real_path(&p);
        assert!(real.starts_with("/r"), "{}", real.display());
        assert!(real.ends_with(p.strip_prefix("/").unwrap()));
    }

    #[test]
    fn profile_links_are_followed_by_their_text() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store_path::store_dir();
        let target = store.join("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-env");
        std::os::unix::fs::symlink(&target, dir.path().join("profile-1-link")).unwrap();
        std::os::unix::fs::symlink("profile-1-link", dir.path().join("profile")).unwrap();
        assert_eq!(link_target(&dir.path().join("profile")).unwrap(), target);
        std::os::unix::fs::symlink("/etc", dir.path().join("bad")).unwrap();
        assert!(link_target(&dir.path().join("bad")).is_err());
    }
}
