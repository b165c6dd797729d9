//! The runner's private files — every account's secrets and the config file — and the
//! directories that hide them from jobs' commands wherever the operator keeps them.
//!
//! Both agents' sandboxes hide a path by mounting over it when the sandbox starts (bubblewrap:
//! a tmpfs over a directory, `/dev/null` over a file). A mount over a *file* belongs to that
//! one file: once the operator replaces it — a new file renamed over the old one, as key
//! rotations, secret managers, editors and the agents' own login refresh do — the mount in
//! every running sandbox is detached and the new file is readable there. A mount over a
//! *directory* stays: what is renamed inside it is renamed under the mount. So a private
//! file is hidden with the directory that holds it and, for every link on the way to it,
//! with the directory holding what the link points to: a generation switch of sops-nix or
//! agenix (`/run/secrets` → `/run/secrets.d/2`) or a Kubernetes-style `..data` swap writes
//! the new generation there and swings the link. (Both sandboxes mount over where a path
//! really is, so a link's own name hides nothing once it points elsewhere.)
//!
//! A directory commands need ([`needed`]: `/etc`, `/usr`, `/opt`, ...) cannot be hidden: a
//! private file there is refused, in config loading, in `doctor` and before a job starts,
//! with the fix. What the sandbox cannot hide either is the Nix store, which every user can
//! read: an account file there is refused; the config file may be there (the modules put it
//! there, and it names files, never holds secrets), and then only the directories outside
//! the store are hidden.

use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use super::Platform;

/// What a private file is, which decides whether the Nix store may hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PrivateKind {
    /// An account's secret: never in the store.
    Account,
    /// The runner's config file: may be a store path (the modules'); holds no secret.
    Config,
}

/// A private file and the directories the policy hides for it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HiddenFile {
    /// Where the config names it (`accounts.work.api_key_file`, `the config file`).
    pub what: String,
    pub file: PathBuf,
    /// Real paths, none inside another (a directory inside one already hidden adds nothing).
    pub dirs: Vec<HiddenDir>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HiddenDir {
    pub dir: PathBuf,
    /// The link whose target's name this directory holds (`None`: the file's own directory).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link: Option<PathBuf>,
}

/// Where a private file may not be, with the fix.
#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    #[error(
        "{what} = {file}: {place} {dir} is {why}, which jobs' commands need, so the sandbox \
         cannot hide it; a file hidden by its name alone is readable to running jobs again as \
         soon as it is replaced (a key rotation, a login refresh). Fix: move it into a \
         directory that holds only secrets, such as /etc/quest-runner/ or /run/secrets/, or \
         under the state directory"
    )]
    NeededDir {
        what: String,
        file: PathBuf,
        place: String,
        dir: PathBuf,
        why: String,
    },
    #[error(
        "{what} = {file}: {place} {dir} is in the Nix store, which every user and every job \
         can read. Fix: keep secrets out of the store (agenix or sops-nix, or a file under the \
         state directory)"
    )]
    InStore {
        what: String,
        file: PathBuf,
        place: String,
        dir: PathBuf,
    },
    #[error(
        "{what} = {file}: {place} {dir} cannot be resolved ({source}), so the sandbox could not \
         hide it. Fix: create it, or correct the path"
    )]
    Unresolved {
        what: String,
        file: PathBuf,
        place: String,
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} = {file}: not an absolute path to a file")]
    NotAFilePath { what: String, file: PathBuf },
    #[error("{what} = {file}: too many levels of links")]
    Links { what: String, file: PathBuf },
}

impl PlacementError {
    /// The failure is only that something does not exist (yet): config loading accepts
    /// that, a job does not.
    fn is_missing(&self) -> bool {
        matches!(self, PlacementError::Unresolved { source, .. }
            if source.kind() == std::io::ErrorKind::NotFound)
    }
}

/// How much of the tree a needed directory claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The directory itself (and so every directory above it); directories inside it may be
    /// hidden.
    Exact,
    /// The directory and everything inside it.
    Tree,
}

/// A directory jobs' commands need, and why.
#[derive(Debug, Clone, Copy)]
pub struct Needed {
    pub path: &'static str,
    pub scope: Scope,
    pub why: &'static str,
}

const fn tree(path: &'static str, why: &'static str) -> Needed {
    Needed {
        path,
        scope: Scope::Tree,
        why,
    }
}

const fn exact(path: &'static str, why: &'static str) -> Needed {
    Needed {
        path,
        scope: Scope::Exact,
        why,
    }
}

/// The directories jobs' commands need, which no private file may be hidden with. Every
/// directory above one of them is needed too (hiding it would hide them). The Nix modules
/// refuse account files here as well (modules/lib.nix `neededDirs`, which tests/suite/flake.rs
/// keeps equal to this list).
pub fn needed(platform: Platform) -> &'static [Needed] {
    match platform {
        Platform::Linux => LINUX_NEEDED,
        Platform::Macos => MACOS_NEEDED,
    }
}

const PROGRAMS: &str = "where programs and libraries are";
const TLS: &str = "where TLS certificates are";

