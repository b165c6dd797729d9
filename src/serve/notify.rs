//! systemd's readiness and watchdog protocol (`Type=notify`, `WatchdogSec=`): one datagram
//! to `$NOTIFY_SOCKET` per state change. A plain unix socket send; no library needed, and a
//! no-op when not started by systemd.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

/// Sends `state` (e.g. `READY=1\nSTATUS=…`) to systemd, if the runner was started by it.
/// Failures are logged, never fatal: the runner works the same without a supervisor.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    if let Err(e) = send(&path.to_string_lossy(), state) {
        tracing::warn!("notifying systemd ({state:?}): {e}");
    }
}

fn send(path: &str, state: &str) -> std::io::Result<()> {
    let socket = UnixDatagram::unbound()?;
    match path.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            socket.send_to_addr(state.as_bytes(), &addr)?;
        }
        None => {
            socket.send_to(state.as_bytes(), path)?;
        }
    }
    Ok(())
}

/// How often to send `WATCHDOG=1`: half the interval systemd asked for, or never.
pub fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    if let Some(pid) = std::env::var("WATCHDOG_PID")
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
    {
        if pid != std::process::id() {
            return None;
        }
    }
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_one_datagram_to_the_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let server = UnixDatagram::bind(&path).unwrap();
        send(&path.to_string_lossy(), "READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
    }
}
