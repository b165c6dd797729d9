//! The miss path: ask git what the revision holds, run `nix print-dev-env`, publish the entry.
//!
//! Runs only while holding the key's lock, so it may clear anything a crashed builder of the
//! same key left behind before starting.

use std::path::{Path, PathBuf};

use tokio::process::Command;

use super::entry::{self, Entry, Meta, ShellMeta};
use super::key::FORMAT_VERSION;
use super::repo_store::RepoStore;
use super::{render, DevShellError, DevShells, Prepared};
use crate::git::Git;
use crate::process;
use crate::sandbox::boundary::{self, Identity, AGENT_ID};
use crate::store_path;

/// Nix releases from 2.20 on fetch a `git+file` revision without being told its ref.
const NIX_FETCHES_REV_WITHOUT_REF: (u32, u32) = (2, 20);

pub(super) async fn build(shells: &DevShells, p: &Prepared) -> Result<Entry, DevShellError> {
    let layout = shells.layout();
    let state = &shells.state;
    for dir in [layout.tmp(), layout.roots(), layout.entries()] {
        state.ensure_dir(&super::rel(&dir, state.root()))?;
    }
    // Leftovers of a builder of this key that died: a broken entry, an orphaned root, a
    // half-written staging directory.
    entry::remove(layout, &p.key)
        .map_err(|e| DevShellError::io("removing", &layout.entry(&p.key), e))?;
    entry::remove_staged(layout, &p.key)
        .map_err(|e| DevShellError::io("cleaning", &layout.tmp(), e))?;

    let git = Git::new(&p.git_dir)?;
    let kind = git.output(&["cat-file", "-t", &p.rev]).await.ok();
    if kind.as_deref() != Some("commit") {
        return Err(DevShellError::RevNotFound {
            rev: p.rev.clone(),
            repo: p.repo.clone(),
            detail: kind.map(|k| format!(" (it is a {k})")).unwrap_or_default(),
        });
    }
    let staged = tempfile::Builder::new()
        .prefix(&format!("{}.", p.key))
        .tempdir_in(layout.tmp())
        .map_err(|e| DevShellError::io("creating a directory in", &layout.tmp(), e))?;

    let has_flake = git
        .succeeds(&["cat-file", "-e", &format!("{}:flake.nix", p.rev)])
        .await?;
    let shell = if has_flake {
        Some(build_shell(shells, p, &git, staged.path()).await?)
    } else {
        tracing::info!(rev = %p.rev, "revision has no flake.nix: no devShell");
        None
    };
    let meta = Meta {
        format: FORMAT_VERSION,
        key: p.key.clone(),
        rev: p.rev.clone(),
        attr: p.attr.clone(),
        system: shells.system.clone(),
        nix_version: p.nix.version.clone(),
        created: entry::now_secs(),
        shell,
    };
    let meta_json = serde_json::to_vec_pretty(&meta).unwrap_or_default();
    entry::write_file(staged.path(), entry::META, &meta_json)
        .map_err(|e| DevShellError::io("writing", staged.path(), e))?;
    let dir = entry::commit(layout, staged, &p.key)
        .map_err(|e| DevShellError::io("publishing", &layout.entry(&p.key), e))?;
    let script = match meta.shell {
        Some(_) => std::fs::read(dir.join(entry::SCRIPT)).ok(),
        None => None,
    };
    Ok(Entry { meta, dir, script })
}

/// Runs Nix and writes the rendered script into `staged`. The GC root is created by Nix at
/// its final place (`--profile`); a guard removes it again if anything after fails.
async fn build_shell(
    shells: &DevShells,
    p: &Prepared,
    git: &Git,
    staged: &Path,
) -> Result<ShellMeta, DevShellError> {
    let layout = shells.layout();
    let git_ref = match &p.git_ref {
        Some(r) => Some(r.clone()),
        None => find_ref(git, &p.rev, &p.nix.version, &p.repo).await?,
    };
    let url = flake_url(&p.repo, git_ref.as_deref(), &p.rev);
    let installable = format!("{url}#{}", p.attr);
    let root = layout.root(&p.key);
    let root_guard = RootGuard {
        layout,
        key: &p.key,
        armed: true,
    };

    let what = format!("nix print-dev-env {installable}");
    let stdout = print_dev_env(shells, p, &root, &installable, &what).await?;
    let header = format!(
        "devShell {} of {} (quest-runner format {FORMAT_VERSION}).\n\
         Sourced inside a job's sandbox; never run on the host.",
        p.attr, p.rev
    );
    let script = render::render_json(&stdout, &header).map_err(|e| DevShellError::Nix {
        what: what.clone(),
        message: e.to_string(),
    })?;
    let store = repo_store(shells, p);
    let store_path = profile_store_path(&root, store.as_ref(), what)?;
    let closure = requisites(p, store.as_ref(), &store_path).await?;
    entry::write_file(staged, entry::SCRIPT, script.as_bytes())
        .map_err(|e| DevShellError::io("writing", staged, e))?;
    let mut guard = root_guard;
    guard.armed = false;
    Ok(ShellMeta {
        url,
        store_path,
        script_sha256: entry::sha256_hex(script.as_bytes()),
        closure,
        store: store.map(|s| s.root().to_path_buf()),
    })
}