const LINUX_NEEDED: &[Needed] = &[
    tree("/usr", PROGRAMS),
    tree("/bin", PROGRAMS),
    tree("/sbin", PROGRAMS),
    tree("/lib", PROGRAMS),
    tree("/lib32", PROGRAMS),
    tree("/lib64", PROGRAMS),
    tree("/libx32", PROGRAMS),
    tree("/nix/store", "the Nix store (programs and the devShell)"),
    tree("/nix/var/nix/profiles", "where Nix profiles' programs are"),
    exact(
        "/etc",
        "the system's configuration (users, name resolution, TLS)",
    ),
    exact("/etc/nix", "Nix's configuration"),
    tree("/etc/ssl/certs", TLS),
    tree("/etc/pki/tls/certs", TLS),
    tree("/etc/pki/ca-trust", TLS),
    tree("/etc/ca-certificates", TLS),
    tree("/etc/static", "NixOS's /etc"),
    tree("/etc/profiles", "where NixOS users' programs are"),
    tree("/etc/alternatives", PROGRAMS),
    exact("/opt", "where software is installed"),
    exact("/var", "the system's variable data"),
    tree("/run/current-system", "NixOS's current system"),
    tree("/run/booted-system", "NixOS's booted system"),
    tree("/run/wrappers", "NixOS's setuid wrappers"),
    tree("/run/systemd/resolve", "name resolution (resolv.conf)"),
    tree("/proc", "the kernel's interface"),
    tree("/sys", "the kernel's interface"),
    tree("/dev", "devices"),
];

const MACOS_NEEDED: &[Needed] = &[
    tree("/System", PROGRAMS),
    tree("/usr", PROGRAMS),
    tree("/bin", PROGRAMS),
    tree("/sbin", PROGRAMS),
    tree("/Applications", PROGRAMS),
    tree("/Library/Developer", PROGRAMS),
    exact("/Library", "the system's shared libraries and settings"),
    tree("/nix/store", "the Nix store (programs and the devShell)"),
    tree("/nix/var/nix/profiles", "where Nix profiles' programs are"),
    tree("/opt/homebrew", PROGRAMS),
    tree("/opt/local", PROGRAMS),
    exact("/opt", "where software is installed"),
    exact("/etc", "the system's configuration"),
    exact("/private/etc", "the system's configuration"),
    tree("/private/etc/ssl", TLS),
    tree("/etc/static", "nix-darwin's /etc"),
    tree("/private/etc/static", "nix-darwin's /etc"),
    exact("/var", "the system's variable data"),
    exact("/private/var", "the system's variable data"),
    tree("/run/current-system", "nix-darwin's current system"),
    tree(
        "/private/var/run/current-system",
        "nix-darwin's current system",
    ),
    tree("/dev", "devices"),
];

/// Why `dir` cannot be hidden from jobs' commands, if it cannot.
pub fn needed_why(dir: &Path, platform: Platform) -> Option<String> {
    needed(platform).iter().find_map(|n| {
        let p = Path::new(n.path);
        if dir == p {
            Some(n.why.to_string())
        } else if p.starts_with(dir) {
            Some(format!("above {} ({})", n.path, n.why))
        } else if n.scope == Scope::Tree && dir.starts_with(p) {
            Some(format!("inside {} ({})", n.path, n.why))
        } else {
            None
        }
    })
}

/// The Nix store, which every user can read.
pub fn in_store(dir: &Path) -> bool {
    dir.starts_with("/nix/store")
}

/// Resolves `file` on this host and returns the directories that hide it, or why it cannot
/// be hidden. Every directory must exist: the sandbox hides only what exists when it starts.
pub fn hide(
    what: &str,
    file: &Path,
    kind: PrivateKind,
    platform: Platform,
) -> Result<HiddenFile, PlacementError> {
    let parent = match (file.is_absolute(), file.parent(), file.file_name()) {
        (true, Some(parent), Some(_)) => parent,
        _ => {
            return Err(PlacementError::NotAFilePath {
                what: what.to_string(),
                file: file.to_path_buf(),
            })
        }
    };
    let found = dirs_reaching(what, file, parent)?;
    Ok(HiddenFile {
        what: what.to_string(),
        file: file.to_path_buf(),
        dirs: hideable(what, file, kind, platform, found)?,
    })
}

/// How an error names a directory of `file`: its own, or one a link on its way points into.
fn place(link: &Option<PathBuf>) -> String {
    match link {
        None => "its directory".to_string(),
        Some(l) => format!("the directory its link {} points into,", l.display()),
    }
}

/// Every directory through which `file` can be reached, resolved: its own (`parent`), and the
/// one each link on its way points into.
fn dirs_reaching(what: &str, file: &Path, parent: &Path) -> Result<Vec<HiddenDir>, PlacementError> {
    let resolve = |dir: &Path, link: Option<PathBuf>| -> Result<HiddenDir, PlacementError> {
        std::fs::canonicalize(dir)
            .map(|dir| HiddenDir {
                dir,
                link: link.clone(),
            })
            .map_err(|source| PlacementError::Unresolved {
                what: what.to_string(),
                file: file.to_path_buf(),
                place: place(&link),
                dir: dir.to_path_buf(),
                source,
            })
    };
    let mut found = vec![resolve(parent, None)?];
    for (link, target_dir) in links_on_the_way(file).map_err(|e| match e {
        WalkError::Loop => PlacementError::Links {
            what: what.to_string(),
            file: file.to_path_buf(),
        },
        WalkError::Io(path, source) => PlacementError::Unresolved {
            what: what.to_string(),
            file: file.to_path_buf(),
            place: "the path through".to_string(),
            dir: path,
            source,
        },
    })? {
        found.push(resolve(&target_dir, Some(link))?);
    }
    Ok(found)
}

