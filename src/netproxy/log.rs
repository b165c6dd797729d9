//! The per-job network log: one line per request, written as it is decided, so a job killed
//! midway still leaves what it did. Most lines are the decider's; requests for hosts off the
//! job's allowlist are refused by srt's proxy before any decider is asked, and their lines
//! come from the proxy's own report of them ([`proxy_refusal`]).
//!
//! ```text
//! 2025-11-30T10:00:00.123Z GET registry.npmjs.org:443 /react allowed
//! 2025-11-30T10:00:00.456Z PUT registry.npmjs.org:443 /my-pkg refused 403 read_only: ...
//! 2025-11-30T10:00:00.789Z GET registry.npmjs.org:443 /react/-/react-19.0.0.tgz served locked
//! ```
//!
//! `served locked`: answered by the runner from the job's locked set (`crate::deps`), never
//! from upstream.
//!
//! Time (UTC), method, host and port, path without its query (a query may carry tokens),
//! decision, and for a refusal its status and reason. Every byte a client chose is escaped
//! to printable ASCII, so a request cannot forge or split lines.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use super::rules::Decision;

/// Allowed, refused and served requests so far.
#[derive(Debug, Default)]
pub struct Counts {
    allowed: AtomicU64,
    refused: AtomicU64,
    served: AtomicU64,
}

impl Counts {
    /// Requests answered from the job's locked set.
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }
    pub fn count_served(&self) {
        self.served.fetch_add(1, Ordering::Relaxed);
    }
    pub fn allowed(&self) -> u64 {
        self.allowed.load(Ordering::Relaxed)
    }
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

/// Shared by the decider and the reader of the proxy's stderr.
pub struct NetLog {
    path: PathBuf,
    file: std::sync::Mutex<std::fs::File>,
}

impl NetLog {
    /// Creates (or empties) the log at `path`, readable by its owner only.
    pub fn create(path: &Path) -> std::io::Result<NetLog> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(path)?;
        Ok(NetLog {
            path: path.to_path_buf(),
            file: std::sync::Mutex::new(file),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one line. A failed write is reported, not fatal: the decision stands.
    pub fn record(&self, at: SystemTime, req: &Entry<'_>, decision: &Decision) {
        self.append(line(at, req, decision));
    }

    /// Appends the line of a request answered from the job's locked set.
    pub fn record_served(&self, at: SystemTime, req: &Entry<'_>) {
        self.append(entry_line(at, req, "served locked"));
    }

    fn append(&self, line: String) {
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = file.write_all(line.as_bytes()) {
            tracing::warn!("writing the network log {}: {e}", self.path.display());
        }
    }
}

/// What a log line says about the request.
pub struct Entry<'a> {
    pub method: &'a str,
    pub host: &'a str,
    pub port: u16,
    pub path: &'a str,
}

pub fn line(at: SystemTime, e: &Entry<'_>, decision: &Decision) -> String {
    let outcome = match decision {
        Decision::Allow => "allowed".to_string(),
        Decision::Deny { status, reason } => format!("refused {status} {}", escape(reason)),
    };
    entry_line(at, e, &outcome)
}

fn entry_line(at: SystemTime, e: &Entry<'_>, outcome: &str) -> String {
    let time = humantime::format_rfc3339_millis(at);
    format!(
        "{time} {} {}:{} {} {outcome}\n",
        escape(e.method),
        escape(e.host),
        e.port,
        escape(e.path)
    )
}

/// Printable ASCII but space and `%` as is; everything else `%XX`.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if (0x21..0x7f).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if out.is_empty() {
        out.push('-');
    }
    out
}

/// srt's proxy refuses a host off the allowlist itself and, with `SRT_DEBUG` set, says so on
/// stderr: `[SandboxDebug] Connection blocked to HOST:PORT` for a CONNECT and `[SandboxDebug]
/// HTTP request blocked to HOST:PORT` for a plain request (whose method and path it does not
/// say: they are logged as `-`). Those two lines, as the pinned srt words them, become log
/// entries; `tests/suite/netproxy.rs` fails if a new srt words them otherwise.
pub fn proxy_refusal(stderr_line: &str) -> Option<(&'static str, &str, u16)> {
    let rest = stderr_line.strip_prefix(SRT_DEBUG_PREFIX)?;
    let (method, target) = if let Some(t) = rest.strip_prefix("Connection blocked to ") {
        ("CONNECT", t)
    } else {
        ("-", rest.strip_prefix("HTTP request blocked to ")?)
    };
    let (host, port) = target.rsplit_once(':')?;
    Some((method, host, port.parse().ok()?))
}

/// How srt's debug lines start.
pub const SRT_DEBUG_PREFIX: &str = "[SandboxDebug] ";

/// The decision srt's proxy made for a host off the allowlist (it answers 403).
pub fn proxy_refused() -> Decision {
    Decision::Deny {
        status: 403,
        reason: "host_not_allowed: not on this job's allowlist (refused by the proxy)".into(),
    }
}

/// Counts `decision` in `counts`.
pub fn count(counts: &Counts, decision: &Decision) {
    let which = match decision {
        Decision::Allow => &counts.allowed,
        Decision::Deny { .. } => &counts.refused,
    };
    which.fetch_add(1, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_request_with_escapes() {
        let at = SystemTime::UNIX_EPOCH;
        let e = Entry {
            method: "PUT",
            host: "registry.npmjs.org",
            port: 443,
            path: "/a\nb c",
        };
        let l = line(
            at,
            &e,
            &Decision::Deny {
                status: 403,
                reason: "read_only: no".into(),
            },
        );
        assert_eq!(
            l,
            "1970-01-01T00:00:00.000Z PUT registry.npmjs.org:443 /a%0Ab%20c refused 403 read_only:%20no\n"
        );
        assert_eq!(l.lines().count(), 1);
        let l = line(at, &e, &Decision::Allow);
        assert!(l.ends_with(" allowed\n"), "{l}");
    }

    #[test]
    fn the_proxys_own_refusals_are_read_from_its_stderr() {
        assert_eq!(
            proxy_refusal("[SandboxDebug] Connection blocked to evil.example:443"),
            Some(("CONNECT", "evil.example", 443))
        );
        assert_eq!(
            proxy_refusal("[SandboxDebug] HTTP request blocked to ::1:8080"),
            Some(("-", "::1", 8080))
        );
        for other in [
            "Connection blocked to evil.example:443",
            "[SandboxDebug] [request-filter] allow GET http://a/",
            "[SandboxDebug] Connection blocked to evil.example",
            "[SandboxDebug] Connection blocked to evil.example:http",
        ] {
            assert_eq!(proxy_refusal(other), None, "{other}");
        }
    }
}