/// The store a build of `p` writes: its repository's when nix acts for a job, else (the
/// operator's own request) the store the runner's nix opens.
fn repo_store(shells: &DevShells, p: &Prepared) -> Option<RepoStore> {
    p.confine.as_ref().map(|_| shells.repo_store(&p.repo))
}

/// `--store <uri>` for the runner's own nix on `store`, or nothing for the host's.
fn store_args(store: Option<&RepoStore>) -> Vec<String> {
    store
        .map(|s| vec!["--store".to_string(), s.uri()])
        .unwrap_or_default()
}

/// The store paths `store_path` needs, as the store records them: what a job using the
/// devShell is shown of the store. Asked as the runner, outside the boundary: it reads the
/// store's database about a path nix just built, nothing the revision chose.
async fn requisites(
    p: &Prepared,
    store: Option<&RepoStore>,
    store_path: &Path,
) -> Result<Vec<PathBuf>, DevShellError> {
    let mut cmd = Command::new(&p.nix.path);
    cmd.args(["--extra-experimental-features", "nix-command"])
        .args(store_args(store))
        .args(["path-info", "--recursive"])
        .arg(store_path);
    let what = format!("nix path-info --recursive {}", store_path.display());
    let out = process::run_captured(cmd, "nix")
        .await
        .map_err(|e| DevShellError::io("running", &p.nix.path, e))?;
    if !out.status.success() {
        return Err(DevShellError::Nix {
            what,
            message: out.error_message(),
        });
    }
    let store = store_path::store_dir();
    let text = String::from_utf8_lossy(&out.stdout);
    let paths: Vec<PathBuf> = text.lines().map(|l| PathBuf::from(l.trim())).collect();
    match paths.iter().all(|p| store_path::is_store_path(p, &store)) {
        true => Ok(paths),
        false => Err(DevShellError::Nix {
            what,
            message: format!("printed what is not a store path: {text}"),
        }),
    }
}

/// Runs `nix print-dev-env --json --profile <link> <installable>` and returns its output: no
/// flake config accepted, a scratch TMPDIR, no replace refs read. First, where the job's
/// boundary cannot hold the fixed-output builds, refuses those it would have to build
/// ([`super::fixed_output`]). The profile link nix makes is in its scratch directory (the
/// only place a confined nix writes); the runner then roots the same store path at `root`.
async fn print_dev_env(
    shells: &DevShells,
    p: &Prepared,
    root: &Path,
    installable: &str,
    what: &str,
) -> Result<Vec<u8>, DevShellError> {
    if p.refuse_fixed_output {
        super::fixed_output::refuse_unconfinable(shells, p, installable).await?;
    }
    // Removed when this returns, however nix ended (see `scratch`).
    let scratch = super::scratch::Scratch::create()
        .map_err(|e| DevShellError::io("creating a directory in", &std::env::temp_dir(), e))?;
    let link = scratch.path().join("profile");
    let tail = [
        "print-dev-env",
        "--json",
        "--no-update-lock-file",
        "--profile",
        &link.to_string_lossy(),
        installable,
    ];
    // The run holds the job's network for nix, and setup (a)'s daemon, until nix has ended.
    let run = nix_command(shells, p, &tail, scratch.path()).await?;
    tracing::info!(%installable, "nix print-dev-env");
    let watchdog = super::build_limits::watchdog(shells, p, scratch.path(), run.daemon.as_ref());
    let out = super::build_limits::within(process::run_captured(run.cmd, "nix"), watchdog).await;
    if let Some(daemon) = run.daemon {
        daemon.stop(&p.nix.path).await;
    }
    let out = out?.map_err(|e| DevShellError::io("running", &p.nix.path, e))?;
    if !out.status.success() {
        if std::os::unix::process::ExitStatusExt::signal(&out.status).is_some() {
            // Nix was killed: its builders, which it runs in sessions of their own, are left
            // without it. Nothing else will stop them.
            stop_orphaned_builders();
        }
        let message = super::network::without_network_hint(p, out.error_message());
        let bytes = shells.disk.limit.filter(|_| p.confine.is_some());
        if let Some(fired) = super::build_limits::file_too_large(&message, bytes) {
            return Err(fired);
        }
        return Err(DevShellError::Nix {
            what: what.to_string(),
            message,
        });
    }
    // Rooted at its final place before the scratch link (a root too, through nix's indirect
    // root) goes with the scratch directory.
    let store = repo_store(shells, p);
    let store_path = profile_store_path(&link, store.as_ref(), what.to_string())?;
    add_root(shells, p, store.as_ref(), &store_path, root).await?;
    Ok(out.stdout)
}

