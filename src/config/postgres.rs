//! Where the PostgreSQL queue is and how to log in to it: the config's `queue` parsed once
//! (here, so that loading the config checks it; `serve::pg` uses it as `serve::pg::target`),
//! the password read from its file at each connection (a rotated password needs no restart).
//!
//! `postgres` is a libpq connection string (`host=db.example.org dbname=quest user=runner`), a
//! `postgresql://` URL, or a socket path: the server's socket directory (`/run/postgresql`) or
//! its socket itself (`/run/postgresql/.s.PGSQL.5432`, whose name carries the port). A string
//! that holds a password is refused: the config file is readable by whoever may read the
//! runner's settings, and lands in the Nix store on NixOS. The connection has no TLS: reach a
//! server on another host over a network you trust, or through an SSH tunnel or a VPN
//! (`sslmode=require` is refused rather than silently ignored).

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::{Client, Config, NoTls, Socket};

use serde::{Deserialize, Serialize};

use super::field::FieldError;

/// The shared job queue (`queue` in the config): a PostgreSQL database.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueConfig {
    /// A libpq connection string (`host=db.example.org dbname=quest user=runner`), a
    /// `postgresql://` URL, or the path of the server's socket directory or socket
    /// (`/run/postgresql`). Never a password: that is `password_file`'s.
    pub postgres: String,
    /// A file holding the database password, read at each connection (so a rotated password
    /// needs no restart). Jobs' commands are denied it, as account files.
    pub password_file: Option<PathBuf>,
    /// How long a claimed job stays this runner's without a renewal (renewed every third of
    /// it): a runner that dies loses its jobs to the others this long after its last renewal.
    /// Default 30s.
    pub lease: Option<Duration>,
}

impl QueueConfig {
    /// The default of `lease`.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

    /// `lease`, or its default.
    pub fn lease(&self) -> Duration {
        self.lease.unwrap_or(Self::DEFAULT_LEASE)
    }
}

/// `queue` as the config file writes it (`lease` a duration such as `"30s"`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct QueueFile {
    pub postgres: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<String>,
}

impl QueueFile {
    /// The typed setting, checked as [`PgTarget::from_config`] checks it: the error names
    /// the field (within `queue`) and what is wrong.
    pub fn parse(self) -> Result<QueueConfig, FieldError> {
        let lease = self
            .lease
            .as_deref()
            .map(humantime::parse_duration)
            .transpose()
            .map_err(|e| FieldError::new("lease", e.to_string()));
        let queue = QueueConfig {
            postgres: self.postgres,
            password_file: self.password_file,
            lease: lease.clone().ok().flatten(),
        };
        // The connection's settings are checked before the lease, in `from_config`'s order.
        check(&queue)?;
        Ok(QueueConfig {
            lease: lease?,
            ..queue
        })
    }
}

impl From<QueueConfig> for QueueFile {
    fn from(queue: QueueConfig) -> QueueFile {
        QueueFile {
            postgres: queue.postgres,
            password_file: queue.password_file,
            lease: queue
                .lease
                .map(|l| humantime::format_duration(l).to_string()),
        }
    }
}

/// The socket directory of a connection string that names no host, as libpq's default on
/// Debian, Ubuntu and NixOS.
pub const DEFAULT_SOCKET_DIR: &str = "/run/postgresql";

/// The shortest lease: a renewal every third of it must fit between two of the database's
/// round trips even on a loaded host.
const MIN_LEASE: Duration = Duration::from_secs(1);

/// The driver half of a connection: polled by the caller for notifications.
pub type Connection = tokio_postgres::Connection<Socket, tokio_postgres::tls::NoTlsStream>;

/// A parsed `queue` setting.
#[derive(Debug, Clone)]
pub struct PgTarget {
    config: Config,
    password_file: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("reading the database password from {path}: {source}")]
    PasswordFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the database password file {0} is empty")]
    EmptyPassword(PathBuf),
    #[error("connecting to {target}: {message}")]
    Connect {
        target: String,
        message: String,
        /// Whether trying again may help (the server is down or restarting), as opposed to
        /// a refusal that needs the operator (bad password, no such database or role).
        transient: bool,
    },
}

impl ConnectError {
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ConnectError::Connect {
                transient: true,
                ..
            }
        )
    }
}

/// Checks a `queue` setting as `Config::load` does: the error names the field (within
/// `queue`) and what is wrong.
pub fn check(queue: &QueueConfig) -> Result<(), FieldError> {
    PgTarget::from_config(queue).map(|_| ())
}

