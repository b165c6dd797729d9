//! The runner decides every request a trusted job's commands make.
//!
//! sandbox-runtime's standalone proxy (`srt proxy`) terminates each CONNECT with a per-job CA
//! and asks an external decider about every request; the runner is that decider. Both agents'
//! sandboxes send their commands' traffic (HTTP and SOCKS) to it instead of to their built-in
//! proxy. The data flows one way, one module each:
//!
//! policy → [`rules`] (pure: which host answers which methods) → [`ca`] (the job's CA; its key
//! goes to the proxy over a pipe, never to disk) → [`proxy`] (the `srt proxy` process, its
//! inherited descriptors and lifeline) ↔ [`decider`] (the framed protocol) → [`log`] (one line
//! per request in the job's directory, and the counts in the result).
//!
//! Untrusted revisions reach no host, so they get no proxy: their sandboxes' own proxy refuses
//! everything.

pub mod ca;
pub mod decider;
pub mod front;
pub mod job;
pub mod log;
pub mod proxy;
pub mod rules;

pub use proxy::{JobProxy, NetworkSummary, ProxyError};
pub use rules::NetRules;
