//! A layered checkout for a runner that is not root (issue 42): the overlay is mounted in a
//! user and mount namespace the runner's own uid owns, which unprivileged users may make on
//! every kernel since 5.11 (overlayfs with `userxattr`).
//!
//! The runner is a multi-threaded process, and the kernel lets only a single-threaded one make
//! a user namespace, so a forked child makes them: it maps the runner's uid and gid onto
//! themselves (one id each; every other owner reads as `nobody`, as in bubblewrap's), makes its
//! mounts private, mounts the overlay, and reports. The runner then opens the namespaces and
//! the mounted checkout by the child's `/proc` entries and kills it: the descriptors keep the
//! namespaces and the mount alive, and no process is left to outlive the job. Everything the
//! child runs between the fork and its death is a system call on memory prepared before the
//! fork (no allocation, no lock): what a child of a multi-threaded process may do.
//!
//! Whoever then needs the checkout enters both namespaces between fork and exec (the agent,
//! its companion, the runner's git: [`super::namespace::JobNamespace::enter`]), or, for the
//! runner's own reads, goes through the mounted directory's descriptor. The host's mount
//! namespace never holds the mount, so nothing is left mounted if the runner dies: its
//! descriptors close and the kernel takes the namespaces down.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// What the runner keeps of the child's namespaces.
pub(super) struct OwnedMount {
    pub user: OwnedFd,
    pub mnt: OwnedFd,
    /// The mounted checkout, opened `O_PATH`: the runner reads it through `/proc/self/fd`.
    pub checkout: OwnedFd,
}

/// The steps the child reports a failure of, for the error's text.
const STEPS: [&str; 8] = [
    "",
    "setting its parent-death signal",
    "making a user and mount namespace (unshare)",
    "denying setgroups",
    "mapping its uid",
    "mapping its gid",
    "making its mounts private",
    "mounting overlayfs",
];

/// Mounts an overlay (`data`: its options, `userxattr` among them) on `on` in new user and
/// mount namespaces owned by this process's uid.
pub(super) fn mount_overlay(data: &CString, on: &Path) -> io::Result<OwnedMount> {
    let on_c = CString::new(on.as_os_str().as_bytes()).map_err(io::Error::other)?;
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    let uid_map = format!("{uid} {uid} 1\n").into_bytes();
    let gid_map = format!("{gid} {gid} 1\n").into_bytes();
    let (report_r, report_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    // SAFETY: the child runs `child` alone, which makes system calls on the buffers above and
    // never returns (see the module's doc).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: in the child, as above.
        unsafe {
            libc::close(report_r.as_raw_fd());
            child(report_w.as_raw_fd(), (&on_c, data), (&uid_map, &gid_map))
        }
    }
    drop(report_w);
    let holder = Holder(pid);
    // One byte 0 (mounted: the child then waits), or the failed step and its errno.
    let mut report = [0u8; 5];
    let mut n = read_full(report_r.as_raw_fd(), &mut report[..1])?;
    if n == 1 && report[0] != 0 {
        n += read_full(report_r.as_raw_fd(), &mut report[1..])?;
    }
    match (n, report[0]) {
        (1, 0) => {}
        (5, step) => {
            let errno = i32::from_ne_bytes([report[1], report[2], report[3], report[4]]);
            let what = STEPS.get(step as usize).copied().unwrap_or("a step");
            return Err(io::Error::new(
                io::Error::from_raw_os_error(errno).kind(),
                format!("{what}: {}", io::Error::from_raw_os_error(errno)),
            ));
        }
        _ => {
            return Err(io::Error::other(
                "the namespace's child ended without a report",
            ))
        }
    }
    let proc = Path::new("/proc").join(pid.to_string());
    let open = |path: &Path, flags: rustix::fs::OFlags| -> io::Result<OwnedFd> {
        rustix::fs::open(
            path,
            flags | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| {
            io::Error::new(
                io::Error::from(e).kind(),
                format!("{}: {e}", path.display()),
            )
        })
    };
    use rustix::fs::OFlags;
    let mount = OwnedMount {
        user: open(&proc.join("ns/user"), OFlags::RDONLY)?,
        mnt: open(&proc.join("ns/mnt"), OFlags::RDONLY)?,
        checkout: open(
            &proc.join("root").join(on.strip_prefix("/").unwrap_or(on)),
            OFlags::PATH | OFlags::DIRECTORY,
        )?,
    };
    drop(holder);
    Ok(mount)
}

/// The child: kills itself when the runner goes, makes the namespaces, mounts, reports, and
/// waits to be killed.
///
/// # Safety
/// Only in a child just forked, which this never returns to.
unsafe fn child(report: RawFd, (on, data): (&CString, &CString), maps: (&[u8], &[u8])) -> ! {
    let fail = |step: u8| -> ! {
        let errno = io::Error::last_os_error().raw_os_error().unwrap_or(0);
        let mut buf = [step, 0, 0, 0, 0];
        buf[1..].copy_from_slice(&errno.to_ne_bytes());
        libc::write(report, buf.as_ptr().cast(), buf.len());
        libc::_exit(1)
    };
    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
        fail(1);
    }
    if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) != 0 {
        fail(2);
    }
    if !write_file(c"/proc/self/setgroups", b"deny") {
        fail(3);
    }
    if !write_file(c"/proc/self/uid_map", maps.0) {
        fail(4);
    }
    if !write_file(c"/proc/self/gid_map", maps.1) {
        fail(5);
    }
    let none = std::ptr::null();
    if libc::mount(
        none,
        c"/".as_ptr(),
        none,
        libc::MS_REC | libc::MS_PRIVATE,
        std::ptr::null(),
    ) != 0
    {
        fail(6);
    }
    let flags = libc::MS_NOSUID | libc::MS_NODEV;
    let source = c"quest-runner";
    if libc::mount(
        source.as_ptr(),
        on.as_ptr(),
        c"overlay".as_ptr(),
        flags,
        data.as_ptr().cast(),
    ) != 0
    {
        fail(7);
    }
    libc::write(report, [0u8].as_ptr().cast(), 1);
    loop {
        libc::pause();
    }
}

/// Writes `bytes` to the file at `path` in one call, as `/proc`'s map files want.
unsafe fn write_file(path: &std::ffi::CStr, bytes: &[u8]) -> bool {
    let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
    if fd < 0 {
        return false;
    }
    let written = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
    libc::close(fd);
    written == bytes.len() as isize
}

/// Reads until `buf` is full or the writer is gone; the bytes read.
fn read_full(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: borrowed for the reads only; the caller keeps it open.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let mut n = 0;
    while n < buf.len() {
        match rustix::io::read(fd, &mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(n)
}

/// The forked child, killed and reaped however the parent's side ends.
struct Holder(libc::pid_t);

impl Drop for Holder {
    fn drop(&mut self) {
        // SAFETY: our own child, not yet reaped.
        unsafe {
            libc::kill(self.0, libc::SIGKILL);
            let mut status = 0;
            while libc::waitpid(self.0, &mut status, 0) < 0
                && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
            {}
        }
    }
}
