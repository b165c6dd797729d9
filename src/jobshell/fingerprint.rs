//! What the job's sandbox depends on that can change while it runs, as a command inside it
//! sees it: when it changes, the sandbox no longer is what srt would make now, and the
//! executor has the host make a new one before it runs another command.
//!
//! srt computes a sandbox for the moment it wraps. Wrapping every command, it saw each change
//! in time for the next one; one sandbox per job must notice them instead:
//! - its mandatory write denies below the working directory, found by a scan (`rg --files
//!   --hidden --no-ignore --max-depth 4`, srt 0.0.83's `linuxGetMandatoryDenyPaths`): shell
//!   and tool settings, `.vscode`, `.idea`, `.claude/commands|agents`, a nested repository's
//!   `.git/hooks` and `.git/config`, and directories the scan could not read. A command that
//!   makes a nested repository gets its hooks protected from the next command on.
//!   The working directory's own names are always denied, existing or not, so only their
//!   kind (`.git` a file or a directory) counts;
//! - its read denies of single files (account secrets, the config file wherever they are),
//!   which hold on a name: a file renamed over one on the host is readable in a sandbox made
//!   before.
//!
//! The fingerprint is a superset of what the scan looks at (every entry of those names or
//! under them, not only files, with its inode, so a file deleted and made again counts too),
//! so an unchanged fingerprint means an unchanged scan. The executor takes it when it starts
//! and before each command.

use std::collections::BTreeSet;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Path, PathBuf};

use rustix::fs::FileType;

/// Files srt denies by name at any depth (`DANGEROUS_FILES`, matched case-insensitively).
const DANGEROUS_FILES: &[&str] = &[
    ".gitconfig",
    ".gitmodules",
    ".bashrc",
    ".bash_profile",
    ".zshrc",
    ".zprofile",
    ".profile",
    ".ripgreprc",
    ".mcp.json",
];
/// Directories denied whole, wherever they are.
const DANGEROUS_DIRS: &[&str] = &[".vscode", ".idea"];
/// The depth srt's scan lists files to (its `mandatoryDenySearchDepth`, 3, plus one).
const SCAN_DEPTH: usize = 4;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    /// Entries the scan would look at below the top: (path relative to the checkout, kind,
    /// inode).
    nested: BTreeSet<(Vec<u8>, u32, u64)>,
    /// Directories within the scan's depth that cannot be read.
    unreadable: BTreeSet<Vec<u8>>,
    /// The kind of the checkout's own `.git` (a worktree's is a file).
    top_git: Option<u32>,
    /// Each denied path as the sandbox shows it: (kind, device, inode, rdev), or absent.
    denies: Vec<Option<(u32, u64, u64, u64)>>,
}

impl Fingerprint {
    pub fn take(checkout: &Path, denies: &[PathBuf]) -> Fingerprint {
        let mut fp = Fingerprint {
            nested: BTreeSet::new(),
            unreadable: BTreeSet::new(),
            top_git: std::fs::symlink_metadata(checkout.join(".git"))
                .ok()
                .map(|m| kind_of(m.mode())),
            denies: denies
                .iter()
                .map(|p| {
                    std::fs::symlink_metadata(p)
                        .ok()
                        .map(|m| (kind_of(m.mode()), m.dev(), m.ino(), m.rdev()))
                })
                .collect(),
        };
        fp.walk(checkout, &mut Vec::new());
        fp
    }

    /// Visits `dir` (at `rel`, `rel.len()` deep), recording what the scan would look at.
    fn walk(&mut self, dir: &Path, rel: &mut Vec<Vec<u8>>) {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(_) => {
                if !rel.is_empty() {
                    self.unreadable.insert(rel.join(&b'/'));
                }
                return;
            }
        };
        for entry in entries.flatten() {
            let name = entry.file_name().as_bytes().to_vec();
            // srt's scan leaves out everything under node_modules (a case-sensitive glob).
            if name == b"node_modules" {
                continue;
            }
            let kind = match entry.file_type() {
                Ok(t) if t.is_dir() => FileType::Directory.as_raw_mode(),
                Ok(t) if t.is_symlink() => FileType::Symlink.as_raw_mode(),
                Ok(t) if t.is_file() => FileType::RegularFile.as_raw_mode(),
                _ => 0,
            };
            rel.push(name);
            if rel.len() > 1 && dangerous(rel) {
                self.nested.insert((rel.join(&b'/'), kind, entry.ino()));
            }
            if kind == FileType::Directory.as_raw_mode()
                && rel.len() < SCAN_DEPTH
                && !always_denied(rel)
            {
                self.walk(&entry.path(), rel);
            }
            rel.pop();
        }
    }
}

/// The file type bits of `mode` (`mode & S_IFMT`): the kernel reports only the seven types
/// rustix names.
fn kind_of(mode: u32) -> u32 {
    FileType::from_raw_mode(mode).as_raw_mode()
}

fn lower(c: &[u8]) -> Vec<u8> {
    c.to_ascii_lowercase()
}

/// Whether a path (its components) is one the scan finds or lies under one.
fn dangerous(components: &[Vec<u8>]) -> bool {
    let lc: Vec<Vec<u8>> = components.iter().map(|c| lower(c)).collect();
    let is = |c: &Vec<u8>, name: &str| c.as_slice() == name.as_bytes();
    let last = lc.len() - 1;
    if DANGEROUS_FILES.iter().any(|f| is(&lc[last], f)) {
        return true;
    }
    for (i, c) in lc.iter().enumerate() {
        if DANGEROUS_DIRS.iter().any(|d| is(c, d)) {
            return true;
        }
        let next = lc.get(i + 1);
        if is(c, ".claude") && next.is_some_and(|n| is(n, "commands") || is(n, "agents")) {
            return true;
        }
        if is(c, ".git") && next.is_some_and(|n| is(n, "hooks") || is(n, "config") || is(n, "head"))
        {
            return true;
        }
    }
    false
}

/// The top-level names srt denies whether or not they exist: what is below them changes
/// nothing the scan adds.
fn always_denied(components: &[Vec<u8>]) -> bool {
    components.len() == 1 && {
        let c = lower(&components[0]);
        DANGEROUS_FILES
            .iter()
            .chain(DANGEROUS_DIRS)
            .any(|n| c.as_slice() == n.as_bytes())
    }
}

#[cfg(test)]
#[path = "fingerprint_tests.rs"]
mod tests;
