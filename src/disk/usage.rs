//! How much a directory tree a job wrote takes on disk.
//!
//! The tree is hostile input: the job's commands wrote it, with the runner's uid, and may go on
//! changing it while it is measured. So the walk
//! - counts allocated blocks (`st_blocks`), not sizes: a sparse file of a terabyte costs
//!   nothing, a preallocated one (`fallocate`) costs what it holds;
//! - counts a file with several hard links once in bytes; in files, as the file system
//!   charges it: tmpfs takes an inode of its `nr_inodes` for every link, and for every KiB of
//!   extended attributes, so there each link counts and an inode's attributes are weighed
//!   (a job making links to one file, or attributes on it, once filled a tmpfs while counted
//!   as a handful of files);
//! - never follows a symbolic link, and stays on the tree's file system;
//! - holds two descriptors at a time whatever the depth: it descends with `openat` and climbs
//!   back with `..`, checking that `..` is the directory it came from (a tree deeper than
//!   `PATH_MAX`, or than the descriptors a process may open, cannot hide what is below);
//! - opens a directory the job made unreadable (mode 000) after giving its owner — the
//!   runner's uid — read and search access, as [`crate::remove`] does before removing it.
//!
//! What it cannot see (a directory changed under it, one it may not open) is counted in
//! [`Usage::unseen`], so a caller knows the figure is a lower bound.

use std::collections::HashSet;
use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;

/// What [`measure`] found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Allocated bytes: `st_blocks` × 512 of every entry, hard links counted once.
    pub bytes: u64,
    /// Inodes the file system charges for the tree: entries (files, directories, links, …),
    /// and on tmpfs each hard link and each KiB of extended attributes too.
    pub entries: u64,
    /// Directories that could not be read, or that changed while being read: what they hold
    /// is not in `bytes`.
    pub unseen: u64,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        self.bytes += other.bytes;
        self.entries += other.entries;
        self.unseen += other.unseen;
    }
}

/// What the trees of one job share while measured: hard-linked files already counted, so a
/// file linked into two of them counts once, and the trees' roots, so a tree inside another
/// (the checkout in the job's directory) counts under its own name only.
#[derive(Debug, Default)]
pub struct Seen {
    linked: HashSet<(u64, u64)>,
    roots: HashSet<(u64, u64)>,
}

impl Seen {
    /// Measures of `roots` will not enter one another: each is measured on its own.
    pub fn with_roots<'a>(roots: impl IntoIterator<Item = &'a Path>) -> Seen {
        let roots = roots
            .into_iter()
            .filter_map(|r| rustix::fs::lstat(r).ok())
            .filter(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory)
            .map(|st| (st.st_dev, st.st_ino))
            .collect();
        Seen {
            linked: HashSet::new(),
            roots,
        }
    }
}

/// Measures the tree at `root` (a missing root is empty; a file is measured alone).
pub fn measure(root: &Path, seen: &mut Seen) -> Usage {
    let mut usage = Usage::default();
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let top = match rustix::fs::open(root, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOTDIR) | Err(Errno::LOOP) => {
            // A file or a link where a directory was expected: its own blocks.
            if let Ok(st) = rustix::fs::lstat(root) {
                count(&st, &mut usage, seen, false);
            }
            return usage;
        }
        Err(Errno::NOENT) => return usage,
        Err(Errno::ACCESS) | Err(Errno::PERM) => match open_after_chmod(root) {
            Some(fd) => fd,
            None => {
                usage.unseen += 1;
                return usage;
            }
        },
        Err(_) => {
            usage.unseen += 1;
            return usage;
        }
    };
    walk(top, &mut usage, seen);
    usage
}

/// tmpfs's `f_type` (linux/magic.h).
const TMPFS_MAGIC: rustix::fs::FsWord = 0x0102_1994;
/// What tmpfs charges one inode for, of extended attributes (`BOGO_INODE_SIZE`), and what it
/// adds to each attribute's name and value (`struct simple_xattr`, rounded up).
const TMPFS_INODE_BYTES: u64 = 1024;
const TMPFS_XATTR_OVERHEAD: u64 = 48;

/// Whether the directory `dir` is on a tmpfs, which charges links and attributes as inodes.
fn on_tmpfs(dir: &OwnedFd) -> bool {
    rustix::fs::fstatfs(dir).is_ok_and(|st| st.f_type == TMPFS_MAGIC)
}

/// The inodes tmpfs charges for the extended attributes of `name` in `dir` (not followed).
fn xattr_inodes(dir: &OwnedFd, name: &std::ffi::CStr) -> u64 {
    use std::os::fd::AsRawFd;
    let mut path = format!("/proc/self/fd/{}/", dir.as_raw_fd()).into_bytes();
    path.extend_from_slice(name.to_bytes());
    let Ok(path) = CString::new(path) else {
        return 0;
    };
    // Most files have none: one call says so.
    let size = match rustix::fs::llistxattr_query(path.as_c_str()) {
        Ok(0) | Err(_) => return 0,
        Ok(size) => size,
    };
    let mut names = vec![0u8; size];
    let Ok(len) = rustix::fs::llistxattr(path.as_c_str(), &mut names[..]) else {
        // Grown meanwhile: at least the names it had.
        return (size as u64).div_ceil(TMPFS_INODE_BYTES);
    };
    let bytes: u64 = names[..len]
        .split(|b| *b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| {
            let value = CString::new(n)
                .ok()
                .and_then(|n| rustix::fs::lgetxattr_query(path.as_c_str(), n.as_c_str()).ok())
                .unwrap_or(0);
            TMPFS_XATTR_OVERHEAD + n.len() as u64 + 1 + value as u64
        })
        .sum();
    bytes.div_ceil(TMPFS_INODE_BYTES)
}