/// The directories of `found` to hide, none inside another; an error when one is needed by
/// every command, or is in the Nix store and `file` holds a secret (a config file there is
/// public anyway, and left out).
fn hideable(
    what: &str,
    file: &Path,
    kind: PrivateKind,
    platform: Platform,
    found: Vec<HiddenDir>,
) -> Result<Vec<HiddenDir>, PlacementError> {
    let mut dirs: Vec<HiddenDir> = Vec::new();
    for d in found {
        if in_store(&d.dir) {
            match kind {
                // Public wherever it is; the config holds no secret.
                PrivateKind::Config => continue,
                PrivateKind::Account => {
                    return Err(PlacementError::InStore {
                        what: what.to_string(),
                        file: file.to_path_buf(),
                        place: place(&d.link),
                        dir: d.dir,
                    })
                }
            }
        }
        if let Some(why) = needed_why(&d.dir, platform) {
            return Err(PlacementError::NeededDir {
                what: what.to_string(),
                file: file.to_path_buf(),
                place: place(&d.link),
                dir: d.dir,
                why,
            });
        }
        if dirs.iter().any(|k| d.dir.starts_with(&k.dir)) {
            continue;
        }
        dirs.retain(|k| !k.dir.starts_with(&d.dir));
        dirs.push(d);
    }
    Ok(dirs)
}

/// What config loading checks: [`hide`], except that a file or directory that does not exist
/// yet is judged by its path alone (the secret may be provisioned after the config; the job
/// that needs it checks again, fully).
pub fn check(
    what: &str,
    file: &Path,
    kind: PrivateKind,
    platform: Platform,
) -> Result<(), PlacementError> {
    match hide(what, file, kind, platform) {
        Ok(_) => Ok(()),
        Err(e) if e.is_missing() => {
            let dir = file.parent().unwrap_or(Path::new("/")).to_path_buf();
            let place = "its directory".to_string();
            if in_store(&dir) && kind == PrivateKind::Account {
                return Err(PlacementError::InStore {
                    what: what.to_string(),
                    file: file.to_path_buf(),
                    place,
                    dir,
                });
            }
            match needed_why(&dir, platform) {
                Some(why) if !(in_store(&dir) && kind == PrivateKind::Config) => {
                    Err(PlacementError::NeededDir {
                        what: what.to_string(),
                        file: file.to_path_buf(),
                        place,
                        dir,
                        why,
                    })
                }
                _ => Ok(()),
            }
        }
        Err(e) => Err(e),
    }
}

enum WalkError {
    Loop,
    Io(PathBuf, std::io::Error),
}

/// Every link met while resolving `file` (its directories' and its own), each with the
/// directory (as the link spells it) that holds the name it points to. Stops where the path
/// does not exist: nothing past that can be a link yet.
fn links_on_the_way(file: &Path) -> Result<Vec<(PathBuf, PathBuf)>, WalkError> {
    const MAX_LINKS: usize = 40;
    let mut found = Vec::new();
    // Components still to walk, the next one last.
    let mut pending: Vec<std::ffi::OsString> = Vec::new();
    let push_all = |pending: &mut Vec<std::ffi::OsString>, path: &Path| {
        let parts: Vec<_> = path
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n.to_os_string()),
                Component::ParentDir => Some("..".into()),
                _ => None,
            })
            .collect();
        pending.extend(parts.into_iter().rev());
    };
    push_all(&mut pending, file);
    let mut current = PathBuf::from("/");
    while let Some(name) = pending.pop() {
        if name == ".." {
            current.pop();
            continue;
        }
        let next = current.join(&name);
        match std::fs::symlink_metadata(&next) {
            Ok(m) if m.file_type().is_symlink() => {
                if found.len() >= MAX_LINKS {
                    return Err(WalkError::Loop);
                }
                let target =
                    std::fs::read_link(&next).map_err(|e| WalkError::Io(next.clone(), e))?;
                let absolute = if target.is_absolute() {
                    target.clone()
                } else {
                    current.join(&target)
                };
                // A link to `/` points at no name a rotation could write beside.
                if let Some(dir) = absolute.parent() {
                    found.push((next.clone(), dir.to_path_buf()));
                }
                if target.is_absolute() {
                    current = PathBuf::from("/");
                }
                push_all(&mut pending, &target);
            }
            Ok(_) => current = next,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
            Err(e) => return Err(WalkError::Io(next, e)),
        }
    }
    Ok(found)
}

#[cfg(test)]
#[path = "private_tests.rs"]
mod tests;
