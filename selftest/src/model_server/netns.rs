//! The server's private network namespace: made with only `lo`, entered by the agent between
//! fork and exec, and by short-lived threads that bind or connect there, so an agent reaches
//! the server on 127.0.0.1 and nothing else.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use super::ModelServer;

impl ModelServer {
    /// [`Self::confine`] as a closure that can be kept (the runner's agent hook). It holds the
    /// namespace's descriptor number: use it only while the server lives.
    pub fn confiner(&self) -> impl Fn(&mut std::process::Command) + Send + Sync + 'static {
        let fd = self.netns.as_ref().map(|ns| ns.as_raw_fd());
        move |cmd: &mut std::process::Command| {
            if let Some(fd) = fd {
                enter_netns_before_exec(cmd, fd);
            }
        }
    }

    /// [`Self::bind_loopback`] as a closure that can be kept (the runner's proxy hook). It
    /// holds the namespace's descriptor number: use it only while the server lives.
    pub fn binder(&self) -> impl Fn() -> io::Result<std::net::TcpListener> + Send + Sync + 'static {
        let fd = self.netns.as_ref().map(|ns| ns.as_raw_fd());
        move || bind_loopback_in(fd)
    }

    /// A listening socket on `127.0.0.1:0` where the confined agent can reach it: in the
    /// server's private network namespace (or the caller's, for [`Self::start`]). Servers the
    /// agent's commands talk to (the runner's proxy, a stand-in registry) bind here.
    pub fn bind_loopback(&self) -> io::Result<std::net::TcpListener> {
        bind_loopback_in(self.netns.as_ref().map(|ns| ns.as_raw_fd()))
    }

    /// A listening socket on `[::1]:port` beside [`Self::bind_loopback`]'s, for a server that
    /// `localhost` must reach whichever loopback address it resolves to. `None` without IPv6.
    pub fn bind_loopback_v6(&self, port: u16) -> Option<std::net::TcpListener> {
        let fd = self.netns.as_ref().map(|ns| ns.as_raw_fd());
        let bind = move || std::net::TcpListener::bind(("::1", port));
        match fd {
            None => bind().ok(),
            Some(fd) => std::thread::spawn(move || {
                // SAFETY: setns on this short-lived thread only; `fd` is the server's namespace.
                unsafe { enter_netns(fd) }.ok()?;
                bind().ok()
            })
            .join()
            .ok()
            .flatten(),
        }
    }

    /// A connection to `127.0.0.1:port` as the confined agent would make it: from inside the
    /// server's private network namespace (or the caller's, for [`Self::start`]).
    pub fn connect_loopback(&self, port: u16) -> io::Result<std::net::TcpStream> {
        let Some(fd) = self.netns.as_ref().map(|ns| ns.as_raw_fd()) else {
            return std::net::TcpStream::connect(("127.0.0.1", port));
        };
        std::thread::spawn(move || {
            // SAFETY: setns on this short-lived thread only; `fd` is the server's namespace
            // handle, alive while `self` is. The socket keeps the namespace it was made in.
            unsafe { enter_netns(fd) }?;
            std::net::TcpStream::connect(("127.0.0.1", port))
        })
        .join()
        .map_err(|_| io::Error::other("the network namespace thread panicked"))?
    }

    /// Makes `cmd` run in the server's private network namespace (no-op for [`Self::start`]).
    /// The namespace handle is close-on-exec: the agent does not inherit it.
    pub fn confine(&self, cmd: &mut std::process::Command) {
        if let Some(ns) = &self.netns {
            enter_netns_before_exec(cmd, ns.as_raw_fd());
        }
    }

    /// Pids of every process in the server's private network namespace: the confined agent's
    /// whole tree, including the parts that left its process group or session (opencode runs
    /// its shell tool with `setsid`). Empty for [`Self::start`].
    pub fn confined_processes(&self) -> Vec<rustix::process::RawPid> {
        let Some(ns) = &self.netns else {
            return Vec::new();
        };
        let Ok(id) = std::fs::read_link(format!("/proc/self/fd/{}", ns.as_raw_fd())) else {
            return Vec::new();
        };
        let me = std::process::id();
        quest_runner::procfs::pids()
            .into_iter()
            .filter(|&pid| {
                pid != me
                    && std::fs::read_link(format!("/proc/{pid}/ns/net")).is_ok_and(|l| l == id)
            })
            .map(|pid| pid as rustix::process::RawPid)
            .collect()
    }

    /// SIGKILLs every process in the server's private network namespace, again until none is
    /// left (at most for two seconds); returns how many were signalled.
    pub fn kill_confined(&self) -> usize {
        let mut killed = 0;
        for _ in 0..100 {
            let pids = self.confined_processes();
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                // A process inside our own private namespace.
                let signalled = rustix::process::Pid::from_raw(pid).is_some_and(|pid| {
                    rustix::process::kill_process(pid, rustix::process::Signal::KILL).is_ok()
                });
                if signalled {
                    killed += 1;
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        killed
    }
}

/// Makes `cmd` enter the network namespace behind `fd` between fork and exec.
fn enter_netns_before_exec(cmd: &mut std::process::Command, fd: std::os::fd::RawFd) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setns is async-signal-safe; the closure touches nothing else; `fd` is the
    // server's namespace handle, which the caller uses only while it lives.
    unsafe {
        cmd.pre_exec(move || enter_netns(fd));
    }
}