impl PgTarget {
    pub fn from_config(queue: &QueueConfig) -> Result<PgTarget, FieldError> {
        let text = queue.postgres.trim();
        let mut config = if text.starts_with('/') {
            socket_config(Path::new(text))?
        } else {
            Config::from_str(text).map_err(|e| {
                FieldError::new(
                    "postgres",
                    format!(
                        "not a connection string (key=value ...), postgresql:// URL or socket \
                         path: {}",
                        error_text(&e)
                    ),
                )
            })?
        };
        if config.get_password().is_some() {
            return Err(FieldError::new(
                "postgres",
                "the connection string holds a password; put it in a file named by \
                 password_file instead (the config is no place for secrets)",
            ));
        }
        if config.get_ssl_mode() == SslMode::Require {
            return Err(FieldError::new(
                "postgres",
                "sslmode=require, but this runner connects without TLS; reach a remote server \
                 through a socket, an SSH tunnel or a VPN",
            ));
        }
        if let Some(path) = &queue.password_file {
            if !path.is_absolute() {
                return Err(FieldError::new(
                    "password_file",
                    format!("{} is not an absolute path", path.display()),
                ));
            }
        }
        if let Some(lease) = queue.lease.filter(|l| *l < MIN_LEASE) {
            return Err(FieldError::new(
                "lease",
                format!("{} is shorter than 1s", humantime::format_duration(lease)),
            ));
        }
        if config.get_hosts().is_empty() {
            config.host_path(DEFAULT_SOCKET_DIR);
        }
        if config.get_application_name().is_none() {
            config.application_name("quest-runner");
        }
        // A server that does not answer must not hold a runner's claim or a command for
        // ever; a host that vanished is noticed by the keepalives rather than after hours.
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        config.keepalives_idle(Duration::from_secs(30));
        config.keepalives_interval(Duration::from_secs(10));
        config.keepalives_retries(3);
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(Duration::from_secs(30));
        }
        Ok(PgTarget {
            config,
            password_file: queue.password_file.clone(),
        })
    }

    /// The server and database, for messages: never the password.
    pub fn describe(&self) -> String {
        let hosts: Vec<String> = self
            .config
            .get_hosts()
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let port = self
                    .config
                    .get_ports()
                    .get(i)
                    .or(self.config.get_ports().first())
                    .copied()
                    .unwrap_or(5432);
                match h {
                    Host::Tcp(name) => format!("{name}:{port}"),
                    Host::Unix(dir) => format!("{}/.s.PGSQL.{port}", dir.display()),
                }
            })
            .collect();
        let user = self.config.get_user().map(str::to_string);
        let db = self
            .config
            .get_dbname()
            .map(str::to_string)
            .or(user.clone());
        format!(
            "PostgreSQL at {} (database {}, user {})",
            hosts.join(","),
            db.as_deref().unwrap_or("<the user's>"),
            user.as_deref().unwrap_or("<this process's>")
        )
    }

    /// Opens a connection; the caller polls the returned driver.
    pub async fn connect(&self) -> Result<(Client, Connection), ConnectError> {
        let mut config = self.config.clone();
        if let Some(path) = &self.password_file {
            config.password(read_password(path)?);
        }
        config
            .connect(NoTls)
            .await
            .map_err(|e| ConnectError::Connect {
                target: self.describe(),
                message: error_text(&e),
                transient: is_transient(&e),
            })
    }
}

/// A socket path: the directory holding `.s.PGSQL.<port>`, or that socket itself.
fn socket_config(path: &Path) -> Result<Config, FieldError> {
    let mut config = Config::new();
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    match name.strip_prefix(".s.PGSQL.") {
        Some(port) => {
            let port: u16 = port.parse().map_err(|_| {
                FieldError::new(
                    "postgres",
                    format!(
                        "{} is not a PostgreSQL socket (.s.PGSQL.<port>)",
                        path.display()
                    ),
                )
            })?;
            let dir = path.parent().unwrap_or(Path::new("/"));
            config.host_path(dir).port(port);
        }
        None => {
            config.host_path(path);
        }
    }
    Ok(config)
}

/// The password in `path`, without the line break editors and `echo` leave at its end.
fn read_password(path: &Path) -> Result<Vec<u8>, ConnectError> {
    let mut data = std::fs::read(path).map_err(|source| ConnectError::PasswordFile {
        path: path.to_path_buf(),
        source,
    })?;
    while data.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        data.pop();
    }
    if data.is_empty() {
        return Err(ConnectError::EmptyPassword(path.to_path_buf()));
    }
    Ok(data)
}

/// Whether a failed connection may succeed later unchanged: the server is unreachable, down
/// or starting, rather than refusing this login.
fn is_transient(e: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    match e.code() {
        None => true,
        Some(code) => [
            SqlState::CANNOT_CONNECT_NOW,
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::TOO_MANY_CONNECTIONS,
        ]
        .contains(code),
    }
}

/// An error with its cause: tokio-postgres's own `Display` leaves the server's message out.
pub fn error_text(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut text = format!("{}: {}", db.severity(), db.message());
        if let Some(detail) = db.detail() {
            text.push_str(&format!(" ({detail})"));
        }
        if let Some(hint) = db.hint() {
            text.push_str(&format!("; hint: {hint}"));
        }
        return text;
    }
    match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

#[cfg(test)]
#[path = "postgres_tests.rs"]
mod tests;