/// Roots `store_path` (a path nix just built, nothing the revision chose) at `root`, as the
/// runner, outside the boundary.
async fn add_root(
    shells: &DevShells,
    p: &Prepared,
    store: Option<&RepoStore>,
    store_path: &Path,
    root: &Path,
) -> Result<(), DevShellError> {
    let mut cmd = Command::new(&p.nix.path);
    cmd.args(["--extra-experimental-features", "nix-command"])
        .args(super::environment::option_args(&shells.nix_options))
        .args(store_args(store))
        .arg("build")
        .arg("--out-link")
        .arg(root)
        .arg(store_path);
    let out = process::run_captured(cmd, "nix")
        .await
        .map_err(|e| DevShellError::io("running", &p.nix.path, e))?;
    match out.status.success() {
        true => Ok(()),
        false => Err(DevShellError::Nix {
            what: format!("rooting {} at {}", store_path.display(), root.display()),
            message: out.error_message(),
        }),
    }
}

/// One nix run: its command, and what must live until it ends.
pub(super) struct NixRun {
    pub cmd: Command,
    /// The runner's side of the bridge to the job's proxy ([`super::network`]).
    _bridge: Option<tokio::process::Child>,
    /// The repository store's daemon for the run ([`super::daemon`]).
    daemon: Option<super::daemon::RunnerDaemon>,
}

/// `nix <the runner's options> <tail>`, inside the job's boundary as the job's identity when
/// the request has one, with `scratch` as its TMPDIR and HOME's parent, and an environment of
/// nothing but what is set here ([`super::environment`]).
pub(super) async fn nix_command(
    shells: &DevShells,
    p: &Prepared,
    tail: &[&str],
    scratch: &Path,
) -> Result<NixRun, DevShellError> {
    let mut args: Vec<String> = ["--extra-experimental-features", "nix-command flakes"]
        // A flake's nixConfig could otherwise set substituters or hooks that run on the host.
        .into_iter()
        .chain(["--option", "accept-flake-config", "false"])
        .map(String::from)
        .collect();
    let Some(policy) = &p.confine else {
        // The operator's own request (no job): the runner's nix as the runner.
        args.extend(super::environment::option_args(&shells.nix_options));
        args.extend(tail.iter().map(|a| a.to_string()));
        let mut cmd = Command::new(&p.nix.path);
        cmd.args(&args).env("TMPDIR", scratch);
        cmd.env("GIT_NO_REPLACE_OBJECTS", "1");
        return Ok(NixRun {
            cmd,
            _bridge: None,
            daemon: None,
        });
    };
    let identity = Identity::current();
    // The bridge's sockets first: the client and setup (a)'s daemon each hold their directory
    // open from their start.
    let net = p.net.as_ref().filter(|_| !p.host_network);
    let bridge = match net {
        Some(net) => {
            let owner = (identity == Identity::Agent).then_some(AGENT_ID);
            Some(super::network::start(net, owner).await?)
        }
        None => None,
    };
    let (store, daemon) = super::confine::client_for(shells, p).await?;
    args.extend(client_options(shells, p));
    args.extend(tail.iter().map(|a| a.to_string()));
    let home = scratch_home(scratch, identity)?;
    let plan = super::confine::plan(policy, p, &store, identity, scratch)?;
    if identity == Identity::Agent {
        reach_sources(&plan, shells.state.root())?;
    }
    let mut cmd = Command::new(&plan.program);
    cmd.args(plan.args(&p.nix.path, &args));
    // The job's limits and group: evaluation is this process's (a build, the daemon's).
    if let Some(adjust) = p.job_hook() {
        adjust(cmd.as_std_mut());
    }
    // Nix reads no checkout: as root it starts where none is mounted (its bubblewrap would
    // otherwise copy every running job's; see `workspace::namespace`).
    if rustix::process::geteuid().is_root() {
        use crate::workspace::namespace::JobNamespace;
        JobNamespace::new(None, None)
            .map_err(|e| DevShellError::Nix {
                what: "making nix's mount namespace".to_string(),
                message: e.to_string(),
            })?
            .enter(cmd.as_std_mut());
    }
    let git = crate::binaries::find(crate::binaries::Tool::Git)?;
    super::environment::clear(&mut cmd, &[&p.nix.path, &git]);
    cmd.env("HOME", &home)
        .env("TMPDIR", scratch)
        .env("NIX_REMOTE", format!("unix://{}", store.socket.display()));
    // Nix reads the shared clone with git (Nix 2.8 runs `git fetch` from it; later releases
    // read it with libgit2): its objects only, never a replace ref, whoever wrote one.
    cmd.env("GIT_NO_REPLACE_OBJECTS", "1");
    if let Some(net) = net {
        super::network::apply_env(&mut cmd, net);
    }
    Ok(NixRun {
        cmd,
        _bridge: bridge,
        daemon: Some(daemon),
    })
}

