//! A job's files: a bare clone per repository, shared by its jobs and written by the runner
//! alone; the job's own git store and worktree at the job's revision; and a private
//! `/tmp/quest-job-*` directory that is both HOME and TMPDIR of the agent's commands.
//!
//! ```text
//! <state>/repos/<hash of repo>.git     bare clone, shared by the jobs of one repository
//! <state>/jobs/<id>/job.json           the validated job
//! <state>/jobs/<id>/git/               the job's git store (see `job_git`; removed when the job ends)
//! <state>/jobs/<id>/checkout/          the worktree (removed when the job ends); a root
//!                                      runner's is an overlay (`overlay`) of the revision's
//!                                      shared tree, <state>/trees/… (`revision_tree`)
//! <state>/jobs/<id>/layer/             that overlay's job layer: what the job wrote
//! <state>/jobs/<id>/runner/            the agent's configuration and devShell script
//! <state>/jobs/<id>/workspace.json     what to clean if the runner dies mid-job
//! $TMPDIR/quest-job-XXXXXX/            HOME and TMPDIR (removed when the job ends)
//! $TMPDIR/quest-srt-XXXXXX/            srt's scratch dir (removed when the job ends)
//! $TMPDIR/quest-proxy-XXXXXX/          the network proxy's TMPDIR (removed when the job ends)
//! ```
//!
//! `$TMPDIR` is the runner's when it is short enough for Claude Code (see [`temp_parent`]),
//! else `/tmp`.
//!
//! What a job writes — its checkout, its git store (objects included), its temp dir — is all
//! under its own directories. The worktree, store and temp dir are removed on every exit path
//! by [`Workspace`]'s drop. A runner killed outright leaves `workspace.json` behind with its
//! job lock released, and the next runner's [`sweep_abandoned`] removes what it names.
//!
//! The layout is computed first, purely ([`JobLayout`], `paths.rs`), so `quest-runner policy`
//! and `serve` name the same paths a run makes; [`Workspace::prepare`] then makes them. The
//! shared clone is `clone.rs`, the job's git store `job_git.rs`, the record and cleanup
//! `cleanup.rs`, the temp dirs' parent `temp.rs`.

use std::path::{Path, PathBuf};

use crate::git::{Git, GitError};
use crate::job::Job;
use crate::lockfile::LockFile;
use crate::state::{StateDir, StateError};
use crate::util::io::{IoContext, IoError};
use cleanup::{clean, Cleanup};
use clone::{fetch, lock_bare, nix_ref};
use job_git::JobGit;
use namespace::JobNamespace;
use overlay::Layer;
use std::sync::Arc;
use stubs::exclude_text;

mod cleanup;
mod clone;
pub mod job_git;
pub mod namespace;
pub mod overlay;
mod owned_mount;
mod paths;
pub mod revision_tree;
mod stubs;
mod temp;
mod tree_delta;
mod tree_stack;

pub use cleanup::{has_record, sweep_abandoned, WorkspaceRecord};
pub use clone::{
    bare_lock_path, ensure_bare_clone, forget_removed_jobs, lock_bare_blocking, CLEANUP_LOCK_WAIT,
    JOB_REFS,
};
pub use paths::{
    bare_clone_path, job_root, JobLayout, WorkspacePaths, HELPER_TMP_PREFIX, PROXY_TMP_PREFIX,
    RECORD_FILE,
};
pub use stubs::{AGENT_CONFIG, SRT_PROTECTED_NAMES};
pub use temp::{temp_parent, TempParent, CLAUDE_TMPDIR_MAX, TEMP_PARENT, TEMP_PREFIX, TMPDIR_MAX};

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Io(#[from] IoError),
    #[error("revision {rev} is not in {repo} (fetched {what}){git}")]
    RevMissing {
        rev: String,
        repo: String,
        what: String,
        /// `": git said: ..."`, the last fetch's failure; empty when git fetched and the
        /// revision was not among what it got.
        git: String,
    },
    #[error("job {0} already has a workspace; job ids must be unique")]
    Duplicate(String),
    #[error("the agent's commits could not be kept: {0}")]
    Import(String),
}

/// A prepared workspace. Dropping it removes the worktree and the temp dir.
pub struct Workspace {
    pub paths: WorkspacePaths,
    /// The git ref Nix can fetch the revision by (Nix 2.8 needs one).
    pub nix_ref: String,
    pub job_root: PathBuf,
    /// The network proxy's TMPDIR (srt writes its trust bundle there and never removes it).
    /// Not one of the directories that mark a process as the job's (see
    /// `run::tree::job_markers` and `serve::procs::markers`): the runner stops those with the
    /// agent, before it stops the proxy through its lifeline.
    pub proxy_tmp: PathBuf,
    /// The job's layer when its checkout is an overlay of the revision's shared tree.
    pub layer: Option<Layer>,
    git: JobGit,
    /// Released after the drop's cleanup has unmounted the overlay.
    _tree_hold: Option<revision_tree::TreeHold>,
    _lock: LockFile,
}

