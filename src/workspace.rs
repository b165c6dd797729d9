//! A job's files: a bare clone per repository, shared by its jobs and written by the runner
//! alone; the job's own git store and worktree at the job's revision; and a private
//! `/tmp/quest-job-*` directory that is both HOME and TMPDIR of the agent's commands.
//!
//! ```text
//! <state>/repos/<hash of repo>.git     bare clone, shared by the jobs of one repository
//! <state>/jobs/<id>/job.json           the validated job
//! <state>/jobs/<id>/git/               the job's git store (see `job_git`; removed when the job ends)
//! <state>/jobs/<id>/checkout/          the worktree (removed when the job ends)
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

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::git::{Git, GitError};
use crate::job::Job;
use crate::lockfile::LockFile;
use crate::remove::remove_tree;
use crate::sandbox::WorkspacePaths;
use crate::state::{StateDir, StateError};
use job_git::JobGit;

pub mod job_git;

/// The parent of the private temp dirs when the runner's `TMPDIR` cannot be used.
pub const TEMP_PARENT: &str = "/tmp";
pub const TEMP_PREFIX: &str = "quest-job-";
/// Claude Code ignores a `CLAUDE_CODE_TMPDIR` longer than this (and falls back to the shared
/// `/tmp/claude-<uid>`); the job's temp dir is that variable.
pub const CLAUDE_TMPDIR_MAX: usize = 35;
/// What a temp dir's name adds to its parent: `/quest-job-XXXXXX`.
const TEMP_NAME_LEN: usize = 1 + TEMP_PREFIX.len() + 6;
/// The longest `TMPDIR` (resolved) jobs' temp dirs can go in.
pub const TMPDIR_MAX: usize = CLAUDE_TMPDIR_MAX - TEMP_NAME_LEN;

/// Where a job's private temp dirs are made, and why there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TempParent {
    pub path: PathBuf,
    /// Why the runner's `TMPDIR` was not used, when it was set.
    pub why_not_tmpdir: Option<String>,
}

/// The runner's `TMPDIR` (resolved), so that jobs write where the operator put temporary
/// files — often a larger disk than a RAM-backed `/tmp` — when a temp dir in it is short
/// enough for Claude Code's `CLAUDE_CODE_TMPDIR`; else `/tmp`.
pub fn temp_parent() -> TempParent {
    choose_temp_parent(std::env::var_os("TMPDIR").map(PathBuf::from))
}