/// The confined client's options: the runner's allowlisted settings, and for an untrusted
/// revision no import from derivation (a build the evaluation asks for would run before the
/// devShell's derivations can be checked, `fixed_output`). Its store, the repository store's
/// daemon, is `NIX_REMOTE` ([`nix_command`]): a `--store` option is a setting the client
/// forwards to the daemon, which warns in every error that it ignores it (Nix 2.26).
fn client_options(shells: &DevShells, p: &Prepared) -> Vec<String> {
    let mut args = super::environment::option_args(&shells.nix_options);
    if p.refuse_fixed_output {
        args.extend(["--option", "allow-import-from-derivation", "false"].map(String::from));
    }
    args
}

/// bubblewrap, run as the agent's identity, resolves each bind's source by its path: the
/// runner's own directories on the way are made searchable to it (`grant_traversal`).
fn reach_sources(plan: &boundary::Confined, state_root: &Path) -> Result<(), DevShellError> {
    for source in plan.sources() {
        crate::agent_id::grant_traversal(&source, state_root).map_err(|e| DevShellError::Nix {
            what: "the job's nix namespace".to_string(),
            message: e.to_string(),
        })?;
    }
    Ok(())
}

/// The confined nix's HOME in `scratch`, both handed to `identity`. Its git config lets the
/// clone, which is the runner's and not this identity's, be read: the `git upload-pack` that
/// nix's fetch runs in it must not refuse it as another user's, and only a global config
/// reaches that process (git clears the command line's for the local transport's other side).
fn scratch_home(scratch: &Path, identity: Identity) -> Result<PathBuf, DevShellError> {
    let home = scratch.join("home");
    std::fs::create_dir_all(&home).map_err(|e| DevShellError::io("creating", &home, e))?;
    if identity == Identity::Agent {
        // Both directories (nothing else is in them yet); the git config stays the runner's.
        crate::agent_id::chown_tree(scratch)
            .map_err(|e| DevShellError::io("handing to the agent's identity", scratch, e))?;
    }
    let gitconfig = home.join(".gitconfig");
    std::fs::write(&gitconfig, "[safe]\n\tdirectory = *\n")
        .map_err(|e| DevShellError::io("writing", &gitconfig, e))?;
    Ok(home)
}