/// One directory on the way down: who it is, and the subdirectories still to visit.
struct Frame {
    dev: u64,
    ino: u64,
    pending: Vec<CString>,
}

fn walk(top: OwnedFd, usage: &mut Usage, seen: &mut Seen) {
    let Ok(st) = rustix::fs::fstat(&top) else {
        usage.unseen += 1;
        return;
    };
    let tmpfs = on_tmpfs(&top);
    if count(&st, usage, seen, tmpfs) && tmpfs {
        usage.entries += xattr_inodes(&top, c".");
    }
    let dev = st.st_dev;
    let mut current = top;
    let Some(pending) = list(&current, dev, usage, seen, tmpfs) else {
        usage.unseen += 1;
        return;
    };
    let mut stack = vec![Frame {
        dev,
        ino: st.st_ino,
        pending,
    }];
    while let Some(top) = stack.last_mut() {
        if let Some(name) = top.pending.pop() {
            let Some(child) = open_child(&current, &name) else {
                usage.unseen += 1;
                continue;
            };
            let Ok(cst) = rustix::fs::fstat(&child) else {
                usage.unseen += 1;
                continue;
            };
            // Counted when listed; a directory swapped in since then (another device, or a
            // link where it was) is not entered.
            if cst.st_dev != dev || FileType::from_raw_mode(cst.st_mode) != FileType::Directory {
                continue;
            }
            match list(&child, dev, usage, seen, tmpfs) {
                Some(pending) => {
                    stack.push(Frame {
                        dev: cst.st_dev,
                        ino: cst.st_ino,
                        pending,
                    });
                    current = child;
                }
                None => usage.unseen += 1,
            }
            continue;
        }
        stack.pop();
        let Some(parent) = stack.last() else { break };
        // Back up one level. `..` is where the directory is now: if it was moved meanwhile,
        // that is somewhere else, and what is left of this walk cannot be trusted to stay in
        // the tree.
        let up = rustix::fs::openat(
            &current,
            c"..",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        );
        match up.and_then(|fd| rustix::fs::fstat(&fd).map(|st| (fd, st))) {
            Ok((fd, st)) if st.st_dev == parent.dev && st.st_ino == parent.ino => current = fd,
            _ => {
                usage.unseen += stack.iter().map(|f| f.pending.len() as u64).sum::<u64>() + 1;
                return;
            }
        }
    }
}

/// Counts the entries of directory `dir` and returns its subdirectories on `dev`; `None` if
/// it cannot be read.
fn list(
    dir: &OwnedFd,
    dev: u64,
    usage: &mut Usage,
    seen: &mut Seen,
    tmpfs: bool,
) -> Option<Vec<CString>> {
    let fd = rustix::io::dup(dir).ok()?;
    let mut entries = Dir::new(fd).ok()?;
    let mut subdirs = Vec::new();
    while let Some(entry) = entries.read() {
        let Ok(entry) = entry else {
            usage.unseen += 1;
            break;
        };
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let Ok(st) = rustix::fs::statat(dir.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW) else {
            continue; // removed meanwhile
        };
        if seen.roots.contains(&(st.st_dev, st.st_ino)) {
            continue; // another tree of the job, measured on its own
        }
        let kind = FileType::from_raw_mode(st.st_mode);
        let first = count(&st, usage, seen, tmpfs);
        if first && tmpfs && matches!(kind, FileType::RegularFile | FileType::Directory) {
            usage.entries += xattr_inodes(dir, name);
        }
        if kind == FileType::Directory && st.st_dev == dev {
            subdirs.push(name.to_owned());
        }
    }
    Some(subdirs)
}

/// Counts one entry: its inode's blocks once, and an inode, once or (`tmpfs`) for every link.
/// Returns whether the inode was new to this walk.
fn count(st: &rustix::fs::Stat, usage: &mut Usage, seen: &mut Seen, tmpfs: bool) -> bool {
    let is_dir = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
    let first = is_dir || st.st_nlink <= 1 || seen.linked.insert((st.st_dev, st.st_ino));
    if first {
        usage.bytes += (st.st_blocks as u64).saturating_mul(512);
    }
    if first || tmpfs {
        usage.entries += 1;
    }
    first
}

/// Opens subdirectory `name` of `dir` without following a link, giving its owner read and
/// search access first if it has none (see the module's doc).
fn open_child(dir: &OwnedFd, name: &CString) -> Option<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat(dir, name.as_c_str(), flags, Mode::empty()) {
        Ok(fd) => Some(fd),
        Err(Errno::ACCESS) | Err(Errno::PERM) => {
            let st = rustix::fs::statat(dir, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW).ok()?;
            if st.st_uid != rustix::process::geteuid().as_raw() {
                return None;
            }
            let mode = Mode::from_raw_mode(st.st_mode & 0o7777) | Mode::RUSR | Mode::XUSR;
            rustix::fs::chmodat(dir, name.as_c_str(), mode, AtFlags::empty()).ok()?;
            rustix::fs::openat(dir, name.as_c_str(), flags, Mode::empty()).ok()
        }
        Err(_) => None,
    }
}

/// [`open_child`] for a tree's root, by path.
fn open_after_chmod(root: &Path) -> Option<OwnedFd> {
    let parent = root.parent()?;
    let name = CString::new(root.file_name()?.as_encoded_bytes()).ok()?;
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let dir = rustix::fs::open(parent, flags, Mode::empty()).ok()?;
    open_child(&dir, &name)
}

#[cfg(test)]
#[path = "usage_tests.rs"]
mod tests;
