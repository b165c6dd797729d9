//! The shared clone of a repository: cloned and fetched by the runner alone, under its lock,
//! checked when an older runner let jobs write it, and rid of the refs of jobs that are gone.

use std::path::{Path, PathBuf};

use super::paths::{bare_clone_path, job_root};
use super::WorkspaceError;
use crate::git::{Git, GitError};
use crate::job::Job;
use crate::lockfile::LockFile;
use crate::remove::remove_tree;
use crate::state::StateDir;
use crate::util::io::{IoContext, IoError};

/// The bare clone's lock: everything that writes the shared clone — cloning, fetching, setting
/// the Nix branch, importing a job's commits, maintenance — holds it, one at a time. Concurrent
/// fetches into one clone race for the same ref locks, and gc must not repack under a fetch.
/// (Readers — a job's git through its alternates, Nix — need no lock: git only ever adds
/// objects and replaces packs atomically.)
pub fn bare_lock_path(bare: &Path) -> PathBuf {
    bare.with_extension("lock")
}

pub(super) async fn lock_bare(bare: &Path) -> Result<LockFile, WorkspaceError> {
    let path = bare_lock_path(bare);
    Ok(LockFile::acquire(&path).await.at("locking", &path)?)
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
pub(super) fn nix_ref(rev: &str) -> String {
    format!("quest/rev/{rev}")
}

/// Makes sure the bare clone has the job's revision, and the branch [`nix_ref`] naming it:
/// clones on first use, then fetches the job's ref (which Nix and a human can name) or the bare
/// revision. The branch is made under the lock too: two jobs at one revision would otherwise
/// race for its ref lock.
pub(super) async fn fetch(bare_path: &Path, job: &Job) -> Result<Git, WorkspaceError> {
    let _lock = lock_bare(bare_path).await?;
    let bare = Git::for_fetch(bare_path)?;
    if bare_path.join("HEAD").exists() && !is_set_up(bare_path) {
        adopt_older_clone(bare_path).await?;
    }
    let created = !bare_path.join("HEAD").exists();
    if created {
        let staged = bare_path.with_extension("new");
        remove_tree(&staged).at("removing", &staged)?;
        let init = Git::new(&staged)?;
        init.output(&["init", "--quiet", "--bare"]).await?;
        init.output(&["remote", "add", "origin", &job.repo]).await?;
        set_up_clone(&staged).await?;
        std::fs::rename(&staged, bare_path).at("publishing", bare_path)?;
    }
    let fetched = match fetch_rev(&bare, bare_path, job).await {
        Ok(fetched) => fetched,
        Err(e) => {
            // A clone this fetch made and nothing filled (a wrong URL) is not left in repos/.
            if created {
                if let Err(rm) = remove_tree(bare_path) {
                    tracing::warn!(clone = %bare_path.display(), "removing the failed clone: {rm}");
                }
            }
            return Err(e);
        }
    };
    let local = Git::new(bare_path)?;
    let branch = format!("refs/heads/{}", nix_ref(&job.rev));
    // Usually there already, as a loose ref file. Set again when a gc packed it, or when
    // something else is there: a clone older runners let jobs write may hold a symlink or FIFO.
    let ref_file = bare_path.join(&branch);
    if read_ref_file(&ref_file).as_deref() != Some(job.rev.as_str()) {
        remove_non_file(&ref_file).at("removing", &ref_file)?;
        local
            .output(&["update-ref", "--no-deref", &branch, &job.rev])
            .await?;
    }
    if fetched {
        gc_auto(&local, bare_path).await;
    }
    Ok(local)
}

/// Fetches the job's ref, then the bare revision, until the clone has the revision; a
/// failure carries git's own words (an unknown host, a missing repository, a refused login).
/// `false`: the clone had it, nothing was fetched.
async fn fetch_rev(bare: &Git, bare_path: &Path, job: &Job) -> Result<bool, WorkspaceError> {
    let has_rev = || crate::git_objects::has_object(bare_path, &job.rev).unwrap_or(false);
    if has_rev() {
        return Ok(false);
    }
    let mut fetched = Vec::new();
    let mut git_said = None;
    if let Some(r) = &job.git_ref {
        let short = r.strip_prefix("refs/heads/").unwrap_or(r);
        let spec = format!("+refs/heads/{short}:refs/heads/{short}");
        match fetch_retrying(bare, &spec).await {
            Ok(()) => fetched.push(format!("branch {short}")),
            Err(e) => git_said = Some(e),
        }
    }
    if !has_rev() {
        if let Err(e) = fetch_retrying(bare, &job.rev).await {
            git_said = Some(e);
        }
        fetched.push("the revision itself".to_string());
    }
    if has_rev() {
        return Ok(true);
    }
    Err(WorkspaceError::RevMissing {
        rev: job.rev.clone(),
        repo: job.repo.clone(),
        what: fetched.join(", then "),
        git: git_said.map_or_else(String::new, |e| format!(": {}", git_words(&e))),
    })
}

/// Attempts of a fetch whose failure looks transient (a timeout, a reset, a 5xx), and the
/// wait before each retry.
const FETCH_RETRY_WAITS: [std::time::Duration; 2] = [
    std::time::Duration::from_secs(1),
    std::time::Duration::from_secs(4),
];

async fn fetch_retrying(bare: &Git, what: &str) -> Result<(), GitError> {
    let args = ["fetch", "--quiet", "--no-tags", "origin", what];
    let mut waits = FETCH_RETRY_WAITS.iter();
    loop {
        match bare.output(&args).await {
            Ok(_) => return Ok(()),
            Err(e) => match waits.next() {
                Some(wait) if is_transient(&e) => {
                    tracing::info!(%what, "fetch failed, retrying in {}s: {e}", wait.as_secs());
                    tokio::time::sleep(*wait).await;
                }
                _ => return Err(e),
            },
        }
    }
}

/// Whether git's error may go away by itself: the network or the server, not the request.
pub fn is_transient(e: &GitError) -> bool {
    let text = e.to_string().to_ascii_lowercase();
    [
        "could not resolve host",
        "temporary failure in name resolution",
        "timed out",
        "connection reset",
        "early eof",
        "the remote end hung up unexpectedly",
        "rpc failed",
        "returned error: 5",
        "gnutls_handshake",
        "ssl_read",
    ]
    .iter()
    .any(|t| text.contains(t))
}

/// git's message without the runner's "git fetch ... failed:" framing.
fn git_words(e: &GitError) -> String {
    match e {
        GitError::Failed { message, .. } => format!("git said: {}", message.trim()),
        other => other.to_string(),
    }
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
    std::fs::create_dir_all(&info).at("creating", &info)?;
    let mark = bare.join(SETUP_FILE);
    Ok(std::fs::write(&mark, SETUP_VERSION).at("writing", &mark)?)
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
        remove_any(&path).at("removing", &path)?;
    }
    let packs = bare.join("objects/pack");
    if let Ok(entries) = std::fs::read_dir(&packs) {
        for entry in entries.flatten() {
            let path = entry.path();
            let derived = path
                .extension()
                .is_some_and(|e| e == "bitmap" || e == "rev" || e == "midx");
            if derived {
                remove_any(&path).at("removing", &path)?;
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
            Ok(std::fs::rename(bare, &aside).at("setting aside", bare)?)
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
        Err(e) => return Err(IoError::at("reading", &repos, e).into()),
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
#[path = "clone_tests.rs"]
mod tests;
