//! A job's checkout as a kernel overlay (issue 31): the revision's files, written once by the
//! runner (`revision_tree`), as the read-only lower layer, and the job's own directory as the
//! upper layer, which receives everything the job writes. A job's checkout is then ready in
//! milliseconds at any repository size, and its end removes only what it wrote.
//!
//! ```text
//! <state>/trees/<clone>/<rev>/files    lower: the runner's (0700 above it), shared by jobs
//! <state>/jobs/<id>/layer/upper/       upper: what this job wrote (its `.git` file included)
//! <state>/jobs/<id>/layer/work/        overlayfs' own scratch directory
//! <state>/jobs/<id>/checkout/          the mount: what the job, its git and Nix see
//! ```
//!
//! A root runner's mount is in its own mount namespace, so the runner's git and bubblewrap
//! (which binds the checkout like any directory) see the same view. A job
//! cannot reach the lower layer by any path: the trees directory is the runner's alone, and
//! the namespace binds only the mount. Whatever it writes through the mount — files, deletions
//! (overlayfs' whiteouts), renames — lands in its upper layer; the extended attributes that
//! could steer overlayfs (`trusted.overlay.*`) are root's in the host's user namespace, which
//! no job process is in.
//!
//! A runner that is not root (its service user) mounts the same overlay in a user namespace
//! of its own instead (`owned_mount`): only the job's processes and the runner's git, which
//! enter it, see the mount.
//!
//! Needs: root, or unprivileged overlayfs in a user namespace (Linux 5.11+, user namespaces
//! allowed), and overlayfs with the upper layer on a file system that has extended attributes
//! (ext4, xfs, btrfs, tmpfs). Without them [`available`] says why once, and jobs get a full
//! checkout of their own, as before.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::util::io::{IoContext, IoError};

/// The source every checkout overlay is mounted with: how a job's namespace tells them from
/// other overlays (`namespace`).
pub const OVERLAY_SOURCE: &str = "quest-runner";

/// The job's own layer of its checkout, as `workspace.json` records it (so cleanup, by this
/// runner or a later one, unmounts before it removes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layer {
    /// The revision's shared files (the lower layer; never written by a job): the top one of
    /// the revision's tree, when that tree is a delta over another's (`revision_tree`).
    pub lower: PathBuf,
    /// The layers below `lower`, nearest first: the trees a delta tree lies on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub below: Vec<PathBuf>,
    /// What the job wrote.
    pub upper: PathBuf,
    /// overlayfs' scratch directory, beside `upper` on the same file system.
    pub work: PathBuf,
}

impl Layer {
    /// The layer of the job at `job_root` over `lowers` (the top one first; at least one).
    pub fn of(job_root: &Path, lowers: &[PathBuf]) -> Layer {
        Layer::in_dir(&job_root.join("layer"), lowers)
    }

    /// A layer whose upper and work directories are in `dir`.
    pub fn in_dir(dir: &Path, lowers: &[PathBuf]) -> Layer {
        let (lower, below) = match lowers.split_first() {
            Some((top, rest)) => (top.clone(), rest.to_vec()),
            None => (PathBuf::new(), Vec::new()),
        };
        Layer {
            lower,
            below,
            upper: dir.join("upper"),
            work: dir.join("work"),
        }
    }

    /// Every lower layer, the top one first.
    pub fn lowers(&self) -> impl Iterator<Item = &PathBuf> {
        std::iter::once(&self.lower).chain(&self.below)
    }

    /// `<job>/layer`, which holds both directories of the job's.
    pub fn dir(&self) -> Option<&Path> {
        self.upper.parent()
    }

    /// Makes the (empty) upper and work directories.
    pub fn create(&self) -> Result<(), IoError> {
        for dir in [&self.upper, &self.work] {
            std::fs::create_dir_all(dir).at("creating", dir)?;
        }
        Ok(())
    }

    /// Mounts the overlay on `on` (an empty directory).
    pub fn mount(&self, on: &Path) -> Result<(), IoError> {
        use rustix::mount::{mount, MountFlags};
        let data = options(self).map_err(|e| IoError::at("mounting an overlay on", on, e))?;
        mount(
            OVERLAY_SOURCE,
            on,
            "overlay",
            MountFlags::NOSUID | MountFlags::NODEV,
            data.as_c_str(),
        )
        .map_err(std::io::Error::from)
        .at("mounting an overlay on", on)
    }
}

/// Detaches the overlay mounted on `on`; nothing mounted there is not an error (a cleanup
/// after a reboot, or after a mount that failed).
pub fn unmount(on: &Path) -> Result<(), IoError> {
    use rustix::mount::{unmount, UnmountFlags};
    match unmount(on, UnmountFlags::DETACH | UnmountFlags::NOFOLLOW) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::INVAL) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(IoError::at("unmounting", on, e.into())),
    }
}

/// The options of a mount in a user namespace of the runner's (`owned_mount`): overlayfs keeps
/// its own attributes as `user.overlay.*` there, which it refuses to set or show through the
/// mount, so a job can no more steer it than under `trusted.overlay.*`.
pub(super) fn owned_options(layer: &Layer) -> std::io::Result<std::ffi::CString> {
    let mut text = options(layer)?.into_bytes();
    text.extend_from_slice(b",userxattr");
    std::ffi::CString::new(text).map_err(std::io::Error::other)
}