fn choose_temp_parent(tmpdir: Option<PathBuf>) -> TempParent {
    let fallback = |why: String| TempParent {
        path: PathBuf::from(TEMP_PARENT),
        why_not_tmpdir: Some(why),
    };
    let Some(tmpdir) = tmpdir.filter(|t| !t.as_os_str().is_empty()) else {
        return TempParent {
            path: PathBuf::from(TEMP_PARENT),
            why_not_tmpdir: None,
        };
    };
    let shown = tmpdir.display();
    let resolved = match std::fs::canonicalize(&tmpdir) {
        Ok(p) if p.is_dir() => p,
        Ok(_) => return fallback(format!("TMPDIR={shown} is not a directory")),
        Err(e) => return fallback(format!("TMPDIR={shown}: {e}")),
    };
    let len = resolved.as_os_str().len();
    if resolved.parent().is_none() {
        return fallback(format!("TMPDIR={shown} is the root directory"));
    }
    if len > TMPDIR_MAX {
        return fallback(format!(
            "TMPDIR={} is {len} characters; a job's temp dir in it would be longer than the \
             {CLAUDE_TMPDIR_MAX} Claude Code accepts for CLAUDE_CODE_TMPDIR (at most \
             {TMPDIR_MAX} for TMPDIR)",
            resolved.display(),
        ));
    }
    TempParent {
        path: resolved,
        why_not_tmpdir: None,
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Git(#[from] GitError),
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("revision {rev} is not in {repo} (fetched {what})")]
    RevMissing {
        rev: String,
        repo: String,
        what: String,
    },
    #[error("job {0} already has a workspace; job ids must be unique")]
    Duplicate(String),
    #[error("the agent's commits could not be kept: {0}")]
    Import(String),
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> WorkspaceError {
    let path = path.to_path_buf();
    move |source| WorkspaceError::Io {
        action,
        path,
        source,
    }
}

/// What `workspace.json` records, so a later runner can clean up after a dead one.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    checkout: PathBuf,
    /// The job's git store. Absent in records of runners that registered the checkout in the
    /// shared clone (`worktree_admin` then lies in `<bare>/worktrees/`).
    #[serde(default)]
    git_store: Option<PathBuf>,
    worktree_admin: Option<PathBuf>,
    temp_dir: PathBuf,
    helper_tmp: PathBuf,
    /// Absent in records written before it existed.
    #[serde(default)]
    proxy_tmp: Option<PathBuf>,
}

/// A prepared workspace. Dropping it removes the worktree and the temp dir.
pub struct Workspace {
    pub paths: WorkspacePaths,
    /// The git ref Nix can fetch the revision by (Nix 2.8 needs one).
    pub nix_ref: String,
    pub job_root: PathBuf,
    /// The network proxy's TMPDIR (srt writes its trust bundle there and never removes it).
    /// Not one of the directories that mark a process as the job's (see `run::job_markers`
    /// and `serve::procs::markers`): the runner stops those with the agent, before it stops
    /// the proxy through its lifeline.
    pub proxy_tmp: PathBuf,
    git: JobGit,
    _lock: LockFile,
}

/// The bare clone's directory for `repo`: named by a hash, so no URL can name a path.
pub fn bare_clone_path(state: &StateDir, repo: &str) -> PathBuf {
    let digest = Sha256::digest(repo.as_bytes());
    state
        .root()
        .join("repos")
        .join(format!("{}.git", crate::util::hex::encode(&digest[..10])))
}

pub fn job_root(state: &StateDir, id: &str) -> PathBuf {
    state.root().join("jobs").join(id)
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
        let jobs = state.ensure_dir(Path::new("jobs"))?;
        state.ensure_dir(Path::new("repos"))?;
        let job_root = jobs.join(&job.id);
        match std::fs::create_dir(&job_root) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(WorkspaceError::Duplicate(job.id.clone()))
            }
            Err(e) => return Err(io("creating", &job_root)(e)),
        }
        let lock = LockFile::try_acquire(&job_root.join("lock"))
            .map_err(io("locking", &job_root))?
            .ok_or_else(|| WorkspaceError::Duplicate(job.id.clone()))?;

        let bare_path = bare_clone_path(state, &job.repo);
        fetch(&bare_path, job).await?;
        let nix_ref = nix_ref(&job.rev);

        // Removed by their guards until the record that names them is written.
        let temp_in = |prefix: &str| {
            tempfile::Builder::new()
                .prefix(prefix)
                .tempdir_in(temp_parent)
                .map_err(io("creating a directory in", temp_parent))
        };
        let temp_guard = temp_in(TEMP_PREFIX)?;
        let helper_guard = temp_in("quest-srt-")?;
        let proxy_guard = temp_in("quest-proxy-")?;
        let temp_dir = temp_guard.path().to_path_buf();
        let helper_tmp = helper_guard.path().to_path_buf();
        let proxy_tmp = proxy_guard.path().to_path_buf();
        let git = JobGit::at(&job_root);
        let runner_dir = job_root.join("runner");
        let record = Record {
            checkout: git.checkout.clone(),
            git_store: Some(git.store.clone()),
            worktree_admin: None,
            temp_dir: temp_dir.clone(),
            helper_tmp: helper_tmp.clone(),
            proxy_tmp: Some(proxy_tmp.clone()),
        };
        write_record(&job_root, &record)?;
        let _ = (temp_guard.keep(), helper_guard.keep(), proxy_guard.keep());
        // From here on, dropping `partial` cleans up whatever exists.
        let partial = Cleanup {
            job_root: job_root.clone(),
            armed: true,
        };
        std::fs::create_dir(&runner_dir).map_err(io("creating", &runner_dir))?;
        // The job's own store and worktree: no lock, nothing shared is written.
        git.create(&bare_path, &job.rev, &exclude_text()).await?;
        let mut partial = partial;
        partial.armed = false;

        let canonical = |p: &Path| std::fs::canonicalize(p).map_err(io("resolving", p));
        Ok(Workspace {
            paths: WorkspacePaths {
                checkout: canonical(&git.checkout)?,
                bare_clone: canonical(&bare_path)?,
                git_store: canonical(&git.store)?,
                worktree_admin: canonical(&git.admin)?,
                temp_dir: canonical(&temp_dir)?,
                job_dir: canonical(&runner_dir)?,
                helper_tmp: canonical(&helper_tmp)?,
                devshell_script: None,
            },
            nix_ref,
            job_root,
            proxy_tmp,
            git,
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
    /// What the job writes, for the disk watchdog: all of it is the job's own (the shared
    /// clone is the runner's alone). A tree inside another (the checkout and the git store in
    /// the job's directory) counts under its own name.
    pub fn disk_trees(&self) -> Vec<crate::disk::watch::Tree> {
        use crate::disk::watch::Tree;
        let tree = |label, path: &Path| Tree {
            label,
            path: path.to_path_buf(),
        };
        let p = &self.paths;
        vec![
            tree("checkout", &p.checkout),
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
        clean(&self.job_root, CLEANUP_LOCK_WAIT);
    }
}

/// Removes what `workspace.json` names, unless disarmed.
struct Cleanup {
    job_root: PathBuf,
    armed: bool,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if self.armed {
            clean(&self.job_root, CLEANUP_LOCK_WAIT);
        }
    }
}

/// Removes the worktree, its administrative directory and the temp dir of the job at
/// `job_root`, then the record itself. Errors are logged: cleanup must not mask the job's
/// own outcome, and a leftover is retried by the next sweep.
fn clean(job_root: &Path, lock_wait: std::time::Duration) {
    let record_path = job_root.join("workspace.json");
    let Ok(bytes) = std::fs::read(&record_path) else {
        return;
    };
    let Ok(record) = serde_json::from_slice::<Record>(&bytes) else {
        tracing::warn!(path = %record_path.display(), "unreadable workspace record");
        return;
    };
    let mut ok = true;
    let mut remove = |dir: &Path| {
        if let Err(e) = remove_tree(dir) {
            tracing::warn!(path = %dir.display(), "could not remove: {e}");
            ok = false;
        }
    };
    remove(&record.checkout);
    remove(&record.temp_dir);
    remove(&record.helper_tmp);
    if let Some(dir) = &record.proxy_tmp {
        remove(dir);
    }
    if let Some(store) = &record.git_store {
        remove(store);
    }
    if let Some(admin) = &record.worktree_admin {
        // A record of an older runner, whose checkouts were worktrees of the shared clone:
        // `<bare>/worktrees/<name>`, which other git on the clone reads while it exists.
        match admin.parent().and_then(Path::parent) {
            Some(bare) => match lock_bare_blocking(bare, lock_wait) {
                Ok(Some(_bare)) => remove(admin),
                Ok(None) => {
                    tracing::warn!(path = %admin.display(), "the bare clone stayed locked; the next sweep removes this worktree entry");
                    ok = false;
                }
                Err(e) => {
                    tracing::warn!(path = %admin.display(), "could not lock the bare clone: {e}");
                    ok = false;
                }
            },
            None => remove(admin),
        }
    }
    if ok {
        let _ = std::fs::remove_file(&record_path);
    }
}

/// Cleans the workspaces of jobs whose runner died: a `workspace.json` whose job lock nobody
/// holds. Returns how many were cleaned.
pub fn sweep_abandoned(state: &StateDir) -> usize {
    let Ok(jobs) = std::fs::read_dir(state.root().join("jobs")) else {
        return 0;
    };
    let mut cleaned = 0;
    for job in jobs.flatten() {
        let root = job.path();
        if !root.join("workspace.json").exists() {
            continue;
        }
        if let Ok(Some(_lock)) = LockFile::try_acquire(&root.join("lock")) {
            tracing::info!(job = %root.display(), "cleaning the workspace of a job whose runner died");
            // No wait: a clone locked now is retried by the next sweep, and a runner
            // sweeping many leftovers must not wait for each in turn.
            clean(&root, std::time::Duration::ZERO);
            cleaned += 1;
        }
    }
    cleaned
}

fn write_record(job_root: &Path, record: &Record) -> Result<(), WorkspaceError> {
    let path = job_root.join("workspace.json");
    let data = serde_json::to_vec_pretty(record).unwrap_or_default();
    crate::util::fs::write_atomically(job_root, &path, &data).map_err(io("writing", &path))
}

/// The bare clone's lock: everything that writes the shared clone — cloning, fetching, setting
/// the Nix branch, importing a job's commits, maintenance — holds it, one at a time. Concurrent
/// fetches into one clone race for the same ref locks, and gc must not repack under a fetch.
/// (Readers — a job's git through its alternates, Nix — need no lock: git only ever adds
/// objects and replaces packs atomically.)
pub fn bare_lock_path(bare: &Path) -> PathBuf {
    bare.with_extension("lock")
}

async fn lock_bare(bare: &Path) -> Result<LockFile, WorkspaceError> {
    let path = bare_lock_path(bare);
    LockFile::acquire(&path).await.map_err(io("locking", &path))
}

/// How long cleanup waits for the bare clone's lock before leaving an older runner's worktree
/// entry to the next sweep: long enough for any fetch of a small repository, short enough that
/// a long fetch elsewhere cannot hold up a job's end (or a runner's shutdown) for minutes.
pub const CLEANUP_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The bare clone's lock for code that cannot await (cleanup in `Drop`, the suite's controls).
/// The holder may be a task of this very runtime waiting on its git child; on a multi-thread
/// runtime `block_in_place` hands this worker's tasks to another thread so that holder can
/// finish. (On a current-thread runtime the wait simply times out; the runner prepares
/// workspaces only on multi-thread runtimes.)
pub fn lock_bare_blocking(
    bare: &Path,
    limit: std::time::Duration,
) -> std::io::Result<Option<LockFile>> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let path = bare_lock_path(bare);
    let take = || LockFile::acquire_blocking_within(&path, limit);
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(take)
        }
        _ => take(),
    }
}

