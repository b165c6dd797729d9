//! A private mount namespace for one piece of work: what it mounts or unmounts reaches no
//! other thread or process (the overlay probe, a job's namespace as it is made).

use std::io;

/// Runs `f` on a thread of its own in a private copy of this process's mount namespace (so
/// nothing it mounts or unmounts reaches any other), which ends with the thread unless `f`
/// keeps a descriptor of it.
pub fn in_private_namespace<T: Send + 'static>(
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    std::thread::spawn(move || {
        // SAFETY: affects this thread only (a new mount namespace implies its own fs struct);
        // no descriptor table is unshared.
        unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNS) }?;
        use rustix::mount::{mount_change, MountPropagationFlags};
        mount_change(
            c"/",
            MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
        )?;
        f()
    })
    .join()
    .map_err(|_| io::Error::other("the mount namespace's thread panicked"))?
}
