//! The agent's unprivileged identity when the runner is root, and handing a tree to it. A leaf:
//! the sandbox starts the namespace as this identity, and the workspace hands it the shared
//! revision trees a job's checkout is layered on (`workspace::overlay`).

use std::path::{Path, PathBuf};

use crate::util::io::{IoContext, IoError};

/// The uid and gid the agent runs as when the runner is root: in Debian's range for
/// identities made on demand (60000–64999) and below systemd's dynamic users (61184–65519),
/// so no account of a stock host has it. No host file but the job's own is ever given to it.
pub const AGENT_ID: u32 = 60999;

/// `chown -R` to the agent's identity without following a link: a link the job committed
/// must not hand the agent what it points to. (Public for the suite's mutation checks, which
/// hand a tree the policy now lets jobs write to that identity as well.)
pub fn chown_tree(path: &Path) -> std::io::Result<()> {
    chown_tree_to(path, AGENT_ID)
}

/// [`chown_tree`] to uid and gid `id` (the suite hands a checkout back to root with it).
pub fn chown_tree_to(path: &Path, id: u32) -> std::io::Result<()> {
    use rustix::fs::{chownat, AtFlags, Gid, Uid, CWD};
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let owner = (Some(Uid::from_raw(id)), Some(Gid::from_raw(id)));
    chownat(CWD, path, owner.0, owner.1, AtFlags::SYMLINK_NOFOLLOW)?;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            chown_tree_to(&entry?.path(), id)?;
        }
    }
    Ok(())
}

/// [`chown_tree`] for a checkout that is an overlay: every entry of the job's own layer
/// `upper`, changed through the mount at `merged`. Changed under the mount, overlayfs would go
/// on judging access by the old owner; and the entries are in the layer already, so nothing
/// shared is copied up (the merged view's other files are the shared tree's, handed over when
/// it was written). A deletion in the layer (a whiteout) has nothing to change and is skipped.
pub fn chown_layer(upper: &Path, merged: &Path) -> std::io::Result<()> {
    use rustix::fs::{chownat, AtFlags, Gid, Uid, CWD};
    let id = (Some(Uid::from_raw(AGENT_ID)), Some(Gid::from_raw(AGENT_ID)));
    match chownat(CWD, merged, id.0, id.1, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => {}
        Err(e) => return Err(e.into()),
    }
    if std::fs::symlink_metadata(upper)?.is_dir() {
        for entry in std::fs::read_dir(upper)? {
            let name = entry?.file_name();
            chown_layer(&upper.join(&name), &merged.join(&name))?;
        }
    }
    Ok(())
}

/// Why a path the agent's identity must reach (a bind's source) cannot be made reachable.
#[derive(Debug, thiserror::Error)]
pub enum TraversalError {
    #[error(
        "the agent's identity (uid {AGENT_ID}) cannot reach {path}, which the job's namespace \
         binds: {blocked} is not searchable by it and is not the runner's to change; make it \
         searchable (chmod o+x) or move the state directory"
    )]
    Unreachable { path: PathBuf, blocked: PathBuf },
    #[error(transparent)]
    Io(#[from] IoError),
}

/// Lets the agent's identity search (not list) the directories between `/` and `source`: the
/// state directory and those under it are owner-only, and bubblewrap, which runs as that
/// identity, resolves each bind's source by its path. Only the runner's own directories are
/// changed, by group (theirs becomes the agent's, with search only); a directory outside the
/// state directory that the identity cannot search refuses the job instead.
pub fn grant_traversal(source: &Path, state_root: &Path) -> Result<(), TraversalError> {
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
            return Err(TraversalError::Unreachable {
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
