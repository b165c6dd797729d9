//! Why the gateway could not start, open a job, or give a job its credential; and why an
//! account has no route through it. Each names the file, setting or socket at fault.

use std::path::PathBuf;

/// The gateway itself: its socket, its TLS client, a job's token and log.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("binding the model gateway's port on loopback: {0}")]
    Bind(#[source] std::io::Error),
    #[error("the model gateway's socket: {0}")]
    Socket(#[source] std::io::Error),
    #[error("adding a trusted CA: {0}")]
    TrustedCa(#[source] rustls::Error),
    #[error("TLS configuration: {0}")]
    Tls(#[source] rustls::Error),
    #[error("making the job's gateway token: {0}")]
    Token(#[source] std::io::Error),
    #[error("creating {}: {source}", path.display())]
    JobLog {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A credential file that gives no credential.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("reading {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is empty", path.display())]
    Empty { path: PathBuf },
    #[error("{} is not JSON: {source}", path.display())]
    NotJson {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{} has no api key for {provider}", path.display())]
    NoApiKey { path: PathBuf, provider: String },
    #[error("{} holds no claudeAiOauth login", path.display())]
    NoLogin { path: PathBuf },
    #[error("{}: claudeAiOauth.{field} is missing", path.display())]
    MissingField { path: PathBuf, field: &'static str },
}

/// An account the gateway cannot route: what in its config to set or change (the text
/// names the setting, `accounts.<name>.…`).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct AccountError(pub String);
