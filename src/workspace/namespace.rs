//! The mount namespace a job's confined processes start from: the runner's, with no checkout
//! overlay in it but the job's own.
//!
//! bubblewrap binds `/` recursively, so a namespace made from the runner's copies every mount
//! in it — every other running job's checkout (`overlay`) included — then walks that list to
//! remount each entry read-only. When another job ends in between, its checkout's removal
//! reaches the copy (an unmount propagates into slaves on hosts whose `/` is shared; removing
//! the mount point detaches every copy of it on all hosts) and bubblewrap fails: "Unable to
//! apply mount flags: remount .../<other>/checkout: No such file or directory". Measured: about
//! 3% of agent starts in `serve_pg`'s stress run, and any command's sandbox (srt binds `/`
//! again, inside the agent's namespace) could fail the same way. Made unbindable, the
//! checkouts would not help: bubblewrap's first step makes every mount a slave, which clears
//! the flag, and copies them anyway.
//!
//! So the copies never exist: a root runner makes a private copy of its namespace on a thread
//! of its own, detaches every checkout overlay in it but the job's (a detach that races the
//! other job's own end is harmless here, unlike in bubblewrap), and starts the job's process
//! in it. Private, nothing mounted or unmounted on the host afterwards reaches it. The job's
//! processes never see another job's checkout mounted, not even under the tmpfs that hides
//! the state directory.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::overlay::{Layer, OVERLAY_SOURCE};
use crate::util::mount_ns::in_private_namespace;

/// What runs inside the job's namespace as it is made, before any process enters it: the
/// boundary suite plants the company machine's configuration there (`selftest::boundary`).
pub type PlantHook = Arc<dyn Fn() -> io::Result<()> + Send + Sync>;

/// A job's mount namespace, held open by its descriptor until every process meant to enter
/// it has been started. A runner that is not root makes it in a user namespace of its own
/// (`owned_mount`), which whoever enters it enters first.
#[derive(Debug)]
pub struct JobNamespace {
    fd: OwnedFd,
    user: Option<OwnedFd>,
    /// The checkout mounted in it, when only this namespace has the mount (`owned_mount`).
    checkout: Option<OwnedFd>,
}

impl JobNamespace {
    /// A private copy of this process's mount namespace without any checkout overlay but the
    /// one mounted on `keep`, with `plant` run in it last. Needs root.
    pub fn new(keep: Option<&Path>, plant: Option<PlantHook>) -> io::Result<Arc<JobNamespace>> {
        let keep = keep.map(Path::to_path_buf);
        let fd = in_private_namespace(move || {
            detach_checkouts(keep.as_deref())?;
            if let Some(plant) = plant {
                plant()?;
            }
            let ns = std::fs::File::open("/proc/thread-self/ns/mnt")?;
            Ok(OwnedFd::from(ns))
        })?;
        Ok(Arc::new(JobNamespace {
            fd,
            user: None,
            checkout: None,
        }))
    }

    /// The namespaces of a runner that is not root, with `layer` mounted on `on` in them and
    /// nowhere else.
    pub(super) fn owned(layer: &Layer, on: &Path) -> io::Result<Arc<JobNamespace>> {
        let data = super::overlay::owned_options(layer)?;
        let mount = super::owned_mount::mount_overlay(&data, on)?;
        Ok(Arc::new(JobNamespace {
            fd: mount.mnt,
            user: Some(mount.user),
            checkout: Some(mount.checkout),
        }))
    }

