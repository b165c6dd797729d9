//! `serve`'s connection to the database, kept up for as long as the runner runs.
//!
//! One connection carries every query (tokio-postgres pipelines concurrent ones) and the
//! `LISTEN`s. When it breaks — the server restarted, the network went away, a query hung
//! past [`QUERY_TIMEOUT`] — calls fail at once with [`Unavailable`] instead of waiting, and a
//! supervisor reconnects with exponential backoff (0.1 s doubling to a cap of at most
//! [`MAX_BACKOFF`]),
//! `LISTEN`s again and tells its owner (notifications sent meanwhile are lost, so the owner
//! looks at the queue afresh). The runner's jobs keep running throughout.

use std::future::Future;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio_postgres::{AsyncMessage, Client};

use super::target::{error_text, PgTarget};

/// The longest wait between two connection attempts: a runner notices its database is back
/// within this (and renews its leases at once). A session's cap may be lower (see
/// [`Session::start`]).
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// The longest a query may take before the connection is taken for broken.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(20);

/// The database cannot be reached now; the supervisor is reconnecting.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the queue database is unreachable ({0}); reconnecting")]
pub struct Unavailable(pub String);

/// What the session tells its owner.
pub trait Events: Send + Sync + 'static {
    /// A `NOTIFY` on a channel listened to.
    fn notified(&self, channel: &str, payload: &str);
    /// The session is (again) connected and listening.
    fn connected(&self);
}

pub struct Session {
    inner: Arc<Inner>,
    supervisor: tokio::task::JoinHandle<()>,
}

struct Inner {
    target: PgTarget,
    max_backoff: Duration,
    channels: Vec<&'static str>,
    /// The connection, while it is up.
    client: RwLock<Option<Arc<Client>>>,
    /// Since when it is up.
    since: Mutex<Option<Instant>>,
    /// Why it went down last (for [`Unavailable`]).
    last_error: Mutex<String>,
    /// Tells the supervisor a query found the connection broken.
    broken: tokio::sync::Notify,
}

impl Session {
    /// Starts the supervisor. `first` is a connection already made (the caller's check that
    /// the database is there at all); `None` connects in the background. Reconnection
    /// attempts are at most `max_backoff` apart.
    pub fn start(
        target: PgTarget,
        channels: Vec<&'static str>,
        events: Arc<dyn Events>,
        first: Option<(Client, super::target::Connection)>,
        max_backoff: Duration,
    ) -> Session {
        let inner = Arc::new(Inner {
            target,
            max_backoff: max_backoff.min(MAX_BACKOFF),
            channels,
            client: RwLock::new(None),
            since: Mutex::new(None),
            last_error: Mutex::new("not connected yet".into()),
            broken: tokio::sync::Notify::new(),
        });
        let supervisor = tokio::spawn(supervise(inner.clone(), events, first));
        Session { inner, supervisor }
    }

    /// The connection, or [`Unavailable`] while there is none.
    pub fn client(&self) -> Result<Arc<Client>, Unavailable> {
        read(&self.inner.client).clone().ok_or_else(|| {
            Unavailable(
                self.inner
                    .last_error
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone(),
            )
        })
    }

    /// How long the connection has been up, or `None` while it is down.
    pub fn connected_for(&self) -> Option<Duration> {
        self.inner
            .since
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map(|t| t.elapsed())
    }

    /// Runs `query` on the connection, within [`QUERY_TIMEOUT`]. A failure of the connection
    /// itself (not a refusal by the server) marks it broken, for the supervisor to replace.
    pub async fn run<T, F, Fut>(&self, what: &str, query: F) -> Result<T, QueryError>
    where
        F: FnOnce(Arc<Client>) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let client = self.client().map_err(QueryError::Unavailable)?;
        match tokio::time::timeout(QUERY_TIMEOUT, query(client.clone())).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) if !is_connection_failure(&e) => Err(QueryError::Sql {
                what: what.to_string(),
                message: error_text(&e),
            }),
            Ok(Err(e)) => {
                let why = error_text(&e);
                self.mark_broken(&client, &why);
                Err(QueryError::Unavailable(Unavailable(why)))
            }
            Err(_) => {
                let why = format!("{what} took longer than {}s", QUERY_TIMEOUT.as_secs());
                self.mark_broken(&client, &why);
                Err(QueryError::Unavailable(Unavailable(why)))
            }
        }
    }

    fn mark_broken(&self, client: &Arc<Client>, why: &str) {
        let mut current = self.inner.client.write().unwrap_or_else(|e| e.into_inner());
        if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, client)) {
            *current = None;
            *self.inner.since.lock().unwrap_or_else(|e| e.into_inner()) = None;
            *self
                .inner
                .last_error
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = why.to_string();
            self.inner.broken.notify_one();
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.supervisor.abort();
    }
}

/// A query's failure.
#[derive(Debug, Clone, thiserror::Error)]
pub enum QueryError {
    #[error(transparent)]
    Unavailable(Unavailable),
    /// The server refused or failed the statement itself.
    #[error("{what}: {message}")]
    Sql { what: String, message: String },
}

/// Whether `e` is the connection failing (closed, an I/O error, the server shutting down
/// or restarting), as opposed to the statement failing or a value not converting.
fn is_connection_failure(e: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    if e.is_closed() {
        return true;
    }
    if let Some(code) = e.code() {
        return [
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
        ]
        .contains(code);
    }
    std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
}

