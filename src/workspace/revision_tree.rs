//! A revision's files written once by the runner, for jobs to share read-only: the lower layer
//! of the per-job overlay that issue 31 measures (`cargo bench --bench workspace`). Not used by
//! jobs yet: a job still gets its own full checkout (`job_git`).
//!
//! ```text
//! <state>/trees/                        the runner's alone (0700): no job's identity reaches it
//! <state>/trees/<clone>/<rev>/files/    the revision's files, as `reset --hard` writes them
//! <state>/trees/<clone>/<rev>/index     git's index of them, stat data included
//! ```
//!
//! Written from the shared clone's verified objects, before any job ran on them, by the same
//! `JobGit::create` a job's checkout takes, into a temp dir renamed into place: a tree that
//! exists is complete. Keyed by the clone as well as the revision, so no repository's objects
//! decide another's files. When the runner hands trees to the agent's identity (root), the
//! files are handed over here, once, and the index refreshed after, so the stat data the job's
//! git compares (owner, ctime) is what a job on an overlay of the tree sees: `git status`
//! there stats every file and reads none.

use std::path::{Path, PathBuf};

use super::job_git::JobGit;
use super::WorkspaceError;
use crate::state::StateDir;
use crate::util::io::{IoContext, IoError};

/// The revision trees' directory under the state dir.
pub const TREES_DIR: &str = "trees";

/// One revision's shared tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevisionTree {
    /// `<tree>/files`: the revision's files.
    pub files: PathBuf,
    /// `<tree>/index`: git's index of `files`, for a job's worktree to start from.
    pub index: PathBuf,
}

impl RevisionTree {
    fn at(dir: &Path) -> RevisionTree {
        RevisionTree {
            files: dir.join("files"),
            index: dir.join("index"),
        }
    }
}

/// Where the tree of `rev` from the shared clone `bare` is.
pub fn tree_dir(state: &StateDir, bare: &Path, rev: &str) -> PathBuf {
    let clone = bare
        .file_name()
        .map(|n| n.to_string_lossy().trim_end_matches(".git").to_string())
        .unwrap_or_default();
    state.root().join(TREES_DIR).join(clone).join(rev)
}

/// The tree of `rev` (which `bare` holds), written now if no runner wrote it before.
/// `hand_over`, when the runner hands job trees to the agent's identity, is applied to the
/// files before the index is refreshed.
pub async fn ensure<F>(
    state: &StateDir,
    bare: &Path,
    rev: &str,
    hand_over: Option<F>,
) -> Result<RevisionTree, WorkspaceError>
where
    F: Fn(&Path) -> std::io::Result<()>,
{
    let dir = tree_dir(state, bare, rev);
    let tree = RevisionTree::at(&dir);
    if tree.index.is_file() {
        return Ok(tree);
    }
    let parent = private_parent(state, &dir)?;
    let tmp = tempfile::Builder::new()
        .prefix(".new-")
        .tempdir_in(&parent)
        .at("creating a directory in", &parent)?;
    let git = JobGit::at(tmp.path());
    git.create(bare, rev, "").await?;
    if let Some(hand_over) = hand_over {
        hand_over(&git.checkout).at("handing to the agent's identity", &git.checkout)?;
        git.git()?
            .output_within(&["update-index", "-q", "--refresh"], git.limit)
            .await?;
    }
    let staged = RevisionTree::at(tmp.path());
    let index = git.admin.join("index");
    std::fs::rename(&index, &staged.index).at("moving", &index)?;
    let dotgit = git.checkout.join(".git");
    std::fs::remove_file(&dotgit).at("removing", &dotgit)?;
    std::fs::rename(&git.checkout, &staged.files).at("moving", &git.checkout)?;
    crate::remove::remove_tree(&git.store).at("removing", &git.store)?;
    match std::fs::rename(tmp.path(), &dir) {
        Ok(()) => Ok(tree),
        // Another runner wrote it meanwhile: theirs is as good (`tmp` goes with its drop).
        Err(_) if tree.index.is_file() => Ok(tree),
        Err(e) => Err(IoError::at("moving into place", &dir, e).into()),
    }
}

/// Makes `<state>/trees` (owner only) and the clone's directory in it; returns the latter.
fn private_parent(state: &StateDir, dir: &Path) -> Result<PathBuf, WorkspaceError> {
    use std::os::unix::fs::PermissionsExt;
    let root = state.root().join(TREES_DIR);
    match std::fs::create_dir(&root) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(IoError::at("creating", &root, e).into()),
    }
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700))
        .at("making private", &root)?;
    let parent = dir.parent().unwrap_or(&root).to_path_buf();
    std::fs::create_dir_all(&parent).at("creating", &parent)?;
    Ok(parent)
}