impl Workspace {
    /// Fetches the revision into the repository's bare clone and lays out the job's files,
    /// its temp dirs in [`temp_parent`].
    pub async fn prepare(state: &StateDir, job: &Job) -> Result<Workspace, WorkspaceError> {
        Self::prepare_in(state, job, &temp_parent().path).await
    }

    /// [`Workspace::prepare`] with the temp dirs in `temp_parent`.
    pub async fn prepare_in(
        state: &StateDir,
        job: &Job,
        temp_parent: &Path,
    ) -> Result<Workspace, WorkspaceError> {
        state.ensure_dir(Path::new("jobs"))?;
        state.ensure_dir(Path::new("repos"))?;
        let layout = JobLayout::of(state, &job.id, &job.repo);
        let lock = claim_job_dir(&layout.root, &job.id)?;
        fetch(&layout.bare_clone, job).await?;
        let (tree, tree_hold) = shared_tree(state, &layout.bare_clone, &job.rev)
            .await?
            .unzip();
        let layer = tree.as_ref().map(|t| Layer::of(&layout.root, &t.lowers()));

        // Removed by their guards until the record that names them is written.
        let temp_in = |prefix: &str| {
            tempfile::Builder::new()
                .prefix(prefix)
                .tempdir_in(temp_parent)
                .at("creating a directory in", temp_parent)
        };
        let temp_guard = temp_in(TEMP_PREFIX)?;
        let helper_guard = temp_in(HELPER_TMP_PREFIX)?;
        let proxy_guard = temp_in(PROXY_TMP_PREFIX)?;
        let paths = layout.paths(
            temp_guard.path().to_path_buf(),
            helper_guard.path().to_path_buf(),
        );
        let proxy_tmp = proxy_guard.path().to_path_buf();
        let record = WorkspaceRecord {
            checkout: paths.checkout.clone(),
            git_store: Some(paths.git_store.clone()),
            worktree_admin: None,
            temp_dir: paths.temp_dir.clone(),
            helper_tmp: paths.helper_tmp.clone(),
            proxy_tmp: Some(proxy_tmp.clone()),
            layer: layer.clone(),
        };
        record.write(&layout.root)?;
        let _ = (temp_guard.keep(), helper_guard.keep(), proxy_guard.keep());
        // From here on, dropping `partial` cleans up whatever exists.
        let mut partial = Cleanup {
            job_root: layout.root.clone(),
            armed: true,
        };
        let mut git = JobGit::at(&layout.root);
        std::fs::create_dir(&layout.runner_dir).at("creating", &layout.runner_dir)?;
        // The job's own store and worktree: no lock, nothing shared is written.
        match (&tree, &layer) {
            (Some(tree), Some(layer)) => {
                git.create_layered(
                    &layout.bare_clone,
                    &job.rev,
                    &exclude_text(),
                    (&tree.index, layer),
                )
                .await?
            }
            _ => {
                git.create(&layout.bare_clone, &job.rev, &exclude_text())
                    .await?
            }
        }
        partial.armed = false;

        Ok(Workspace {
            paths: canonical(paths)?,
            nix_ref: nix_ref(&job.rev),
            job_root: layout.root,
            proxy_tmp,
            layer,
            git,
            _tree_hold: tree_hold,
            _lock: lock,
        })
    }

    /// The worktree's HEAD now, and the commits made on top of the job's revision (oldest
    /// first), after bringing them into the shared clone under `refs/quest/jobs/<id>`: through
    /// a fetch that verifies every object (see `job_git`), which also keeps them from the
    /// clone's garbage collection once the job's store is gone.
    pub async fn commits_since(
        &self,
        job_id: &str,
        base: &str,
    ) -> Result<(String, Vec<String>), WorkspaceError> {
        let head = self.git.head().await?;
        let bare_path = &self.paths.bare_clone;
        let refname = format!("{JOB_REFS}{job_id}");
        self.git
            .import(bare_path, &head, &refname, lock_bare(bare_path))
            .await?;
        // Oldest first; a job may have made any number of commits, so the list is bounded.
        let (listed, cut) = Git::new(bare_path)?
            .stdout_bounded(
                &["rev-list", "--reverse", &format!("{base}..{head}")],
                self.git.limit,
                job_git::LISTING_MAX_BYTES,
            )
            .await?;
        let commits = job_git::complete_lines(&listed, cut).map(str::to_string);
        Ok((head, job_git::with_cut_mark(commits, cut)))
    }

    /// What `git status --porcelain --ignored` reports in the worktree, one path per entry.
    pub async fn uncommitted(&self) -> Result<Vec<String>, WorkspaceError> {
        self.git.status().await
    }
}