/// The administrative directory git made for the worktree, from its `.git` file (read right
/// after `worktree add`, before any command of the job ran).
pub(crate) fn worktree_admin_of(checkout: &Path) -> Result<PathBuf, WorkspaceError> {
    let dotgit = checkout.join(".git");
    let text = std::fs::read_to_string(&dotgit).map_err(io("reading", &dotgit))?;
    let dir = text
        .trim()
        .strip_prefix("gitdir: ")
        .map(PathBuf::from)
        .ok_or_else(|| WorkspaceError::Io {
            action: "parsing",
            path: dotgit.clone(),
            source: std::io::Error::other("not a gitdir file"),
        })?;
    Ok(if dir.is_absolute() {
        dir
    } else {
        checkout.join(dir)
    })
}

/// The bare clone of `job`'s repository, holding its revision (the boundary suite prepares
/// it before the job to run its unconfined controls against the same paths).
pub async fn ensure_bare_clone(state: &StateDir, job: &Job) -> Result<PathBuf, WorkspaceError> {
    state.ensure_dir(Path::new("repos"))?;
    let path = bare_clone_path(state, &job.repo);
    state.check_ours(&path)?;
    state.check_ours(&bare_lock_path(&path))?;
    fetch(&path, job).await?;
    Ok(path)
}