    /// Where the runner itself reads the checkout mounted only in this namespace: through
    /// the descriptor of its root (the path is this process's alone; no child inherits it).
    pub fn checkout_view(&self) -> Option<PathBuf> {
        let fd = self.checkout.as_ref()?;
        Some(PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd())))
    }

    /// [`JobNamespace::enter`] as a hook for whoever takes one (the runner's git).
    pub fn hook(self: &Arc<Self>) -> crate::process::CommandHook {
        let ns = Arc::clone(self);
        Arc::new(move |cmd| ns.enter(cmd))
    }

    /// Between fork and exec: into the user namespace first (whose owner may then enter the
    /// mount namespace it owns), then the mount namespace, then back to `cwd`.
    fn move_in(&self, cwd: Option<&std::ffi::CStr>) -> io::Result<()> {
        use rustix::thread::{move_into_link_name_space, LinkNameSpaceType};
        if let Some(user) = &self.user {
            // SAFETY: the descriptor is kept open by `self`.
            let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(user.as_raw_fd()) };
            move_into_link_name_space(fd, Some(LinkNameSpaceType::User))?;
        }
        // SAFETY: the descriptor is kept open by `self`.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(self.fd.as_raw_fd()) };
        move_into_link_name_space(fd, Some(LinkNameSpaceType::Mount))?;
        if let Some(cwd) = cwd {
            rustix::process::chdir(cwd)?;
        }
        Ok(())
    }

    /// Makes `cmd` enter the namespace between fork and exec, and go back to its working
    /// directory (entering a mount namespace moves a process to its root).
    pub fn enter(self: &Arc<Self>, cmd: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        let ns = Arc::clone(self);
        let cwd = cmd
            .get_current_dir()
            .and_then(|d| CString::new(d.as_os_str().as_bytes()).ok());
        // SAFETY: setns and chdir are async-signal-safe; the closure touches only
        // descriptors (kept open by the `Arc` the command holds) and a string made before the
        // fork.
        unsafe {
            cmd.pre_exec(move || ns.move_in(cwd.as_deref()));
        }
    }
}

/// Detaches, in this thread's namespace, every checkout overlay not mounted on `keep`, and
/// checks that none is left.
fn detach_checkouts(keep: Option<&Path>) -> io::Result<()> {
    use rustix::mount::{unmount, UnmountFlags};
    for target in checkout_mounts()?
        .iter()
        .filter(|t| Some(t.as_path()) != keep)
    {
        // Gone already (the other job ended and removed its mount point): nothing to do.
        let _ = unmount(target, UnmountFlags::DETACH | UnmountFlags::NOFOLLOW);
    }
    let left: Vec<PathBuf> = checkout_mounts()?
        .into_iter()
        .filter(|t| Some(t.as_path()) != keep)
        .collect();
    match left.first() {
        None => Ok(()),
        Some(first) => Err(io::Error::other(format!(
            "the checkout mounted on {} could not be detached from the job's namespace",
            first.display()
        ))),
    }
}

/// The mount points of the checkout overlays in this thread's namespace.
fn checkout_mounts() -> io::Result<Vec<PathBuf>> {
    let text = std::fs::read("/proc/thread-self/mountinfo")?;
    Ok(overlays_in(&text))
}

/// The mount points, in a `mountinfo` listing, of the overlays [`super::overlay`] mounts.
pub(super) fn overlays_in(mountinfo: &[u8]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for line in mountinfo.split(|&b| b == b'\n') {
        let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        // `id parent dev root point options [optional...] - fstype source super-options`
        let Some(dash) = fields.iter().position(|f| *f == b"-") else {
            continue;
        };
        let (Some(point), Some(fstype), Some(source)) =
            (fields.get(4), fields.get(dash + 1), fields.get(dash + 2))
        else {
            continue;
        };
        if *fstype == b"overlay" && *source == OVERLAY_SOURCE.as_bytes() {
            out.push(PathBuf::from(std::ffi::OsStr::from_bytes(&unescape(point))));
        }
    }
    out
}

/// A `mountinfo` field with its octal escapes (`\040` for a space, and so on) decoded.
fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (field[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_runners_overlays_are_listed_with_their_paths_decoded() {
        let info = b"36 35 98:0 / / rw - ext4 /dev/root rw\n\
            40 36 0:41 / /s/jobs/a/checkout rw,nosuid master:3 - overlay quest-runner rw,lowerdir=x\n\
            41 36 0:42 / /s\\040x/b rw - overlay quest-runner rw\n\
            42 36 0:43 / /etc rw - overlay overlay rw\n";
        assert_eq!(
            overlays_in(info),
            vec![PathBuf::from("/s/jobs/a/checkout"), PathBuf::from("/s x/b")]
        );
    }
}
