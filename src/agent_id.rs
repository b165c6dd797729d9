//! The agent's unprivileged identity when the runner is root, and handing a tree to it. A leaf:
//! the sandbox starts the namespace as this identity, and the workspace hands it the shared
//! revision trees a job's checkout is layered on (`workspace::overlay`).

use std::path::Path;

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
