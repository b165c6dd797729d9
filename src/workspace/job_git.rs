//! A job's own git data, apart from the repository's shared clone.
//!
//! ```text
//! <state>/repos/<hash>.git             the shared clone: written by the runner alone
//! <state>/jobs/<id>/git/               the job's store, a bare repository:
//!     config, HEAD, info/                  the runner's; the job cannot write them
//!     objects/                             the job's new objects (the job writes them)
//!     objects/info/alternates              -> the shared clone's objects, read-only to the job
//!     refs/, logs/                         the job's branches and reflogs (the job writes them)
//!     worktrees/checkout/                  the checkout's HEAD, index and logs (the job writes
//!                                          them), but `commondir`, `gitdir`, `config.worktree`
//! <state>/jobs/<id>/checkout/          the worktree, whose `.git` file the job cannot write
//! ```
//!
//! Git does not check an object's hash when it reads it, and honours replace refs: whoever may
//! write a repository's objects or refs decides what every later reader of it sees. So no job
//! writes the shared clone. Its commands see the shared objects through the alternates file
//! and write their commits into the store, and the runner brings the job's commits into the
//! shared clone with a fetch ([`JobGit::import`]), which hashes each object it receives and
//! checks it with fsck. Checkouts, `AGENTS.md`/`CLAUDE.md` and Nix's devShell builds read the
//! shared clone only, so they always come from verified objects.
//!
//! Everything under the store and the checkout is then the job's: what the job writes (its
//! objects and checkout) is all inside its own directory, and is removed with it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::namespace::JobNamespace;
use super::overlay::Layer;
use super::WorkspaceError;
use crate::git::Git;
use crate::util::io::{IoContext, IoError};

/// How long the runner's git may take over what a job wrote (its HEAD, index, objects): long
/// enough for the status of a large checkout, bounded because a FIFO where git expects a ref
/// or the index would otherwise block it for ever.
pub const JOB_GIT_LIMIT: Duration = Duration::from_secs(300);

/// How much of a listing of the job's data (its uncommitted paths, its commits) the runner
/// keeps: a job can make millions of files or commits, and the lists go into its result.
pub const LISTING_MAX_BYTES: u64 = 1 << 20;

/// The entry that ends a listing cut at [`LISTING_MAX_BYTES`].
pub const LISTING_CUT: &str = "… (the list is cut at 1 MiB)";

/// The store's configuration: the only configuration any git on the job's data reads (the
/// runner's git reads no other; the job's own commands add only their private HOME's).
/// Nothing in it runs a program, and it turns off what would read job-written files beyond
/// the objects themselves (commit-graph, multi-pack index, bitmaps).
const STORE_CONFIG: &str = "\
[core]
\trepositoryformatversion = 0
\tfilemode = true
\tbare = true
\thooksPath = /dev/null
\tfsmonitor = false
\tuntrackedCache = false
\tcommitGraph = false
\tmultiPackIndex = false
[gc]
\tauto = 0
[maintenance]
\tauto = false
[submodule]
\trecurse = false
[pack]
\tuseBitmaps = false
[uploadpack]
\tallowAnySHA1InWant = true
";

/// The configuration of the repository a job's commits are checked in before they reach the
/// shared clone (see [`JobGit::import`]): the runner's, like the store's.
const STAGING_CONFIG: &str = "\
[core]
\trepositoryformatversion = 0
\tbare = true
\thooksPath = /dev/null
[gc]
\tauto = 0
[maintenance]
\tauto = false
[uploadpack]
\tallowAnySHA1InWant = true
";

/// Makes an empty bare repository at `dir` with `config`, reading `bare`'s objects through its
/// alternates (by their real path: the sandbox allows reading that, not a link on the way).
async fn init_on(dir: &Path, config: &str, bare: &Path) -> Result<Git, WorkspaceError> {
    let git = Git::new(dir)?;
    git.output(&["init", "--quiet", "--bare", "--template="])
        .await?;
    let info = dir.join("objects/info");
    std::fs::create_dir_all(&info).at("creating", &info)?;
    let path = dir.join("config");
    std::fs::write(&path, config).at("writing", &path)?;
    let objects = bare.join("objects");
    let objects = std::fs::canonicalize(&objects).at("resolving", &objects)?;
    let path = info.join("alternates");
    std::fs::write(&path, format!("{}\n", objects.display())).at("writing", &path)?;
    Ok(git)
}

/// `git fetch <from> <spec>` into `git`'s repository, every object it receives hashed (as any
/// fetch does) and checked by fsck; nothing else fetched or run.
async fn verified_fetch(
    git: &Git,
    from: &Path,
    spec: &str,
    limit: Duration,
) -> Result<(), WorkspaceError> {
    let from = from.to_string_lossy();
    git.output_within(
        &[
            "-c",
            "fetch.fsckObjects=true",
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            "--no-recurse-submodules",
            &from,
            spec,
        ],
        limit,
    )
    .await
    .map(|_| ())
    .map_err(|e| WorkspaceError::Import(e.to_string()))
}

