//! What the decider answers, planned from the job's policy before anything runs: a pure value
//! and a pure function of it.
//!
//! Package registries answer reads only (`GET`, `HEAD`): a command can install dependencies
//! but not publish, unpublish or mint a token with someone's credentials. Hosts the operator
//! lists in `network.full_access_hosts` answer every method. Every request must name one host
//! in all three places it can (the target, the `Host` header, the TLS server name); the proxy
//! refuses a mismatch itself, and the decider checks again so that a proxy bug cannot turn a
//! mismatch into an allow.

use serde::Serialize;

use crate::sandbox::SandboxPolicy;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetRules {
    /// Every host commands may reach, as srt writes egress entries: `host`, `host:port`,
    /// `*.domain` (subdomains only), or an IPv4 literal with or without a port.
    pub allowed: Vec<String>,
    /// Of those, the hosts that answer every method.
    pub full_access: Vec<String>,
    /// The methods every other allowed host answers.
    pub read_only_methods: Vec<String>,
}

/// One request as the proxy describes it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a str,
    pub host: &'a str,
    pub port: u16,
    pub host_header: Option<&'a str>,
    pub sni: Option<&'a str>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// An HTTP status (400–599) and a one-line reason the client gets back.
    Deny {
        status: u16,
        reason: String,
    },
}

impl Decision {
    pub fn allowed(&self) -> bool {
        matches!(self, Decision::Allow)
    }
}

/// The rules of `policy`, or `None` when it lets commands reach no host (then no proxy is
/// needed: the sandbox's own refuses everything).
pub fn plan(policy: &SandboxPolicy) -> Option<NetRules> {
    if policy.allowed_hosts.is_empty() {
        return None;
    }
    let canonical = |list: &[String]| -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for h in list {
            let h = h.trim().trim_end_matches('.').to_ascii_lowercase();
            if !h.is_empty() && !out.contains(&h) {
                out.push(h);
            }
        }
        out
    };
    let allowed = canonical(&policy.allowed_hosts);
    // A full-access host the allowlist does not name stays unreachable.
    let full_access = canonical(&policy.full_access_hosts)
        .into_iter()
        .filter(|h| allowed.contains(h))
        .collect();
    let read_only_methods = policy
        .read_only_methods
        .iter()
        .map(|m| m.to_ascii_uppercase())
        .collect();
    Some(NetRules {
        allowed,
        full_access,
        read_only_methods,
    })
}

impl NetRules {
    pub fn decide(&self, r: &Request<'_>) -> Decision {
        let host = r.host.trim_end_matches('.').to_ascii_lowercase();
        if let Some(sni) = r.sni {
            if !sni.trim_end_matches('.').eq_ignore_ascii_case(&host) {
                return deny(
                    421,
                    format!("misdirected: TLS server name {sni} is not the target {host}"),
                );
            }
        }
        if let Some(header) = r.host_header {
            let (name, port) = split_host_port(header);
            let port_differs = port.is_some_and(|p| p != r.port);
            if !name.trim_end_matches('.').eq_ignore_ascii_case(&host) || port_differs {
                return deny(
                    421,
                    format!("misdirected: Host header {header} is not the target {host}"),
                );
            }
        }
        if !self.allowed.iter().any(|p| matches(p, &host, r.port)) {
            return deny(
                403,
                format!("host_not_allowed: {host} is not on the allowlist"),
            );
        }
        if self.full_access.iter().any(|p| matches(p, &host, r.port)) {
            return Decision::Allow;
        }
        if self.read_only_methods.iter().any(|m| m == r.method) {
            return Decision::Allow;
        }
        deny(
            403,
            format!(
                "read_only: {host} answers only {} from jobs, not {}",
                self.read_only_methods.join(", "),
                r.method
            ),
        )
    }
}

fn deny(status: u16, reason: String) -> Decision {
    Decision::Deny { status, reason }
}

/// Whether `host:port` matches one egress entry (srt's semantics: `*.d` matches names under
/// `d` but not `d` itself; an entry without a port matches every port).
pub fn matches(pattern: &str, host: &str, port: u16) -> bool {
    let (name, want_port) = split_host_port(pattern);
    if want_port.is_some_and(|p| p != port) {
        return false;
    }
    match name.strip_prefix("*.") {
        Some(base) => host.len() > base.len() + 1 && host.ends_with(&format!(".{base}")),
        None => name == host,
    }
}

/// `name[:port]` or `[v6][:port]`; a suffix that is not a port stays part of the name.
fn split_host_port(s: &str) -> (&str, Option<u16>) {
    if let Some(rest) = s.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((name, tail)) => (name, tail.strip_prefix(':').and_then(|p| p.parse().ok())),
            None => (s, None),
        };
    }
    match s.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
            match port.parse::<u16>() {
                Ok(p) => (name, Some(p)),
                Err(_) => (s, None),
            }
        }
        _ => (s, None),
    }
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