/// Moves the calling thread into the network namespace behind `fd` (setns).
///
/// # Safety
/// `fd` must be open for the call.
unsafe fn enter_netns(fd: std::os::fd::RawFd) -> io::Result<()> {
    use rustix::thread::{move_into_link_name_space, LinkNameSpaceType};
    // SAFETY: `fd` is open for the call (the caller's promise); the borrow ends with it.
    let ns = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    Ok(move_into_link_name_space(
        ns,
        Some(LinkNameSpaceType::Network),
    )?)
}

/// Runs on a thread of its own: the namespace change stays with that thread, which ends;
/// the listener and the namespace handle keep the namespace alive.
pub(super) fn bind_in_new_netns() -> io::Result<(std::net::TcpListener, OwnedFd)> {
    // SAFETY: a new network namespace for this thread only; no descriptor table is unshared.
    unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNET) }?;
    loopback_up()?;
    let ns = OwnedFd::from(File::open("/proc/thread-self/ns/net")?);
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok((listener, ns))
}

/// Binds `127.0.0.1:0` in the namespace behind `netns` (on a thread of its own, which enters
/// it and ends), or in the caller's.
fn bind_loopback_in(netns: Option<std::os::fd::RawFd>) -> io::Result<std::net::TcpListener> {
    let Some(fd) = netns else {
        return std::net::TcpListener::bind("127.0.0.1:0");
    };
    std::thread::spawn(move || {
        // SAFETY: setns on this short-lived thread only; `fd` is the server's namespace handle.
        unsafe { enter_netns(fd) }?;
        std::net::TcpListener::bind("127.0.0.1:0")
    })
    .join()
    .map_err(|_| io::Error::other("the namespace thread panicked"))?
}

/// `ip link set lo up`, by ioctl.
fn loopback_up() -> io::Result<()> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    let sock = rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        None,
    )?;
    // SAFETY: a socket we own, and a zeroed `ifreq` naming `lo`. libc's ioctl: rustix has no
    // interface flags call (SIOCGIFFLAGS/SIOCSIFFLAGS).
    unsafe {
        let mut req: libc::ifreq = std::mem::zeroed();
        for (d, s) in req.ifr_name.iter_mut().zip(b"lo\0") {
            *d = *s as libc::c_char;
        }
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS as _, &mut req) < 0 {
            return Err(io::Error::last_os_error());
        }
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS as _, &req) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}