fn read<T: Clone>(lock: &RwLock<T>) -> T {
    lock.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The supervisor: connects (or takes up `first`), listens, tells `events`, waits for the
/// connection to break, and again, with backoff, for as long as the session lives.
async fn supervise(
    inner: Arc<Inner>,
    events: Arc<dyn Events>,
    mut first: Option<(Client, super::target::Connection)>,
) {
    let start = Duration::from_millis(100).min(inner.max_backoff);
    let mut backoff = start;
    let mut down_since: Option<Instant> = None;
    let mut failures = 0u32;
    loop {
        let up = match connect_listening(&inner, &events, first.take()).await {
            Ok(up) => up,
            Err(failed) => {
                let e = match failed {
                    Failed::Connect(e) => {
                        failures += 1;
                        // The first failure and then one in ten: a long outage does not
                        // flood the log.
                        if failures == 1 || failures % 10 == 0 {
                            tracing::warn!(
                                attempt = failures,
                                "the queue database: {e}; retrying in {:?}",
                                backoff
                            );
                        }
                        e
                    }
                    Failed::Listen(e) => {
                        tracing::warn!("the queue database: LISTEN failed: {e}");
                        e
                    }
                };
                *inner.last_error.lock().unwrap_or_else(|e| e.into_inner()) = e;
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(inner.max_backoff);
                continue;
            }
        };
        went_up(&inner, &up.client, down_since.take());
        failures = 0;
        backoff = start;
        events.connected();

        // Until the driver sees the connection end, or a query finds it broken.
        let why = tokio::select! {
            why = up.closed => why.unwrap_or_else(|_| "the connection ended".into()),
            () = inner.broken.notified() => inner
                .last_error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        };
        up.driver.abort();
        went_down(&inner, &up.client, why);
        down_since = Some(Instant::now());
    }
}

/// A connection that is up and listening.
struct Up {
    client: Arc<Client>,
    /// The task polling the connection ([`drive`]).
    driver: tokio::task::JoinHandle<()>,
    /// Why the connection ended, once it has.
    closed: tokio::sync::oneshot::Receiver<String>,
}

/// Why a connection could not be taken up: the two are logged differently.
enum Failed {
    Connect(String),
    Listen(String),
}

/// Connects (or takes up `first`), starts polling the connection, and `LISTEN`s.
async fn connect_listening(
    inner: &Inner,
    events: &Arc<dyn Events>,
    first: Option<(Client, super::target::Connection)>,
) -> Result<Up, Failed> {
    let (client, connection) = match first {
        Some(pair) => pair,
        None => inner
            .target
            .connect()
            .await
            .map_err(|e| Failed::Connect(e.to_string()))?,
    };
    let (closed_tx, closed) = tokio::sync::oneshot::channel::<String>();
    let driver = tokio::spawn(drive(connection, events.clone(), closed_tx));
    let listen: String = inner
        .channels
        .iter()
        .map(|c| format!("LISTEN {c};"))
        .collect();
    if let Err(e) = tokio::time::timeout(QUERY_TIMEOUT, client.batch_execute(&listen))
        .await
        .map_err(|_| "LISTEN timed out".to_string())
        .and_then(|r| r.map_err(|e| error_text(&e)))
    {
        driver.abort();
        return Err(Failed::Listen(e));
    }
    Ok(Up {
        client: Arc::new(client),
        driver,
        closed,
    })
}

/// Makes `client` the session's connection, and says so if it was down since `down_since`.
fn went_up(inner: &Inner, client: &Arc<Client>, down_since: Option<Instant>) {
    *inner.client.write().unwrap_or_else(|e| e.into_inner()) = Some(client.clone());
    *inner.since.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    if let Some(since) = down_since {
        tracing::info!(
            down_for = ?since.elapsed(),
            "the queue database is back: {}",
            inner.target.describe()
        );
    }
}

/// Takes `client` out of the session (unless another has replaced it), so that calls fail
/// at once with [`Unavailable`] and `why`.
fn went_down(inner: &Inner, client: &Arc<Client>, why: String) {
    {
        let mut current = inner.client.write().unwrap_or_else(|e| e.into_inner());
        if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, client)) {
            *current = None;
        }
    }
    *inner.since.lock().unwrap_or_else(|e| e.into_inner()) = None;
    tracing::warn!("lost the queue database: {why}; running jobs go on, reconnecting");
    *inner.last_error.lock().unwrap_or_else(|e| e.into_inner()) = why;
}

/// Polls the connection, handing notifications on, until it ends; says why on `closed`.
async fn drive(
    mut connection: super::target::Connection,
    events: Arc<dyn Events>,
    closed: tokio::sync::oneshot::Sender<String>,
) {
    let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
    let why = loop {
        match messages.next().await {
            Some(Ok(AsyncMessage::Notification(n))) => events.notified(n.channel(), n.payload()),
            Some(Ok(AsyncMessage::Notice(notice))) => {
                tracing::debug!("the queue database says: {}", notice.message());
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => break error_text(&e),
            None => break "the server closed the connection".to_string(),
        }
    };
    let _ = closed.send(why);
}
