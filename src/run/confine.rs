//! The job's namespace carried out for the agent and its sandbox host: the launch plan
//! rewritten to start each inside the policy's boundary ([`crate::sandbox::boundary`]), and,
//! when the runner is root, the job's trees handed to the agent's unprivileged identity
//! first.

use std::path::{Path, PathBuf};

use crate::agent::Launch;
use crate::binaries::{self, Tool};
use crate::sandbox::boundary::{self, Identity, Tools, AGENT_ID};
use crate::sandbox::SandboxPolicy;
use crate::util::io::{IoContext, IoError};
use crate::workspace::WorkspacePaths;

#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error("the job's namespace needs {0}")]
    Tool(#[from] binaries::BinaryError),
    #[error(
        "the agent's identity (uid {AGENT_ID}) cannot reach {path}, which the job's namespace \
         binds: {blocked} is not searchable by it and is not the runner's to change; make it \
         searchable (chmod o+x) or move the state directory"
    )]
    Unreachable { path: PathBuf, blocked: PathBuf },
    #[error(transparent)]
    Io(#[from] IoError),
}

/// Rewrites `launch` (the agent, and its companion) to start inside the job's namespace.
/// Nothing to do when the policy does not confine the agent (macOS, or the suite's mutation).
/// Public for the benchmark, which starts an agent on its own in the same namespace.
pub fn confine(
    launch: &mut Launch,
    policy: &SandboxPolicy,
    ws: &WorkspacePaths,
    state_root: &Path,
) -> Result<(), ConfineError> {
    if !policy.confine_agent {
        return Ok(());
    }
    let identity = Identity::current();
    let tools = Tools {
        bwrap: binaries::find(Tool::Bwrap)?,
        setpriv: match identity {
            Identity::Agent => binaries::find(Tool::Setpriv)?,
            Identity::Runner => PathBuf::new(),
        },
    };
    let passwd = match identity {
        Identity::Agent => {
            let passwd = write_passwd(&ws.job_dir, &policy.home)?;
            hand_over(ws)?;
            Some(passwd)
        }
        Identity::Runner => None,
    };
    launch.confined = Some(boundary::plan(
        policy,
        &launch.own,
        identity,
        passwd.as_deref(),
        &tools,
        &launch.cwd,
    ));
    if let Some(host) = launch.companion.as_mut() {
        host.confined = Some(boundary::plan(
            policy,
            &host.own,
            identity,
            passwd.as_deref(),
            &tools,
            &host.cwd,
        ));
        if identity == Identity::Agent {
            host.socket_owner = Some(AGENT_ID);
        }
    }
    if identity == Identity::Agent {
        let plans = [launch.confined.as_ref()]
            .into_iter()
            .chain([launch.companion.as_ref().and_then(|h| h.confined.as_ref())]);
        for plan in plans.flatten() {
            for source in plan.sources() {
                grant_traversal(&source, state_root)?;
            }
        }
    }
    Ok(())
}

/// The trees the agent's identity writes or reads as their owner: the checkout and temp
/// dirs, the parts of the job's git store that `git commit` writes, and the runner's files
/// for the job (its settings stay read-only in the namespace: a read-only mount is read-only
/// to its owner too). The store's `config`, `HEAD` and the shared clone stay root's.
fn owned_trees(ws: &WorkspacePaths) -> Vec<PathBuf> {
    vec![
        ws.checkout.clone(),
        ws.temp_dir.clone(),
        ws.helper_tmp.clone(),
        ws.job_dir.clone(),
        ws.git_store.join("objects"),
        ws.git_store.join("refs"),
        ws.git_store.join("logs"),
        ws.git_store.join("worktrees"),
    ]
}

fn hand_over(ws: &WorkspacePaths) -> Result<(), IoError> {
    for tree in owned_trees(ws) {
        chown_tree(&tree).at("handing to the agent's identity", &tree)?;
    }
    Ok(())
}

/// `chown -R` without following a link: a link the job committed must not hand the agent
/// what it points to.
fn chown_tree(path: &Path) -> std::io::Result<()> {
    use rustix::fs::{chownat, AtFlags, Gid, Uid, CWD};
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let id = (Some(Uid::from_raw(AGENT_ID)), Some(Gid::from_raw(AGENT_ID)));
    chownat(CWD, path, id.0, id.1, AtFlags::SYMLINK_NOFOLLOW)?;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            chown_tree(&entry?.path())?;
        }
    }
    Ok(())
}

/// The namespace's `/etc/passwd`: the host's, with the agent's identity named (git, Node's
/// `os.userInfo()` and ssh look the running uid up and fail on an unknown one).
fn write_passwd(job_dir: &Path, home: &Path) -> Result<PathBuf, IoError> {
    let host = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let id = AGENT_ID.to_string();
    let mut text: String = host
        .lines()
        .filter(|l| l.split(':').nth(2) != Some(id.as_str()))
        .map(|l| format!("{l}\n"))
        .collect();
    text.push_str(&format!(
        "quest-agent:x:{id}:{id}:quest-runner agent:{}:/bin/sh\n",
        home.display()
    ));
    let path = job_dir.join("passwd");
    std::fs::write(&path, text).at("writing", &path)?;
    Ok(path)
}

/// Lets the agent's identity search (not list) the directories between `/` and `source`: the
/// state directory and those under it are owner-only, and bubblewrap, which runs as that
/// identity, resolves each bind's source by its path. Only the runner's own directories are
/// changed, by group (theirs becomes the agent's, with search only); a directory outside the
/// state directory that the identity cannot search refuses the job instead.
fn grant_traversal(source: &Path, state_root: &Path) -> Result<(), ConfineError> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let ancestors: Vec<&Path> = source.ancestors().skip(1).collect();
    for dir in ancestors.into_iter().rev() {
        let Ok(meta) = std::fs::metadata(dir) else {
            continue;
        };
        let mode = meta.mode();
        let searchable = mode & 0o001 != 0
            || (meta.uid() == AGENT_ID && mode & 0o100 != 0)
            || (meta.gid() == AGENT_ID && mode & 0o010 != 0);
        if searchable {
            continue;
        }
        if !dir.starts_with(state_root) {
            return Err(ConfineError::Unreachable {
                path: source.to_path_buf(),
                blocked: dir.to_path_buf(),
            });
        }
        let gid = Some(rustix::fs::Gid::from_raw(AGENT_ID));
        rustix::fs::chown(dir, None, gid)
            .map_err(std::io::Error::from)
            .at("letting the agent's identity search", dir)?;
        let mode = (mode & 0o7707) | 0o010;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
            .at("letting the agent's identity search", dir)?;
    }
    Ok(())
}