/// The paths of a job's git data.
#[derive(Debug, Clone)]
pub struct JobGit {
    /// The store: the common directory of the checkout.
    pub store: PathBuf,
    /// The checkout's administrative directory in the store.
    pub admin: PathBuf,
    pub checkout: PathBuf,
    /// How long the runner's git may take over the job's data ([`JOB_GIT_LIMIT`]).
    pub limit: Duration,
    /// The namespace that alone holds the checkout's overlay, for a runner that is not root.
    pub namespace: Option<Arc<JobNamespace>>,
}

impl JobGit {
    /// The layout under `job_root`.
    pub fn at(job_root: &Path) -> JobGit {
        let store = job_root.join("git");
        JobGit {
            admin: store.join("worktrees").join("checkout"),
            store,
            checkout: job_root.join("checkout"),
            limit: JOB_GIT_LIMIT,
            namespace: None,
        }
    }

    /// Creates the store on top of `bare`'s objects and checks out `rev` (which `bare` holds).
    /// Nothing of the job has run yet: the checkout is the shared clone's objects, verified
    /// when they were fetched.
    pub async fn create(
        &self,
        bare: &Path,
        rev: &str,
        exclude: &str,
    ) -> Result<(), WorkspaceError> {
        self.add_worktree(bare, rev, exclude).await?;
        self.git()?.output(&["reset", "--hard", "--quiet"]).await?;
        Ok(())
    }

    /// [`JobGit::create`] with the checkout an overlay of a revision's tree (its files, written
    /// once from the same verified objects) under the job's `layer`: nothing is written but
    /// the store and the `.git` file, and the tree's index, whose stat data is what the job's
    /// git sees through the mount, so `git status` finds it clean without reading a file.
    pub async fn create_layered(
        &mut self,
        bare: &Path,
        rev: &str,
        exclude: &str,
        (tree_index, layer): (&Path, &Layer),
    ) -> Result<(), WorkspaceError> {
        self.add_worktree(bare, rev, exclude).await?;
        let index = self.admin.join("index");
        std::fs::copy(tree_index, &index).at("copying", tree_index)?;
        layer.create()?;
        // The `.git` file `worktree add` wrote moves into the job's layer, so the mount point
        // is empty and the checkout still holds it.
        let dotgit = self.checkout.join(".git");
        std::fs::rename(&dotgit, layer.upper.join(".git")).at("moving", &dotgit)?;
        if !rustix::process::geteuid().is_root() {
            // Mounted in the job's own namespaces, which the runner's git enters from now on.
            let ns = JobNamespace::owned(layer, &self.checkout).map_err(|e| {
                IoError::at("mounting the checkout's overlay on", &self.checkout, e)
            })?;
            self.namespace = Some(ns);
            return Ok(());
        }
        // The layer goes to the agent's identity now, as a full checkout does when the agent
        // starts: once mounted, it may change only through the mount, or overlayfs' view of
        // it goes stale.
        crate::agent_id::chown_tree(&layer.upper)
            .at("handing to the agent's identity", &layer.upper)?;
        layer.mount(&self.checkout)?;
        Ok(())
    }

    /// The store, and the worktree registered in it at `rev` with nothing checked out.
    pub(super) async fn add_worktree(
        &self,
        bare: &Path,
        rev: &str,
        exclude: &str,
    ) -> Result<(), WorkspaceError> {
        let store_git = init_on(&self.store, STORE_CONFIG, bare).await?;
        for dir in ["info", "logs"] {
            let path = self.store.join(dir);
            std::fs::create_dir_all(&path).at("creating", &path)?;
        }
        let path = self.store.join("info/exclude");
        std::fs::write(&path, exclude).at("writing", &path)?;
        let checkout = self.checkout.to_string_lossy().into_owned();
        store_git
            .output(&[
                "worktree",
                "add",
                "--detach",
                "--no-checkout",
                "--quiet",
                &checkout,
                rev,
            ])
            .await?;
        // Git writes real paths.
        let named = worktree_admin_of(&self.checkout)?;
        let admin = std::fs::canonicalize(&self.admin).at("resolving", &self.admin)?;
        if named != admin {
            return Err(IoError::at(
                "checking",
                &self.checkout.join(".git"),
                std::io::Error::other(format!(
                    "git made the admin dir {}, not {}",
                    named.display(),
                    admin.display()
                )),
            )
            .into());
        }
        Ok(())
    }