/// The branch that names a job's revision in the bare clone, for Nix releases that cannot fetch
/// a bare revision.
fn nix_ref(rev: &str) -> String {
    format!("quest/rev/{rev}")
}

/// Makes sure the bare clone has the job's revision, and the branch [`nix_ref`] naming it:
/// clones on first use, then fetches the job's ref (which Nix and a human can name) or the bare
/// revision. The branch is made under the lock too: two jobs at one revision would otherwise
/// race for its ref lock.
async fn fetch(bare_path: &Path, job: &Job) -> Result<Git, WorkspaceError> {
    let _lock = lock_bare(bare_path).await?;
    let bare = Git::for_fetch(bare_path)?;
    if bare_path.join("HEAD").exists() && !is_set_up(bare_path) {
        adopt_older_clone(bare_path).await?;
    }
    if !bare_path.join("HEAD").exists() {
        let staged = bare_path.with_extension("new");
        remove_tree(&staged).map_err(io("removing", &staged))?;
        let init = Git::new(&staged)?;
        init.output(&["init", "--quiet", "--bare"]).await?;
        init.output(&["remote", "add", "origin", &job.repo]).await?;
        set_up_clone(&staged).await?;
        std::fs::rename(&staged, bare_path).map_err(io("publishing", bare_path))?;
    }
    let has_rev = |bare: &Path| crate::git_objects::has_object(bare, &job.rev).unwrap_or(false);
    let mut fetched = Vec::new();
    if !has_rev(bare_path) {
        if let Some(r) = &job.git_ref {
            let short = r.strip_prefix("refs/heads/").unwrap_or(r);
            let spec = format!("+refs/heads/{short}:refs/heads/{short}");
            if bare
                .output(&["fetch", "--quiet", "--no-tags", "origin", &spec])
                .await
                .is_ok()
            {
                fetched.push(format!("branch {short}"));
            }
        }
    }
    if !has_rev(bare_path) {
        bare.output(&["fetch", "--quiet", "--no-tags", "origin", &job.rev])
            .await
            .ok();
        fetched.push("the revision itself".to_string());
    }
    if !has_rev(bare_path) {
        return Err(WorkspaceError::RevMissing {
            rev: job.rev.clone(),
            repo: job.repo.clone(),
            what: fetched.join(", then "),
        });
    }
    let local = Git::new(bare_path)?;
    let branch = format!("refs/heads/{}", nix_ref(&job.rev));
    // Usually there already, as a loose ref file. Set again when a gc packed it, or when
    // something else is there: a clone older runners let jobs write may hold a symlink or FIFO.
    let ref_file = bare_path.join(&branch);
    if read_ref_file(&ref_file).as_deref() != Some(job.rev.as_str()) {
        remove_non_file(&ref_file).map_err(io("removing", &ref_file))?;
        local
            .output(&["update-ref", "--no-deref", &branch, &job.rev])
            .await?;
    }
    if !fetched.is_empty() {
        gc_auto(&local, bare_path).await;
    }
    Ok(local)
}