impl Workspace {
    /// The namespace that alone holds the layered checkout of a runner that is not root
    /// (`owned_mount`): the agent starts in it, and the runner's git enters it.
    pub fn namespace(&self) -> Option<&Arc<JobNamespace>> {
        self.git.namespace.as_ref()
    }

    /// The checkout as the runner's own process reads it: at its path, or, when only the job's
    /// namespace holds it (a runner that is not root), through that namespace's descriptor
    /// of it (a path of this process's alone, which no child inherits).
    pub fn checkout_view(&self) -> PathBuf {
        let view = self.namespace().and_then(|ns| ns.checkout_view());
        view.unwrap_or_else(|| self.paths.checkout.clone())
    }

    /// What the job writes, for the disk watchdog: all of it is the job's own (the shared
    /// clone is the runner's alone). A tree inside another (the checkout and the git store in
    /// the job's directory) counts under its own name.
    pub fn disk_trees(&self) -> Vec<crate::disk::watch::Tree> {
        use crate::disk::watch::Tree;
        let tree = |label, path: &Path| Tree::new(label, path);
        let p = &self.paths;
        // Of a layered checkout, only the job's layer is the job's: the tree below is shared.
        let checkout = self.layer.as_ref().map_or(&p.checkout, |l| &l.upper);
        vec![
            tree("checkout", checkout),
            tree("git data", &p.git_store),
            tree("job files", &self.job_root),
            tree("temp dirs", &p.temp_dir),
            tree("temp dirs", &p.helper_tmp),
            tree("temp dirs", &self.proxy_tmp),
        ]
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        // The job's own namespace first: with it goes its mount (this is the last hold once
        // the job's processes are gone).
        self.git.namespace = None;
        clean(&self.job_root, CLEANUP_LOCK_WAIT);
    }
}

/// The job's layer when the checkout at `checkout` is an overlay (as the job's
/// `workspace.json` says); `None` for a full checkout.
pub fn checkout_layer(checkout: &Path) -> Option<Layer> {
    let record = checkout.parent().map(WorkspaceRecord::read);
    match record {
        Some(Ok(Some(WorkspaceRecord { layer, .. }))) => layer,
        _ => None,
    }
}

/// The revision's shared tree, for a checkout layered on it, when this runner layers
/// checkouts (root, overlayfs: see `overlay`); `None`, a full checkout, otherwise.
async fn shared_tree(
    state: &StateDir,
    bare: &Path,
    rev: &str,
) -> Result<Option<(revision_tree::RevisionTree, revision_tree::TreeHold)>, WorkspaceError> {
    let trees = state.root().join(revision_tree::TREES_DIR);
    if overlay::available(&trees).is_err() {
        return Ok(None);
    }
    // The agent's identity owns the files of every checkout a root runner makes; any other
    // runner's are its own.
    let root = rustix::process::geteuid().is_root();
    let hand_over = root.then_some(crate::agent_id::chown_tree);
    // `gc` may take a tree away between its write and the hold: written again then.
    for _ in 0..3 {
        let tree = revision_tree::ensure(state, bare, rev, hand_over).await?;
        if let Some(hold) = revision_tree::hold(&tree)? {
            return Ok(Some((tree, hold)));
        }
    }
    Err(IoError::at(
        "holding",
        &revision_tree::tree_dir(state, bare, rev),
        std::io::Error::other("the revision tree was removed three times as it was written"),
    )
    .into())
}

/// Makes the job's directory and takes its lock: a second job with the same id is refused.
fn claim_job_dir(job_root: &Path, id: &str) -> Result<LockFile, WorkspaceError> {
    match std::fs::create_dir(job_root) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(WorkspaceError::Duplicate(id.to_string()))
        }
        Err(e) => return Err(IoError::at("creating", job_root, e).into()),
    }
    LockFile::try_acquire(&job_root.join("lock"))
        .at("locking", job_root)?
        .ok_or_else(|| WorkspaceError::Duplicate(id.to_string()))
}

/// The paths resolved, as the sandbox sees them (the state or temp dir may be reached
/// through a link).
fn canonical(paths: WorkspacePaths) -> Result<WorkspacePaths, WorkspaceError> {
    let resolve = |p: &Path| std::fs::canonicalize(p).at("resolving", p);
    Ok(WorkspacePaths {
        checkout: resolve(&paths.checkout)?,
        bare_clone: resolve(&paths.bare_clone)?,
        git_store: resolve(&paths.git_store)?,
        worktree_admin: resolve(&paths.worktree_admin)?,
        temp_dir: resolve(&paths.temp_dir)?,
        job_dir: resolve(&paths.job_dir)?,
        helper_tmp: resolve(&paths.helper_tmp)?,
        devshell_script: None,
    })
}
