//! The devShell of a pinned revision, built by Nix from the bare clone and cached by revision.
//!
//! A job's commands must see the devShell its revision declares, evaluated from the revision
//! itself (`git+file://<bare clone>?rev=<rev>`), never from the checkout the agent edits: a
//! committed `shellHook` or `flake.nix` edit must not change what the host evaluates. Nix only
//! evaluates and builds here; the script it yields is sourced later inside the sandbox.
//!
//! Requests are answered in three tiers:
//! 1. a hit reads a verified entry from disk and runs no program at all;
//! 2. concurrent misses for one key share one build: in one process through a shared future,
//!    across processes through a lock file, re-checking the cache once it is theirs;
//! 3. the one builder runs `nix print-dev-env`, renders the script, roots the env's store path
//!    and publishes the entry atomically. Failures are returned, never cached.

use crate::util::git_names::{is_full_rev, is_ref_name};
use crate::util::io::IoError;

mod build;
mod build_limits;
pub mod confine;
pub mod daemon;
pub mod entry;
pub mod environment;
mod fixed_output;
pub mod key;
mod maintenance;
pub mod network;
pub mod nix_version;
pub mod render;
pub mod repo_store;
pub mod scratch;
mod unfinished;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::future::{BoxFuture, FutureExt, Shared, WeakShared};
use serde::{Deserialize, Serialize};

use crate::binaries::BinaryError;
use crate::config::Config;
use crate::git::GitError;
use crate::git_objects;
use crate::sandbox::SandboxPolicy;
use crate::state::{StateDir, StateError};

pub(crate) use build::version_at_least;
pub use maintenance::{GcPolicy, GcReport, ListedEntry};

#[derive(Debug, Clone, thiserror::Error)]
pub enum DevShellError {
    #[error("{path} is not a git repository")]
    NotARepository { path: PathBuf },
    #[error("revision {rev:?} is not a full commit id (40 hex digits)")]
    InvalidRev { rev: String },
    #[error("revision {rev} is not a commit in {repo}{detail}")]
    RevNotFound {
        rev: String,
        repo: PathBuf,
        detail: String,
    },
    #[error("flake attribute {attr:?} is not an attribute path (letters, digits, _ ' + - separated by dots)")]
    InvalidAttr { attr: String },
    #[error("ref {git_ref:?} is not a branch or tag name")]
    InvalidRef { git_ref: String },
    #[error("{what} failed: {message}")]
    Nix { what: String, message: String },
    #[error(
        "the devShell needs fixed-output derivations built that are in no substituter ({drvs}); \
         refused: an untrusted revision's builds get no network. Put their outputs in a binary \
         cache the runner's Nix uses"
    )]
    UnconfinedFixedOutput { drvs: String },
    /// A build ran past the job's disk limits (`limits.disk`, `limits.disk_files`, the
    /// reserve); the message names which.
    #[error("{message}")]
    LimitFired { message: String },
    #[error(transparent)]
    Binary(#[from] BinaryError),
    #[error("{0}")]
    Git(Arc<GitError>),
    #[error("{0}")]
    State(Arc<StateError>),
    #[error("{io}{owner}")]
    Io {
        #[source]
        io: IoError,
        /// Who owns the path, when another user does and that is why access was denied.
        owner: String,
    },
}

impl DevShellError {
    pub(crate) fn io(action: &'static str, path: &Path, source: std::io::Error) -> Self {
        let owner = match source.kind() {
            std::io::ErrorKind::PermissionDenied => crate::state::foreign_owner_note(path),
            _ => String::new(),
        };
        DevShellError::Io {
            io: IoError::at(action, path, source),
            owner,
        }
    }

    /// Whether the request itself was wrong (as opposed to Nix or the machine failing).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            DevShellError::NotARepository { .. }
                | DevShellError::InvalidRev { .. }
                | DevShellError::RevNotFound { .. }
                | DevShellError::InvalidAttr { .. }
                | DevShellError::InvalidRef { .. }
        )
    }
}

impl From<GitError> for DevShellError {
    fn from(e: GitError) -> Self {
        DevShellError::Git(Arc::new(e))
    }
}

impl From<StateError> for DevShellError {
    fn from(e: StateError) -> Self {
        DevShellError::State(Arc::new(e))
    }
}

