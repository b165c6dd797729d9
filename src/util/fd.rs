//! Handing descriptors to a child process.

use std::os::fd::RawFd;

/// Makes the child keep `fds` across exec: the runner opens everything close-on-exec, so a
/// descriptor meant for one child (a job's socket, what its namespace binds) never leaks into
/// another started meanwhile by a different job. The numbers stay as they are (no `dup2`
/// that could land on one another step still needs), so the child can be told them.
pub fn inherit(cmd: &mut std::process::Command, fds: Vec<RawFd>) {
    use std::os::unix::process::CommandExt;
    // SAFETY: fcntl is async-signal-safe, and the closure touches only these numbers, which
    // the caller keeps open until the child is spawned; the Vec is allocated before the fork.
    unsafe {
        cmd.pre_exec(move || {
            for fd in &fds {
                let fd = std::os::fd::BorrowedFd::borrow_raw(*fd);
                rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?;
            }
            Ok(())
        });
    }
}
