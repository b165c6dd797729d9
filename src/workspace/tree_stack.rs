//! A revision's shared tree as it lies on disk: its files, or a delta over the tree of
//! another revision, down a stack of at most [`MAX_DELTAS`]. Read by the trees' writer
//! ([`super::revision_tree`]) and by the deltas' ([`super::tree_delta`]), neither of which
//! the other needs for it.

use std::path::{Path, PathBuf};

/// How many delta trees may lie on one another: a deeper stack costs every lookup in a job's
/// checkout a layer more, so a revision past it gets a full tree.
pub const MAX_DELTAS: usize = 4;

/// One revision's shared tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevisionTree {
    /// `<tree>/files`, the revision's files, or `<tree>/delta`, what it changes over `base`.
    pub files: PathBuf,
    /// `<tree>/index`: git's index of the revision's files (through the stack of layers), for
    /// a job's worktree to start from.
    pub index: PathBuf,
    /// The tree `files` is a delta over.
    pub base: Option<Box<RevisionTree>>,
}

impl RevisionTree {
    /// The complete tree in `dir`: `None` while it is being written, or when a base below it
    /// is missing or the stack is deeper than [`MAX_DELTAS`] allows.
    pub(super) fn read_dir(dir: &Path) -> Option<RevisionTree> {
        Self::read_within(dir, MAX_DELTAS)
    }

    /// The revision it is the tree of (its directory's name).
    pub(super) fn rev(&self) -> Option<&str> {
        self.dir().file_name().and_then(|n| n.to_str())
    }

    fn read_within(dir: &Path, deltas: usize) -> Option<RevisionTree> {
        let index = dir.join("index");
        if !index.is_file() {
            return None;
        }
        let files = dir.join("files");
        if files.is_dir() {
            return Some(RevisionTree {
                files,
                index,
                base: None,
            });
        }
        let name = std::fs::read_to_string(dir.join("base")).ok()?;
        let name = name.trim();
        if deltas == 0 || !crate::util::git_names::is_full_rev(name) {
            return None;
        }
        let base = Self::read_within(&dir.with_file_name(name), deltas - 1)?;
        Some(RevisionTree {
            files: dir.join("delta"),
            index,
            base: Some(Box::new(base)),
        })
    }

    /// Its layers, the top one first.
    pub fn lowers(&self) -> Vec<PathBuf> {
        let mut out = vec![self.files.clone()];
        out.extend(self.base.iter().flat_map(|b| b.lowers()));
        out
    }

    /// The trees in its stack, itself first.
    pub(super) fn stack(&self) -> impl Iterator<Item = &RevisionTree> {
        std::iter::successors(Some(self), |t| t.base.as_deref())
    }

    /// How many delta trees its stack holds.
    pub fn deltas(&self) -> usize {
        self.stack().filter(|t| t.base.is_some()).count()
    }

    /// The tree's directory.
    pub(super) fn dir(&self) -> &Path {
        self.index.parent().unwrap_or(Path::new("/"))
    }
}