/// One request: a revision of a repository and the flake attribute of its devShell.
#[derive(Debug, Clone)]
pub struct Request {
    pub repo: PathBuf,
    pub rev: String,
    /// The branch or tag holding `rev`. Nix before 2.20 needs one; when absent the runner
    /// picks a branch that contains the revision.
    pub git_ref: Option<String>,
    /// Defaults to `devShells.<system>.default`.
    pub attr: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheStatus {
    /// Served from the cache; this request ran no `nix`.
    Hit,
    /// This request ran `nix` (or shared the run another request of this process started).
    Miss,
}

/// The answer to a request.
#[derive(Debug, Clone, Serialize)]
pub struct DevShell {
    pub cache: CacheStatus,
    pub key: String,
    pub rev: String,
    pub attr: String,
    pub system: String,
    pub nix_version: String,
    /// `None` when the revision has no `flake.nix`: a job then runs with only its private HOME.
    pub env: Option<ShellEnv>,
    /// The script's bytes when they were read while answering (always on a hit).
    #[serde(skip)]
    pub script_bytes: Option<Arc<Vec<u8>>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ShellEnv {
    /// The rendered script, to be sourced inside the sandbox.
    pub script: PathBuf,
    /// The link that keeps `store_path` from garbage collection.
    pub gcroot: PathBuf,
    pub store_path: PathBuf,
    /// The flake reference Nix evaluated.
    pub url: String,
    /// The store paths the devShell needs; empty when its entry did not record them.
    pub closure: Vec<PathBuf>,
    /// The root of the repository store they live in; `None`: the host's store.
    pub store: Option<PathBuf>,
}

/// A validated request with its cache key.
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    pub repo: PathBuf,
    pub git_dir: PathBuf,
    pub rev: String,
    pub git_ref: Option<String>,
    pub attr: String,
    pub key: String,
    pub nix: nix_version::NixBinary,
    /// The job's policy whose boundary nix runs in; `None`: as the runner (`env`, selftest).
    pub confine: Option<Arc<SandboxPolicy>>,
    /// Fixed-output builds would run where the boundary does not reach (the daemon's
    /// network), or the revision is untrusted: only those already in the store or a
    /// substituter may be used.
    pub refuse_fixed_output: bool,
    /// The confined nix keeps the host's network (`nix.network = "host"`, trusted revisions).
    pub host_network: bool,
    /// The confined nix reaches the job's proxy (`nix.network = "proxy"`, a job whose policy
    /// reaches some host).
    pub net: Option<network::NixNet>,
    /// Sets the job's limits on the nix that evaluates for it and the daemon that builds for
    /// it, as on the job's other processes (`serve`'s rlimits and the job's cgroup).
    pub adjust: Option<LimitsHook>,
}

impl Prepared {
    /// The hook for the job's nix processes: the job's own, else its network's (the same
    /// hook, where only that one was given).
    pub(crate) fn job_hook(&self) -> Option<crate::process::CommandHook> {
        self.adjust
            .as_ref()
            .map(|h| h.0.clone())
            .or_else(|| self.net.as_ref().and_then(|n| n.adjust.clone()))
    }
}

/// The hook that sets a job's limits on a process (`serve`'s rlimits), for [`Prepared`].
#[derive(Clone)]
pub(crate) struct LimitsHook(pub crate::process::CommandHook);

impl std::fmt::Debug for LimitsHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LimitsHook")
    }
}

type SharedBuild = Shared<BoxFuture<'static, Result<DevShell, DevShellError>>>;
type WeakBuild = WeakShared<BoxFuture<'static, Result<DevShell, DevShellError>>>;

/// The devShell cache of one state directory.
pub struct DevShells {
    layout: entry::Layout,
    state: StateDir,
    system: String,
    nix_options: BTreeMap<String, String>,
    nix_network: crate::config::NixNetwork,
    /// The job's disk limits, on what its build writes ([`build_limits`]); `limits.disk` is
    /// also the largest file a build may write ([`daemon`]).
    disk: crate::disk::DiskLimits,
    /// The builds under way, for the disk reserve: which of them grows fastest.
    disk_builds: Arc<crate::disk::watch::Registry>,
    /// The `nix` to run; `None` finds it as every tool is found (`QUEST_RUNNER_NIX`, `PATH`).
    nix: Option<PathBuf>,
    inflight: Mutex<HashMap<String, WeakBuild>>,
}

impl DevShells {
    pub fn new(state: &StateDir, config: &Config) -> DevShells {
        DevShells {
            layout: entry::Layout::new(state.root()),
            state: state.clone(),
            system: nix_version::current_system(),
            nix_options: config.nix.options.clone(),
            nix_network: config.nix.network,
            disk: config.limits.disk,
            disk_builds: Arc::default(),
            nix: None,
            inflight: Mutex::new(HashMap::new()),
        }
    }

    /// Runs `nix` rather than the one the environment names: a library user (a test among
    /// them) chooses its Nix without setting a variable every thread and child would see.
    pub fn with_nix(mut self, nix: impl Into<PathBuf>) -> DevShells {
        self.nix = Some(nix.into());
        self
    }

