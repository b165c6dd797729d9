//! A revision's files written once by the runner, for jobs to share read-only: the lower layer
//! of a root runner's job checkouts (`overlay`; `cargo bench --bench workspace` measures it).
//!
//! ```text
//! <state>/trees/                        the runner's alone (0700): no job's identity reaches it
//! <state>/trees/<clone>/<rev>/files/    the revision's files, as `reset --hard` writes them
//! <state>/trees/<clone>/<rev>/index     git's index of them, stat data included
//! <state>/trees/<clone>/<rev>/delta/    or, instead of `files`: what <rev> changes over a
//! <state>/trees/<clone>/<rev>/base        tree of the clone's (its revision named in `base`)
//! ```
//!
//! A new revision near a tree the clone has (at most a quarter of its files changed, and fewer
//! than [`MAX_DELTAS`] deltas below it) costs what changed: its tree is an overlay layer over
//! that one (`tree_delta`), and a job's checkout stacks them.
//!
//! Written from the shared clone's verified objects, before any job ran on them, by the same
//! `JobGit::create` a job's checkout takes, into a temp dir renamed into place: a tree that
//! exists is complete. Keyed by the clone as well as the revision, so no repository's objects
//! decide another's files. When the runner hands trees to the agent's identity (root), the
//! files are handed over here, once, and the index refreshed after, so the stat data the job's
//! git compares (owner, ctime) is what a job on an overlay of the tree sees: `git status`
//! there stats every file and reads none.
//!
//! A job holds its tree ([`hold`]) while its overlay is mounted; `quest-runner gc` removes the
//! trees no job has started on for its `--older-than` ([`gc`]), never one held or named by a
//! workspace record. A tree costs the revision's size once, whatever the number of its jobs.

pub use super::tree_stack::{RevisionTree, MAX_DELTAS};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::job_git::JobGit;
use super::WorkspaceError;
use crate::state::StateDir;
use crate::util::io::{IoContext, IoError};

/// The revision trees' directory under the state dir.
pub const TREES_DIR: &str = "trees";

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
    if let Some(tree) = RevisionTree::read_dir(&dir) {
        return Ok(tree);
    }
    let parent = private_parent(state, &dir)?;
    // Jobs at a new revision start together (serve's concurrency): one writes the tree, the
    // others wait for it rather than writing it again.
    let lock_path = parent.join(format!(".{rev}.lock"));
    let _writing = crate::lockfile::LockFile::acquire(&lock_path)
        .await
        .at("locking", &lock_path)?;
    if let Some(tree) = RevisionTree::read_dir(&dir) {
        return Ok(tree);
    }
    set_aside_if_broken(&dir)?;
    let tmp = tempfile::Builder::new()
        .prefix(".new-")
        .tempdir_in(&parent)
        .at("creating a directory in", &parent)?;
    let base = super::tree_delta::base_for(bare, rev, &parent).await?;
    // Held while the delta is written over it, so `gc` cannot take it away meanwhile.
    let held = match &base {
        Some(base) => hold(base)?.map(|h| (base, h)),
        None => None,
    };
    match held {
        Some((base, _hold)) => {
            super::tree_delta::write(bare, rev, base, tmp.path(), hand_over.is_some()).await?
        }
        None => write_full(bare, rev, tmp.path(), hand_over).await?,
    }
    match std::fs::rename(tmp.path(), &dir) {
        Ok(()) => {}
        // Another runner wrote it meanwhile: theirs is as good (`tmp` goes with its drop).
        Err(_) if dir.join("index").is_file() => {}
        Err(e) => return Err(IoError::at("moving into place", &dir, e).into()),
    }
    RevisionTree::read_dir(&dir).ok_or_else(|| {
        let e = std::io::Error::other("the tree just written is incomplete");
        IoError::at("reading", &dir, e).into()
    })
}

/// Moves a tree that cannot be read whole (a base below it is gone) aside, for `gc`, so it is
/// written again.
fn set_aside_if_broken(dir: &Path) -> Result<(), WorkspaceError> {
    if !dir.exists() {
        return Ok(());
    }
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    let aside = tempfile::Builder::new()
        .prefix(&format!(".broken-{name}-"))
        .tempdir_in(dir.parent().unwrap_or(Path::new("/")))
        .at("creating a directory beside", dir)?
        .keep();
    let to = aside.join("tree");
    std::fs::rename(dir, &to).at("moving aside", dir)?;
    tracing::warn!(tree = %dir.display(), "a revision tree whose base is gone, set aside for gc");
    Ok(())
}