/// `git gc --auto` on a shared clone with git's default thresholds, in the foreground so it
/// ends before the clone's lock is released. A failure is logged, never the caller's.
async fn gc_auto(git: &Git, bare: &Path) {
    let gc = [
        "-c",
        "gc.auto=6700",
        "-c",
        "gc.autoDetach=false",
        "gc",
        "--auto",
        "--quiet",
    ];
    if let Err(e) = git.output(&gc).await {
        tracing::warn!(clone = %bare.display(), "git gc --auto: {e}");
    }
}

/// The trimmed content of a ref file, read without following a symlink or waiting on a FIFO
/// (agents may write the clone's `refs/`), and at most a few hundred bytes of it.
fn read_ref_file(path: &Path) -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    file.take(256).read_to_string(&mut text).ok()?;
    Some(text.trim().to_string())
}

/// Removes whatever is at `path` unless it is a regular file (a symlink, FIFO or directory an
/// agent put where git expects a ref file).
fn remove_non_file(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => remove_tree(path),
        Ok(m) if !m.is_file() => std::fs::remove_file(path),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Paths the sandbox covers with a read-only `/dev/null` (or an empty directory) while a
/// command runs when they do not exist: srt's mandatory write denies and the policy's agent
/// configuration. Git must ignore them, or `git add -A` inside the sandbox fails on a
/// character device. Ignoring them costs nothing: commands cannot write them anyway, and
/// tracked files are not affected by an exclude.
fn sandbox_stubs() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = crate::sandbox::policy::SRT_PROTECTED_NAMES.to_vec();
    for path in crate::sandbox::policy::AGENT_CONFIG {
        let top = path.split('/').next().unwrap_or(path);
        if !names.contains(&top) {
            names.push(top);
        }
    }
    names
}

/// The `info/exclude` of a job's git store: the sandbox's stubs.
fn exclude_text() -> String {
    let mut text = String::from("# quest-runner: sandbox mount points\n");
    for name in sandbox_stubs() {
        text.push_str(name);
        text.push('\n');
    }
    text
}

/// Marks a shared clone set up by this version: jobs have never written it. In `info/`, which
/// no job could write even before.
const SETUP_FILE: &str = "info/quest-runner";
const SETUP_VERSION: &str = "shared clone v4: written by the runner alone\n";

fn is_set_up(bare: &Path) -> bool {
    std::fs::read_to_string(bare.join(SETUP_FILE)).is_ok_and(|t| t == SETUP_VERSION)
}

/// A new shared clone's settings: no automatic maintenance (the runner runs it itself after
/// fetching, holding the lock), and the mark of this version.
async fn set_up_clone(bare: &Path) -> Result<(), WorkspaceError> {
    let local = Git::new(bare)?;
    local.output(&["config", "gc.auto", "0"]).await?;
    local
        .output(&["config", "maintenance.auto", "false"])
        .await?;
    let info = bare.join("info");
    std::fs::create_dir_all(&info).map_err(io("creating", &info))?;
    let mark = bare.join(SETUP_FILE);
    std::fs::write(&mark, SETUP_VERSION).map_err(io("writing", &mark))
}