/// The mount's options. overlayfs splits them at `,` and its layer lists at `:`, and reads `\`
/// as an escape: a path holding one is refused rather than escaped (the state directory's path
/// is the operator's choice, never a job's).
fn options(layer: &Layer) -> std::io::Result<std::ffi::CString> {
    let mut text = String::new();
    let lowers = layer.lowers().map(|l| ("lowerdir", l));
    let mut last_key = "";
    for (key, path) in lowers.chain([("upperdir", &layer.upper), ("workdir", &layer.work)]) {
        let Some(text_path) = path.to_str().filter(|p| !p.contains([',', ':', '\\'])) else {
            return Err(std::io::Error::other(format!(
                "{key} {} is not UTF-8 or holds a ',', ':' or '\\', which overlayfs options \
                 cannot carry",
                path.display()
            )));
        };
        let path = text_path;
        // The lower layers are one option, top first: `lowerdir=a:b:c`.
        if key == last_key {
            text.push(':');
        } else {
            if !text.is_empty() {
                text.push(',');
            }
            text.push_str(&format!("{key}="));
        }
        text.push_str(path);
        last_key = key;
    }
    std::ffi::CString::new(text).map_err(std::io::Error::other)
}

/// Whether this runner layers checkouts: `Ok(())`, or why not (asked once per process, by
/// mounting a small overlay in `scratch`'s directory, where the layers will be, in a mount
/// namespace of its own: no other process's namespace ever holds the probe's mount). The
/// reason is logged once, at the first job that falls back.
pub fn available(scratch: &Path) -> Result<(), &'static str> {
    static ANSWER: OnceLock<Result<(), String>> = OnceLock::new();
    let answer = ANSWER.get_or_init(|| {
        let scratch = scratch.to_path_buf();
        let answer = match rustix::process::geteuid().is_root() {
            false => probe(&scratch, Mounter::Owned),
            true => crate::util::mount_ns::in_private_namespace(move || {
                Ok(probe(&scratch, Mounter::Root))
            })
            .unwrap_or_else(|e| Err(format!("no mount namespace of its own: {e}"))),
        };
        if let Err(why) = &answer {
            tracing::info!(
                "each job gets a full checkout of its own (no shared revision tree): {why}"
            );
        }
        answer
    });
    answer.as_ref().map(|_| ()).map_err(|why| why.as_str())
}

/// Who mounts a job's checkout: a root runner in its own mount namespace, or any other in a
/// user namespace of its own (`owned_mount`).
#[derive(Clone, Copy)]
enum Mounter {
    Root,
    Owned,
}

fn probe(scratch: &Path, mounter: Mounter) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    // Owner only, like the trees that will be made beside the probe.
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(scratch)
        .map_err(|e| format!("{}: {e}", scratch.display()))?;
    let dir = tempfile::Builder::new()
        .prefix(".probe-")
        .tempdir_in(scratch)
        .map_err(|e| format!("{}: {e}", scratch.display()))?;
    let lower = dir.path().join("lower");
    let merged = dir.path().join("merged");
    let layer = Layer::of(dir.path(), std::slice::from_ref(&lower));
    let made = std::fs::create_dir(&lower)
        .and_then(|()| std::fs::create_dir(&merged))
        .map_err(|e| format!("{}: {e}", dir.path().display()));
    made?;
    layer.create().map_err(|e| e.to_string())?;
    let answer = match mounter {
        Mounter::Root => {
            let mounted = layer.mount(&merged);
            let _ = unmount(&merged);
            mounted.map_err(|e| format!("overlayfs could not be mounted here: {e}"))
        }
        // The namespaces end with the descriptors, dropped here.
        Mounter::Owned => owned_options(&layer)
            .and_then(|data| super::owned_mount::mount_overlay(&data, &merged))
            .map(drop)
            .map_err(|e| {
                format!(
                    "the runner is not root, and overlayfs could not be mounted in a user \
                     namespace of its own ({e}); it needs Linux 5.11 or later, unprivileged \
                     user namespaces, and on Ubuntu an AppArmor profile that allows them"
                )
            }),
    };
    // overlayfs leaves a directory no one may enter in its work dir: made writable first.
    let _ = crate::remove::remove_tree(dir.path());
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lower_layers_are_one_option_top_first() {
        let lowers = [PathBuf::from("/t/b/delta"), PathBuf::from("/t/a/files")];
        let layer = Layer::of(Path::new("/s/jobs/j"), &lowers);
        assert_eq!(
            options(&layer).unwrap().to_str().unwrap(),
            "lowerdir=/t/b/delta:/t/a/files,upperdir=/s/jobs/j/layer/upper,workdir=/s/jobs/j/layer/work"
        );
        let odd = Layer::of(Path::new("/s/jobs/j"), &[PathBuf::from("/t/a:b")]);
        assert!(options(&odd)
            .unwrap_err()
            .to_string()
            .contains("lowerdir /t/a:b"));
    }
}