    pub fn layout(&self) -> &entry::Layout {
        &self.layout
    }

    /// The store of the repository whose clone is at `repo` (canonical): where a job's
    /// devShell of it is built ([`repo_store`]).
    pub fn repo_store(&self, repo: &Path) -> repo_store::RepoStore {
        repo_store::RepoStore::for_repo(&self.state.root().join("devshell"), repo)
    }

    /// Validates `req` and computes its key, without running any program once the Nix
    /// binary's version is known.
    pub(crate) fn prepare(&self, req: &Request) -> Result<Prepared, DevShellError> {
        let rev = req.rev.to_ascii_lowercase();
        if !is_full_rev(&rev) {
            return Err(DevShellError::InvalidRev {
                rev: req.rev.clone(),
            });
        }
        let attr = match &req.attr {
            Some(attr) if !is_attr_path(attr) => {
                return Err(DevShellError::InvalidAttr { attr: attr.clone() })
            }
            Some(attr) => attr.clone(),
            None => format!("devShells.{}.default", self.system),
        };
        if let Some(r) = &req.git_ref {
            if !is_ref_name(r) {
                return Err(DevShellError::InvalidRef { git_ref: r.clone() });
            }
        }
        let repo = std::fs::canonicalize(&req.repo).map_err(|_| DevShellError::NotARepository {
            path: req.repo.clone(),
        })?;
        let git_dir = git_objects::git_dir(&repo).ok_or_else(|| DevShellError::NotARepository {
            path: req.repo.clone(),
        })?;
        let present = git_objects::has_object(&git_dir, &rev)
            .map_err(|e| DevShellError::io("reading objects of", &git_dir, e))?;
        if !present {
            return Err(DevShellError::RevNotFound {
                rev,
                repo: req.repo.clone(),
                detail: String::new(),
            });
        }
        let nix = nix_version::resolve(self.nix.as_deref(), &self.layout.probes())?;
        let key = key::cache_key(&key::KeyInputs {
            format: key::FORMAT_VERSION,
            rev: &rev,
            attr: &attr,
            system: &self.system,
            nix_version: &nix.version,
            nix_options: &self.nix_options,
            store: None,
        });
        Ok(Prepared {
            repo,
            git_dir,
            rev,
            git_ref: req.git_ref.clone(),
            attr,
            key,
            nix,
            confine: None,
            refuse_fixed_output: false,
            host_network: false,
            net: None,
            adjust: None,
        })
    }

    /// Answers from the cache alone; `Ok(None)` on a miss.
    pub fn lookup(&self, req: &Request) -> Result<Option<DevShell>, DevShellError> {
        let prepared = self.prepare(req)?;
        Ok(self.cached(&prepared, CacheStatus::Hit))
    }

    fn cached(&self, p: &Prepared, status: CacheStatus) -> Option<DevShell> {
        match entry::read(&self.layout, &p.key) {
            Ok(e) => Some(self.answer(p, e, status)),
            Err(entry::Invalid::Absent) => None,
            Err(entry::Invalid::Broken(why)) => {
                tracing::warn!(key = %p.key, "cache entry unusable, rebuilding: {why}");
                None
            }
        }
    }

    fn answer(&self, p: &Prepared, e: entry::Entry, cache: CacheStatus) -> DevShell {
        let env = e.meta.shell.as_ref().map(|s| ShellEnv {
            script: e.dir.join(entry::SCRIPT),
            gcroot: self.layout.root(&p.key),
            store_path: s.store_path.clone(),
            url: s.url.clone(),
            closure: s.closure.clone(),
            store: s.store.clone(),
        });
        DevShell {
            cache,
            key: p.key.clone(),
            rev: p.rev.clone(),
            attr: p.attr.clone(),
            system: self.system.clone(),
            nix_version: p.nix.version.clone(),
            env,
            script_bytes: e.script.map(Arc::new),
        }
    }

    /// Answers `req`, building the devShell when it is not cached. Dropping the returned
    /// future stops the build (once no other request of this process waits for it).
    pub async fn get(self: &Arc<Self>, req: &Request) -> Result<DevShell, DevShellError> {
        let prepared = self.prepare(req)?;
        if let Some(hit) = self.cached(&prepared, CacheStatus::Hit) {
            return Ok(hit);
        }
        let shared = self.join_or_start(prepared);
        let result = shared.await;
        self.forget_finished();
        result
    }