/// What a job could plant in a clone that jobs could write, besides objects and refs, which
/// git reads in place of or beside the objects: alternates, commit-graphs (a commit's tree
/// and parents), multi-pack indexes, bitmaps and reverse indexes, replace refs. Reflogs and
/// worktree entries of older runners' jobs go too. All of it is derived data or the jobs' own.
const PLANTABLE: &[&str] = &[
    "worktrees",
    "logs",
    "refs/replace",
    "objects/info/alternates",
    "objects/info/http-alternates",
    "objects/info/commit-graph",
    "objects/info/commit-graphs",
    "objects/info/multi-pack-index",
    "objects/pack/multi-pack-index",
];

/// A shared clone made by an older runner, whose jobs could write its objects and refs: what
/// they could plant beside the objects is removed, and every object is hashed again
/// (`git fsck --full`). A clone that passes is kept, with its refs (earlier jobs' commits
/// among them); one that does not is set aside as `<clone>.unverified-<time>` for the
/// operator, and the repository is cloned again.
async fn adopt_older_clone(bare: &Path) -> Result<(), WorkspaceError> {
    tracing::info!(clone = %bare.display(), "checking a shared clone older runners let jobs write");
    for rel in PLANTABLE {
        let path = bare.join(rel);
        remove_any(&path).map_err(io("removing", &path))?;
    }
    let packs = bare.join("objects/pack");
    if let Ok(entries) = std::fs::read_dir(&packs) {
        for entry in entries.flatten() {
            let path = entry.path();
            let derived = path
                .extension()
                .is_some_and(|e| e == "bitmap" || e == "rev" || e == "midx");
            if derived {
                remove_any(&path).map_err(io("removing", &path))?;
            }
        }
    }
    let fsck = [
        "-c",
        "core.commitGraph=false",
        "-c",
        "core.multiPackIndex=false",
        "fsck",
        "--full",
        "--no-dangling",
        "--no-reflogs",
        "--no-progress",
    ];
    match Git::new(bare)?.output(&fsck).await {
        Ok(_) => set_up_clone(bare).await,
        Err(e) => {
            let secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or_default();
            let aside = PathBuf::from(format!("{}.unverified-{secs}", bare.display()));
            tracing::warn!(
                clone = %bare.display(),
                aside = %aside.display(),
                "the shared clone failed verification ({e}); set aside, cloning again"
            );
            std::fs::rename(bare, &aside).map_err(io("setting aside", bare))
        }
    }
}

/// Where a job's commits are kept in its repository's shared clone.
pub const JOB_REFS: &str = "refs/quest/jobs/";

/// Deletes, in every shared clone of the state dir, the `refs/quest/jobs/<id>` of jobs whose
/// directory is gone (removed by `gc`, by hand, or by an older `gc` that left their refs):
/// each keeps its job's commits, and so the clone's size, for ever. A job's directory exists
/// from before its workspace is made until it is removed, so a running or kept job's ref
/// stays. Each clone is changed under its lock; git's own maintenance (`gc --auto`, run here
/// too, and its two-week expiry of unreachable objects) then drops the commits. Returns the
/// refs deleted.
pub async fn forget_removed_jobs(state: &StateDir) -> Result<Vec<String>, WorkspaceError> {
    let repos = state.root().join("repos");
    let entries = match std::fs::read_dir(&repos) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io("reading", &repos)(e)),
    };
    let mut clones: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        // `<hash>.git` only: not its lock, a clone being made (`.new`) or one set aside.
        .filter(|p| p.extension().is_some_and(|e| e == "git") && p.join("HEAD").is_file())
        .collect();
    clones.sort();
    let mut deleted = Vec::new();
    for bare in clones {
        let _lock = lock_bare(&bare).await?;
        let git = Git::new(&bare)?;
        let listed = git
            .output(&["for-each-ref", "--format=%(refname)", JOB_REFS])
            .await?;
        let gone: Vec<&str> = listed
            .lines()
            .filter(|name| {
                name.strip_prefix(JOB_REFS).is_some_and(|id| {
                    // Only names the runner writes: a job id is a plain file name.
                    crate::job::check_id(id).is_ok() && !job_root(state, id).exists()
                })
            })
            .collect();
        if gone.is_empty() {
            continue;
        }
        let commands: String = gone.iter().map(|r| format!("delete {r}\n")).collect();
        git.output_with_stdin(&["update-ref", "--stdin"], commands.as_bytes())
            .await?;
        gc_auto(&git, &bare).await;
        deleted.extend(gone.iter().map(|r| r.to_string()));
    }
    Ok(deleted)
}

/// Removes a file, link or directory tree at `path`, if any.
fn remove_any(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => remove_tree(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
#[path = "workspace_tests.rs"]
mod tests;
