//! Where the runner's own cgroup v2 group is and what it offers, from the kernel's files.

use std::path::{Path, PathBuf};

use super::DEFAULT_MOUNT;

/// Where the runner's own cgroup v2 group is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// The cgroup2 mount point.
    pub mount: PathBuf,
    /// The runner's group as a directory.
    pub own: PathBuf,
    /// Whether that group is the hierarchy's root (as on a host without systemd): the root
    /// is exempt from the no-internal-processes rule, and its processes are not ours.
    pub is_root: bool,
}

/// Finds the runner's group from `/proc/self/cgroup` (its `0::<path>` line) and
/// `/proc/self/mountinfo` (the cgroup2 mount holding that path). The error says why there
/// is none.
pub fn locate(self_cgroup: &str, mountinfo: &str) -> Result<Located, String> {
    let own = self_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::trim)
        .ok_or("this process is in no cgroup v2 group (no 0:: line in /proc/self/cgroup)")?;
    if !own.starts_with('/') || own.ends_with(" (deleted)") {
        return Err(format!(
            "this process's cgroup v2 path {own:?} is not usable"
        ));
    }
    let mut mounts: Vec<(PathBuf, String)> = Vec::new();
    for line in mountinfo.lines() {
        let Some((before, after)) = line.split_once(" - ") else {
            continue;
        };
        if after.split_whitespace().next() != Some("cgroup2") {
            continue;
        }
        let fields: Vec<&str> = before.split_whitespace().collect();
        if let (Some(root), Some(point)) = (fields.get(3), fields.get(4)) {
            mounts.push((PathBuf::from(unescape(point)), unescape(root)));
        }
    }
    if mounts.is_empty() {
        return Err("no cgroup v2 hierarchy is mounted".into());
    }
    // The standard mount first: a second cgroup2 mount (a container's bind) shows the same
    // groups.
    mounts.sort_by_key(|(point, _)| point != Path::new(DEFAULT_MOUNT));
    for (mount, root) in mounts {
        let rel = if root == "/" {
            Some(own.trim_start_matches('/'))
        } else {
            own.strip_prefix(root.as_str())
                .filter(|r| r.is_empty() || r.starts_with('/'))
                .map(|r| r.trim_start_matches('/'))
        };
        if let Some(rel) = rel {
            let own = if rel.is_empty() {
                mount.clone()
            } else {
                mount.join(rel)
            };
            return Ok(Located {
                is_root: rel.is_empty() && root == "/",
                mount,
                own,
            });
        }
    }
    Err(format!(
        "this process's group {own} is not under any mounted cgroup v2 hierarchy"
    ))
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let digits = std::str::from_utf8(&bytes[i + 1..i + 4]).unwrap_or("");
            if let Ok(v) = u8::from_str_radix(digits, 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What the runner's own group offers, read from its files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnState {
    /// `cgroup.controllers`: what may be enabled for the group's children.
    pub controllers: Vec<String>,
    /// `cgroup.subtree_control`: what is enabled for them now.
    pub subtree_control: Vec<String>,
    /// Whether the runner may create groups in it and write its `cgroup.subtree_control`
    /// (delegated to the runner's user, or the runner is root).
    pub writable: bool,
}

impl OwnState {
    pub fn read(own: &Path) -> OwnState {
        let words = |name: &str| -> Vec<String> {
            std::fs::read_to_string(own.join(name))
                .unwrap_or_default()
                .split_whitespace()
                .map(String::from)
                .collect()
        };
        let w = rustix::fs::Access::WRITE_OK;
        OwnState {
            controllers: words("cgroup.controllers"),
            subtree_control: words("cgroup.subtree_control"),
            writable: rustix::fs::access(own, w).is_ok()
                && rustix::fs::access(own.join("cgroup.procs"), w).is_ok(),
        }
    }
}
