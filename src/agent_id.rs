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