/// Where the profile link Nix made at `root` points: a store path present in `store` (the
/// host's when `None`), or the build failed. The link is read, not resolved: a repository
/// store's paths are named `/nix/store/...` and live under its root.
fn profile_store_path(
    root: &Path,
    store: Option<&RepoStore>,
    what: String,
) -> Result<PathBuf, DevShellError> {
    let store_path = super::repo_store::link_target(root).map_err(|e| DevShellError::Nix {
        what: what.clone(),
        message: format!("no profile link at {}: {e}", root.display()),
    })?;
    let real = super::repo_store::located(store.map(RepoStore::root), &store_path);
    if !store_path::is_store_path(&store_path, &store_path::store_dir()) || !real.exists() {
        return Err(DevShellError::Nix {
            what,
            message: format!(
                "profile points at {}, not a store path",
                store_path.display()
            ),
        });
    }
    Ok(store_path)
}

/// Stops Nix builders whose `nix` is gone: processes with `NIX_BUILD_TOP` in their environment
/// whose parent is init or this runner (its subreaper). A builder whose nix (or nix daemon)
/// still runs has that as its parent and is left alone, so concurrent builds are safe.
fn stop_orphaned_builders() {
    let me = std::process::id();
    for pid in crate::procfs::pids() {
        if !matches!(crate::procfs::parent(pid), Some(p) if p == 1 || p == me) {
            continue;
        }
        let is_builder = crate::procfs::environ_any(pid, |v| v.starts_with(b"NIX_BUILD_TOP="));
        if let (true, Some(pid)) = (is_builder, rustix::process::Pid::from_raw(pid as i32)) {
            tracing::warn!(
                pid = pid.as_raw_nonzero().get(),
                "stopping a builder of a killed nix"
            );
            // The builder leads a session of its own: its helpers go with it.
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
}

/// A branch (else a tag) that contains `rev`, preferring the one HEAD names. Nix releases
/// that fetch a bare revision get none when nothing contains it.
async fn find_ref(
    git: &Git,
    rev: &str,
    nix_version: &str,
    repo: &Path,
) -> Result<Option<String>, DevShellError> {
    let head = git.output(&["symbolic-ref", "-q", "HEAD"]).await.ok();
    for namespace in ["refs/heads", "refs/tags"] {
        let listed = git
            .output(&[
                "for-each-ref",
                "--contains",
                rev,
                "--format=%(refname)",
                namespace,
            ])
            .await?;
        let refs: Vec<&str> = listed.lines().filter(|l| !l.is_empty()).collect();
        let chosen = head
            .as_deref()
            .filter(|h| refs.contains(h))
            .or_else(|| refs.first().copied());
        if let Some(r) = chosen {
            return Ok(Some(r.strip_prefix("refs/heads/").unwrap_or(r).to_string()));
        }
    }
    if version_at_least(nix_version, NIX_FETCHES_REV_WITHOUT_REF) {
        return Ok(None);
    }
    Err(DevShellError::RevNotFound {
        rev: rev.to_string(),
        repo: repo.to_path_buf(),
        detail: format!(
            " on any branch or tag, and Nix {nix_version} needs one to fetch it: pass --ref"
        ),
    })
}

pub(crate) fn version_at_least(version: &str, (major, minor): (u32, u32)) -> bool {
    let mut parts = version
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty());
    let got_major: u32 = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let got_minor: u32 = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    (got_major, got_minor) >= (major, minor)
}

/// `git+file://<repo>?ref=<ref>&rev=<rev>`, with the path and ref percent-encoded.
pub(crate) fn flake_url(repo: &Path, git_ref: Option<&str>, rev: &str) -> String {
    let path = percent_encode(&repo.to_string_lossy());
    match git_ref {
        Some(r) => format!("git+file://{path}?ref={}&rev={rev}", percent_encode(r)),
        None => format!("git+file://{path}?rev={rev}"),
    }
}

fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~+".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Removes the GC root of a build that did not publish its entry.
struct RootGuard<'a> {
    layout: &'a entry::Layout,
    key: &'a str,
    armed: bool,
}

impl Drop for RootGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            let _ = entry::remove_roots(self.layout, self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_is_encoded_and_pinned() {
        let url = flake_url(Path::new("/tmp/a b/repo#1"), Some("main"), "abc");
        assert_eq!(url, "git+file:///tmp/a%20b/repo%231?ref=main&rev=abc");
        assert_eq!(
            flake_url(Path::new("/r"), None, "abc"),
            "git+file:///r?rev=abc"
        );
    }

    #[test]
    fn version_comparison() {
        assert!(!version_at_least("2.8.0", (2, 20)));
        assert!(version_at_least("2.26.3", (2, 20)));
        assert!(version_at_least("3.0pre", (2, 20)));
    }
}