    /// The runner's git on the checkout: the runner's own paths for the admin dir, the common
    /// dir and the files (see `crate::git`).
    pub fn git(&self) -> Result<Git, WorkspaceError> {
        let git = Git::worktree(&self.admin, &self.store, &self.checkout)?;
        Ok(match &self.namespace {
            Some(ns) => git.with_hook(ns.hook()),
            None => git,
        })
    }

    /// The commit the checkout's HEAD names: an object id the job chose, not yet a verified
    /// object (see [`JobGit::import`]).
    pub async fn head(&self) -> Result<String, WorkspaceError> {
        let head = self
            .git()?
            .output_within(
                &["rev-parse", "--verify", "--end-of-options", "HEAD^{commit}"],
                self.limit,
            )
            .await?;
        if !crate::util::git_names::is_full_rev(&head) {
            return Err(WorkspaceError::Import(format!(
                "the checkout's HEAD is not a commit id: {head:?}"
            )));
        }
        Ok(head)
    }

    /// Checks the objects of the job's commit `head` and brings them into `bare` as
    /// `refname`, in two fetches. The first, from the store into a staging repository of the
    /// runner's (`<store>/import.git`, reading `bare`'s objects), reads what the job wrote:
    /// every object the shared clone does not have is hashed as it arrives and checked by
    /// fsck, so what it keeps is what its name says; however slow the job made it (a FIFO in
    /// its objects, a huge pack), no lock is held. The second, holding the shared clone's lock
    /// (`lock`), copies those verified objects into `bare`.
    pub async fn import<F, L>(
        &self,
        bare: &Path,
        head: &str,
        refname: &str,
        lock: F,
    ) -> Result<(), WorkspaceError>
    where
        F: std::future::Future<Output = Result<L, WorkspaceError>>,
    {
        let staging = self.store.join("import.git");
        crate::remove::remove_tree(&staging).at("removing", &staging)?;
        let staged = init_on(&staging, STAGING_CONFIG, bare).await?;
        let into_staging = format!("+{head}:refs/import");
        verified_fetch(&staged, &self.store, &into_staging, self.limit).await?;
        // A commit, by its verified content.
        let kind = staged
            .output(&["cat-file", "-t", head])
            .await
            .map_err(|e| WorkspaceError::Import(e.to_string()))?;
        if kind != "commit" {
            return Err(WorkspaceError::Import(format!(
                "the checkout's HEAD {head} is a {kind}, not a commit"
            )));
        }
        {
            let _locked = lock.await?;
            let into_shared = format!("+{head}:{refname}");
            verified_fetch(&Git::new(bare)?, &staging, &into_shared, self.limit).await?;
        }
        Ok(crate::remove::remove_tree(&staging).at("removing", &staging)?)
    }

    /// `git status --porcelain --ignored` of the checkout, one path per entry. Submodules are
    /// not entered (their git would read their own config) and nothing is written.
    pub async fn status(&self) -> Result<Vec<String>, WorkspaceError> {
        let (out, cut) = self
            .git()?
            .stdout_bounded(
                &[
                    "--no-optional-locks",
                    "status",
                    "--porcelain",
                    "--ignored",
                    "--untracked-files=all",
                    "--ignore-submodules=all",
                ],
                self.limit,
                LISTING_MAX_BYTES,
            )
            .await?;
        let entries = complete_lines(&out, cut)
            .filter(|l| l.len() > 3)
            .map(|l| l[3..].to_string());
        Ok(with_cut_mark(entries, cut))
    }
}

/// The lines of a listing, without the last one when the listing was cut (it may be partial).
pub fn complete_lines(out: &str, cut: bool) -> impl Iterator<Item = &str> {
    let mut lines: Vec<&str> = out.lines().collect();
    if cut {
        lines.pop();
    }
    lines.into_iter()
}

/// `entries`, ended by [`LISTING_CUT`] when the listing was cut.
pub fn with_cut_mark(entries: impl Iterator<Item = String>, cut: bool) -> Vec<String> {
    let mut list: Vec<String> = entries.collect();
    if cut {
        list.push(LISTING_CUT.to_string());
    }
    list
}

/// The administrative directory git made for the worktree, from its `.git` file (read right
/// after `worktree add`, before any command of the job ran).
fn worktree_admin_of(checkout: &Path) -> Result<PathBuf, WorkspaceError> {
    let dotgit = checkout.join(".git");
    let text = std::fs::read_to_string(&dotgit).at("reading", &dotgit)?;
    let dir = text
        .trim()
        .strip_prefix("gitdir: ")
        .map(PathBuf::from)
        .ok_or_else(|| {
            IoError::at(
                "parsing",
                &dotgit,
                std::io::Error::other("not a gitdir file"),
            )
        })?;
    Ok(if dir.is_absolute() {
        dir
    } else {
        checkout.join(dir)
    })
}