    /// [`get`](Self::get) for a job: a miss runs nix inside `policy`'s boundary
    /// ([`confine`]), on the job's network `net` (its proxy, when it runs one) as the config's
    /// `nix.network` says. A hit is the same as `get`'s; concurrent misses share the first
    /// request's run, whose policy hides the same host trees (they differ only in the job's
    /// own workspace, which nix never reads). A shared miss runs on the first request's proxy:
    /// a job cancelled meanwhile takes it away, and the build fails for the others as its
    /// fetches do (never cached).
    pub async fn get_confined(
        self: &Arc<Self>,
        req: &Request,
        policy: Arc<SandboxPolicy>,
        net: Option<network::NixNet>,
    ) -> Result<DevShell, DevShellError> {
        self.get_for_job(req, policy, net, None).await
    }

    /// [`get_confined`](Self::get_confined), with `adjust` setting the job's limits on the
    /// daemon that builds for it.
    pub async fn get_for_job(
        self: &Arc<Self>,
        req: &Request,
        policy: Arc<SandboxPolicy>,
        net: Option<network::NixNet>,
        adjust: Option<crate::process::CommandHook>,
    ) -> Result<DevShell, DevShellError> {
        let mut prepared = self.prepare(req)?;
        prepared.adjust = adjust.map(LimitsHook);
        let store = self.repo_store(&prepared.repo);
        prepared.key = key::cache_key(&key::KeyInputs {
            format: key::FORMAT_VERSION,
            rev: &prepared.rev,
            attr: &prepared.attr,
            system: &self.system,
            nix_version: &prepared.nix.version,
            nix_options: &self.nix_options,
            store: Some(&store.root().to_string_lossy()),
        });
        if let Some(hit) = self.cached(&prepared, CacheStatus::Hit) {
            return Ok(hit);
        }
        let trusted = policy.trust == crate::job::Trust::Trusted;
        prepared.refuse_fixed_output = !trusted;
        prepared.host_network = trusted && self.nix_network == crate::config::NixNetwork::Host;
        prepared.net = net.filter(|_| self.nix_network == crate::config::NixNetwork::Proxy);
        prepared.confine = Some(policy);
        let shared = self.join_or_start(prepared);
        let result = shared.await;
        self.forget_finished();
        result
    }

    fn join_or_start(self: &Arc<Self>, prepared: Prepared) -> SharedBuild {
        let mut inflight = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(running) = inflight.get(&prepared.key).and_then(WeakBuild::upgrade) {
            return running;
        }
        let key = prepared.key.clone();
        let this = Arc::clone(self);
        let shared = async move { this.build_exclusive(prepared).await }
            .boxed()
            .shared();
        if let Some(weak) = shared.downgrade() {
            inflight.insert(key, weak);
        }
        shared
    }

    fn forget_finished(&self) {
        let mut inflight = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
        inflight.retain(|_, weak| weak.upgrade().is_some_and(|s| s.peek().is_none()));
    }

    /// The one builder of this process for a key: takes the cross-process lock, re-checks the
    /// cache (another process may have built it meanwhile), and only then runs Nix.
    async fn build_exclusive(&self, p: Prepared) -> Result<DevShell, DevShellError> {
        let locks = self
            .state
            .ensure_dir(&rel(&self.layout.locks(), self.state.root()))?;
        let lock_path = locks.join(format!("{}.lock", p.key));
        let _lock = crate::lockfile::LockFile::acquire(&lock_path)
            .await
            .map_err(|e| DevShellError::io("locking", &lock_path, e))?;
        if let Some(hit) = self.cached(&p, CacheStatus::Hit) {
            return Ok(hit);
        }
        let built = build::build(self, &p).await?;
        Ok(self.answer(&p, built, CacheStatus::Miss))
    }
}

/// `path` relative to `root`, for `StateDir::ensure_dir`.
fn rel(path: &Path, root: &Path) -> PathBuf {
    path.strip_prefix(root).unwrap_or(path).to_path_buf()
}

/// Attribute paths as flakes use them: `devShells.x86_64-linux.default`.
fn is_attr_path(attr: &str) -> bool {
    !attr.is_empty()
        && attr.split('.').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_'+-".contains(c))
                && !part.starts_with('-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attr_and_ref_validation() {
        assert!(is_attr_path("devShells.x86_64-linux.default"));
        assert!(is_attr_path("ci"));
        for bad in ["", "a..b", "a#b", "a b", "-x", "a.\"b\"", "a?b"] {
            assert!(!is_attr_path(bad), "{bad}");
        }
        assert!(is_ref_name("main"));
        assert!(is_ref_name("refs/heads/feature/x-1"));
        for bad in ["", "-main", "a..b", "a?b", "a&b", "a b", "x.lock", "a/"] {
            assert!(!is_ref_name(bad), "{bad}");
        }
    }
}
