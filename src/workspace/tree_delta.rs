//! A revision's shared tree written as what it changes over a tree the clone already has
//! (`revision_tree`): a new revision near a cached one costs its changed files, not the whole
//! tree again (issue 31).
//!
//! The base's layers are mounted read-only under a fresh upper layer, in the runner's own
//! directory for the clone's trees (owner only); git, starting from the base's index, moves the
//! worktree to the new revision (`reset --hard`, which writes only the entries that differ),
//! and overlayfs records that in the upper layer: changed and added files, and a whiteout for
//! each removed one. Unmounted, the upper layer is the new tree's `delta`, and a job's checkout
//! stacks it over the base's layers. The mount has the checkouts' source, so no job's namespace
//! copies it (`namespace`), and it is gone before the tree is renamed into place.
//!
//! A stack is at most [`MAX_DELTAS`] deltas deep, and a revision that changes more than a
//! quarter of its base's files gets a full tree: beyond that, the lookups a deeper stack costs
//! every job outweigh the write it saves.

use std::path::Path;
use std::time::SystemTime;

use super::job_git::{JobGit, JOB_GIT_LIMIT};
use super::overlay::{self, Layer};
use super::tree_stack::{RevisionTree, MAX_DELTAS};
use super::WorkspaceError;
use crate::git::Git;
use crate::util::io::IoContext;

/// How many of the clone's most recently used trees are compared with a new revision.
const CANDIDATES: usize = 3;

/// The tree to write `rev`'s as a delta over: among the most recently used complete trees in
/// `parent` (the clone's), the first with room in its stack and at most a quarter of its
/// files changed; `None`: write the tree whole.
pub(super) async fn base_for(
    bare: &Path,
    rev: &str,
    parent: &Path,
) -> Result<Option<RevisionTree>, WorkspaceError> {
    let mut trees: Vec<(SystemTime, RevisionTree)> = std::fs::read_dir(parent)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name() != rev && !e.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|e| {
            let used = e.metadata().and_then(|m| m.modified()).ok()?;
            Some((used, RevisionTree::read_dir(&e.path())?))
        })
        .filter(|(_, tree)| tree.deltas() < MAX_DELTAS)
        .collect();
    trees.sort_by_key(|t| std::cmp::Reverse(t.0));
    let git = Git::new(bare)?;
    for (_, tree) in trees.into_iter().take(CANDIDATES) {
        let Some(entries) = index_entries(&tree.index) else {
            continue;
        };
        let Some(base) = tree.rev() else { continue };
        // Names only, NUL-ended; a listing longer than a quarter of the entries could be is
        // cut, and answers "too many" all the same.
        let most = (entries / 4) as u64;
        let args = [
            "diff-tree",
            "-r",
            "-z",
            "--no-renames",
            "--name-only",
            base,
            rev,
        ];
        let (listed, cut) = git
            .stdout_bounded(&args, JOB_GIT_LIMIT, most.saturating_mul(256) + 4096)
            .await?;
        let changed = listed.bytes().filter(|&b| b == 0).count() as u64;
        if !cut && changed <= most {
            return Ok(Some(tree));
        }
    }
    Ok(None)
}

/// Writes `rev`'s tree into `tmp` as a delta over `base` (`delta`, `base`, `index`).
/// `hand_over`: the runner hands trees to the agent's identity (root), which the delta's
/// files then are, through the mount, before the index's stat data is refreshed.
pub(super) async fn write(
    bare: &Path,
    rev: &str,
    base: &RevisionTree,
    tmp: &Path,
    hand_over: bool,
) -> Result<(), WorkspaceError> {
    let mut git = JobGit::at(tmp);
    git.add_worktree(bare, rev, "").await?;
    let index = git.admin.join("index");
    std::fs::copy(&base.index, &index).at("copying", &base.index)?;
    let layer = Layer::in_dir(tmp, &base.lowers());
    layer.create()?;
    let dotgit = layer.upper.join(".git");
    let made = git.checkout.join(".git");
    std::fs::rename(&made, &dotgit).at("moving", &made)?;
    {
        // A runner that is not root mounts it in namespaces of its own, which its git enters
        // and which end with the descriptors (`owned_mount`).
        let _mounted = match rustix::process::geteuid().is_root() {
            true => {
                layer.mount(&git.checkout)?;
                Some(Mounted(&git.checkout))
            }
            false => {
                let ns = super::namespace::JobNamespace::owned(&layer, &git.checkout)
                    .at("mounting a revision tree's build on", &git.checkout)?;
                git.namespace = Some(ns);
                None
            }
        };
        // Entries that match the base's index are left alone: only what differs is written.
        git.git()?.output(&["reset", "--hard", "--quiet"]).await?;
        if hand_over {
            crate::agent_id::chown_layer(&layer.upper, &git.checkout)
                .at("handing to the agent's identity", &layer.upper)?;
            git.git()?
                .output_within(&["update-index", "-q", "--refresh"], git.limit)
                .await?;
        }
        git.namespace = None;
    }
    std::fs::remove_file(&dotgit).at("removing", &dotgit)?;
    std::fs::rename(&index, tmp.join("index")).at("moving", &index)?;
    std::fs::rename(&layer.upper, tmp.join("delta")).at("moving", &layer.upper)?;
    let name = base.rev().unwrap_or_default();
    std::fs::write(tmp.join("base"), format!("{name}\n")).at("writing", &tmp.join("base"))?;
    for dir in [&layer.work, &git.store, &git.checkout] {
        crate::remove::remove_tree(dir).at("removing", dir)?;
    }
    Ok(())
}

/// Unmounts the build's overlay on every path out of [`write`].
struct Mounted<'a>(&'a Path);

impl Drop for Mounted<'_> {
    fn drop(&mut self) {
        if let Err(e) = overlay::unmount(self.0) {
            tracing::warn!("unmounting a revision tree's build: {e}");
        }
    }
}

/// How many entries git's index at `path` has (its header: signature, version, count).
fn index_entries(path: &Path) -> Option<usize> {
    use std::io::Read;
    let mut header = [0u8; 12];
    std::fs::File::open(path)
        .ok()?
        .read_exact(&mut header)
        .ok()?;
    if &header[..4] != b"DIRC" {
        return None;
    }
    let count = u32::from_be_bytes([header[8], header[9], header[10], header[11]]);
    usize::try_from(count).ok()
}