/// Writes the whole tree of `rev` into `tmp` (`files` and `index`).
async fn write_full<F>(
    bare: &Path,
    rev: &str,
    tmp: &Path,
    hand_over: Option<F>,
) -> Result<(), WorkspaceError>
where
    F: Fn(&Path) -> std::io::Result<()>,
{
    let git = JobGit::at(tmp);
    git.create(bare, rev, "").await?;
    if let Some(hand_over) = hand_over {
        hand_over(&git.checkout).at("handing to the agent's identity", &git.checkout)?;
        git.git()?
            .output_within(&["update-index", "-q", "--refresh"], git.limit)
            .await?;
    }
    let index = git.admin.join("index");
    std::fs::rename(&index, tmp.join("index")).at("moving", &index)?;
    let dotgit = git.checkout.join(".git");
    std::fs::remove_file(&dotgit).at("removing", &dotgit)?;
    std::fs::rename(&git.checkout, tmp.join("files")).at("moving", &git.checkout)?;
    crate::remove::remove_tree(&git.store).at("removing", &git.store)?;
    Ok(())
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

/// A job's hold on the tree its checkout is layered on: a shared lock on the index of each
/// tree in its stack, for as long as the overlay is mounted. [`gc`] removes no tree that
/// anyone holds.
#[derive(Debug)]
pub struct TreeHold {
    _indexes: Vec<std::fs::File>,
}

/// Takes a hold on `tree` (and the trees below it) and marks it used now (what [`gc`]'s age
/// is counted from); `None` when `gc` took a tree of the stack away meanwhile, and the caller
/// writes it again.
pub fn hold(tree: &RevisionTree) -> Result<Option<TreeHold>, WorkspaceError> {
    use rustix::fs::{flock, FlockOperation};
    use std::os::unix::fs::MetadataExt;
    let mut indexes = Vec::new();
    for t in tree.stack() {
        let index = match std::fs::File::open(&t.index) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(IoError::at("opening", &t.index, e).into()),
        };
        // `gc` holds its exclusive lock only to move the tree aside: no wait worth bounding.
        flock(&index, FlockOperation::LockShared)
            .map_err(|e| IoError::at("locking", &t.index, e.into()))?;
        let ours = index.metadata().at("reading", &t.index)?;
        match std::fs::metadata(&t.index) {
            Ok(now) if now.ino() == ours.ino() && now.dev() == ours.dev() => {}
            _ => return Ok(None),
        }
        indexes.push(index);
    }
    let dir = tree.dir();
    let touched = std::fs::File::open(dir).and_then(|d| d.set_modified(SystemTime::now()));
    touched.at("marking as used", dir)?;
    Ok(Some(TreeHold { _indexes: indexes }))
}

/// Removes the revision trees under `state` that no job has started on for longer than
/// `older_than`, none that a job holds, that a workspace record names (a dead runner's
/// mount, until its sweep) or that another tree lies on, and the leftovers of writes and
/// probes that died; returns the removed trees as `<clone>/<rev>`.
pub fn gc(state: &StateDir, older_than: Duration) -> Vec<String> {
    let cutoff = SystemTime::now()
        .checked_sub(older_than)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let named = lowers_in_records(state);
    let root = state.root().join(TREES_DIR);
    let mut removed = Vec::new();
    let dirs = |dir: &Path| -> Vec<PathBuf> {
        let entries = std::fs::read_dir(dir).into_iter().flatten().flatten();
        entries.map(|e| e.path()).filter(|p| p.is_dir()).collect()
    };
    // A pass frees the trees the removed ones lay on, for the next.
    for _ in 0..=MAX_DELTAS {
        let before = removed.len();
        for dir in dirs(&root).into_iter().chain(std::iter::once(root.clone())) {
            let bases = bases_in(&dirs(&dir));
            for tree in dirs(&dir) {
                let name = tree.file_name().map(|n| n.to_string_lossy().into_owned());
                let name = name.unwrap_or_default();
                let old = std::fs::metadata(&tree)
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t < cutoff);
                if !old || dir == root && !name.starts_with('.') || bases.contains(&name) {
                    continue;
                }
                if name.starts_with('.') {
                    // A write or probe that died before its rename (or a removal cut short);
                    // a delta's write may have left its overlay mounted.
                    let _ = super::overlay::unmount(&tree.join("checkout"));
                    let _ = crate::remove::remove_tree(&tree);
                } else if !named.contains(&top_layer(&tree)) {
                    if let Some(gone) = take_unheld(&tree) {
                        let clone = dir.file_name().unwrap_or_default().to_string_lossy();
                        removed.push(format!("{clone}/{name}"));
                        if let Err(e) = crate::remove::remove_tree(&gone) {
                            tracing::warn!(path = %gone.display(), "removing a revision tree: {e}");
                        }
                    }
                }
            }
        }
        if removed.len() == before {
            break;
        }
    }
    removed.sort();
    removed
}

/// The revisions that trees among `trees` are deltas over.
fn bases_in(trees: &[PathBuf]) -> std::collections::HashSet<String> {
    let named = trees
        .iter()
        .filter_map(|t| std::fs::read_to_string(t.join("base")).ok());
    named.map(|n| n.trim().to_string()).collect()
}

/// The top layer of the tree in `dir`, as a workspace record names it.
fn top_layer(dir: &Path) -> PathBuf {
    match dir.join("files").is_dir() {
        true => dir.join("files"),
        false => dir.join("delta"),
    }
}

/// Moves `tree` aside (to a dot name [`gc`] removes) unless a job holds it.
fn take_unheld(tree: &Path) -> Option<PathBuf> {
    use rustix::fs::{flock, FlockOperation};
    let index = std::fs::File::open(tree.join("index")).ok()?;
    flock(&index, FlockOperation::NonBlockingLockExclusive).ok()?;
    let name = tree.file_name()?.to_string_lossy().into_owned();
    let gone = tree.with_file_name(format!(".gone-{name}"));
    std::fs::rename(tree, &gone).ok()?;
    Some(gone)
}

/// The lower layers that the state's workspace records name.
fn lowers_in_records(state: &StateDir) -> std::collections::HashSet<PathBuf> {
    let jobs = std::fs::read_dir(state.root().join("jobs"))
        .into_iter()
        .flatten();
    jobs.flatten()
        .filter_map(|job| super::WorkspaceRecord::read(&job.path()).ok().flatten())
        .filter_map(|record| record.layer)
        .flat_map(|l| l.lowers().cloned().collect::<Vec<_>>())
        .collect()
}
