//! A runner's life in the database: opening the queue (the state directory's lock, the
//! schema, registration, what an earlier process left), config reloads, and a clean close.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use super::ends::{self, Recorded};
use super::local::stop_local_leftovers;
use super::renew::renew_loop;
use super::session::{self, Session};
use super::target::PgTarget;
use super::{admin, hostname, schema, spool, warm, Me, PgError, PgQueue, Shared, Signals};
use crate::config::Config;
use crate::lockfile::LockFile;
use crate::state::StateDir;

impl PgQueue {
    /// Connects (waiting, with backoff, while the server is unreachable; failing at once on
    /// a refusal such as a bad password), migrates the schema, registers this runner, stops
    /// what an earlier process of this state directory left running on this host, and
    /// records the ends it could not record.
    pub async fn open(
        target: PgTarget,
        state: &StateDir,
        config: &Config,
        lease: Duration,
        default_timeout: Duration,
    ) -> Result<PgQueue, PgError> {
        let (state_lock, me) = claim_state_dir(state)?;
        migrate(&target).await?;
        let first = admin::connect_waiting(&target).await?;
        tracing::info!(host = %me.host, runner = %me.runner, "queue: {}", target.describe());

        let signals = Arc::new(Signals {
            generation: AtomicU64::new(1),
            wake: tokio::sync::Notify::new(),
            renew_now: tokio::sync::Notify::new(),
            held: Mutex::new(HashMap::new()),
        });
        let session = Session::start(
            target,
            vec![schema::QUEUED_CHANNEL, schema::CANCEL_CHANNEL],
            signals.clone(),
            Some(first),
            max_backoff(lease),
        );
        let shared = Arc::new(Shared {
            session,
            signals,
            me,
            lease,
            state: state.clone(),
            default_timeout: Mutex::new(default_timeout),
            accounts: Mutex::new(config.accounts.keys().cloned().collect()),
            looked: Mutex::new((0, None)),
            warm: warm::WarmSet::new(state),
            last_prune: Mutex::new(None),
        });
        wait_connected(&shared.session).await;
        shared.register(config).await?;
        stop_local_leftovers(state);
        shared.flush_spool().await;
        let renewer = tokio::spawn(renew_loop(shared.clone()));
        Ok(PgQueue {
            shared,
            renewer,
            _state_lock: state_lock,
        })
    }

    /// The config was reloaded: the timeout of jobs that name none, and the accounts this
    /// runner claims jobs for.
    pub fn reloaded(&self, config: &Config) {
        *self
            .shared
            .default_timeout
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = config.default_timeout;
        *self
            .shared
            .accounts
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = config.accounts.keys().cloned().collect();
        let shared = self.shared.clone();
        let config = config.clone();
        tokio::spawn(async move {
            if let Err(e) = shared.register(&config).await {
                tracing::warn!("updating this runner's accounts in the queue database: {e}");
            }
            shared.signals.bump();
        });
    }

    /// Takes this runner out of the list `submit` checks accounts against (a clean stop).
    pub async fn close(&self) {
        let session = &self.shared.me.session;
        let _ = self
            .shared
            .session
            .run("leaving the queue", |c| async move {
                c.execute(
                    "DELETE FROM quest_runner.runners WHERE session = $1",
                    &[session],
                )
                .await
            })
            .await;
    }

    /// Who this runner is in the database.
    pub fn me(&self) -> &Me {
        &self.shared.me
    }
}

/// Takes the state directory's `serve` lock (one PostgreSQL-queue runner per state
/// directory: its jobs' directories and leftovers are its own) and says who this runner is.
fn claim_state_dir(state: &StateDir) -> Result<(LockFile, Me), PgError> {
    let serve_dir = state
        .ensure_dir(std::path::Path::new("serve"))
        .map_err(|e| PgError::Local(e.to_string()))?;
    let lock_path = serve_dir.join("pg-serve.lock");
    let state_lock = LockFile::try_acquire(&lock_path)
        .map_err(|e| PgError::Local(format!("locking {}: {e}", lock_path.display())))?
        .ok_or_else(|| {
            PgError::Local(format!(
                "another `serve` uses the state directory {} (it holds {}): runners sharing \
                 a PostgreSQL queue need a state directory each",
                state.root().display(),
                lock_path.display()
            ))
        })?;
    let me = Me {
        host: hostname(),
        pid: std::process::id() as i32,
        runner: runner_id(&serve_dir).map_err(PgError::Local)?,
        session: random_hex(16).map_err(|e| PgError::Local(e.to_string()))?,
    };
    Ok((state_lock, me))
}

/// Brings the database's schema up to date, on a connection of its own that ends here.
async fn migrate(target: &PgTarget) -> Result<(), PgError> {
    let (mut client, connection) = admin::connect_waiting(target).await?;
    let driver = tokio::spawn(connection);
    let applied = schema::migrate(&mut client).await?;
    if !applied.is_empty() {
        tracing::info!(?applied, "migrated the queue database");
    }
    drop(client);
    let _ = driver.await;
    Ok(())
}

/// Waits a little for the session's first connection (made already; the supervisor only
/// has to take it up).
async fn wait_connected(session: &Session) {
    for _ in 0..100 {
        if session.client().is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The cap of a session's reconnection backoff: a quarter of the lease, at most
/// [`session::MAX_BACKOFF`], so that a runner is back well within a lease of the database.
pub(super) fn max_backoff(lease: Duration) -> Duration {
    (lease / 4).clamp(Duration::from_millis(100), session::MAX_BACKOFF)
}

impl Shared {
    pub(super) async fn register(&self, config: &Config) -> Result<(), PgError> {
        let accounts: serde_json::Map<String, Value> = config
            .accounts
            .iter()
            .map(|(name, a)| (name.clone(), a.agent().name().into()))
            .collect();
        let accounts = Value::Object(accounts);
        let me = &self.me;
        let dir = self.state.root().display().to_string();
        let version = env!("CARGO_PKG_VERSION");
        self.session
            .run("registering this runner", |c| async move {
                c.execute(
                    "WITH gone AS (
                         DELETE FROM quest_runner.runners
                         WHERE seen_at < now() - interval '1 day' OR (runner = $2 AND session <> $1)
                     )
                     INSERT INTO quest_runner.runners
                         (session, runner, host, pid, state_dir, accounts, version)
                     VALUES ($1, $2, $3, $4, $5, $6, $7)
                     ON CONFLICT (session) DO UPDATE SET accounts = $6, seen_at = now()",
                    &[
                        &me.session,
                        &me.runner,
                        &me.host,
                        &me.pid,
                        &dir,
                        &accounts,
                        &version,
                    ],
                )
                .await
            })
            .await
            .map_err(PgError::from)?;
        Ok(())
    }

    /// Records the ends an earlier process of this state directory kept on disk.
    pub(super) async fn flush_spool(&self) {
        for (path, pending) in spool::list(&self.state) {
            let pending = match pending {
                Ok(p) => p,
                Err(e) => {
                    tracing::error!(file = %path.display(), "not a pending job end (left for you to look at): {e}");
                    continue;
                }
            };
            match ends::record(&self.session, &pending).await {
                Ok(Recorded::Applied(state)) => {
                    tracing::info!(job = %pending.id, %state, "recorded a job's end kept while the database was unreachable");
                    spool::remove(&self.state, &pending.id);
                }
                Ok(Recorded::Lost) => {
                    tracing::warn!(job = %pending.id, "a job's end kept on disk is stale (another runner took the job over); dropped");
                    spool::remove(&self.state, &pending.id);
                }
                Err(e) => {
                    tracing::error!(job = %pending.id, "recording a job's end kept on disk: {e}")
                }
            }
        }
    }
}

fn random_hex(bytes: usize) -> std::io::Result<String> {
    use std::io::Read;
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(crate::util::hex::encode(buf))
}

/// This state directory's runner id, made on first use.
fn runner_id(serve_dir: &std::path::Path) -> Result<String, String> {
    let path: PathBuf = serve_dir.join("runner-id");
    if let Ok(text) = std::fs::read_to_string(&path) {
        let id = text.trim();
        if id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(id.to_string());
        }
    }
    let id = random_hex(16).map_err(|e| format!("making a runner id: {e}"))?;
    crate::util::fs::write_atomically(serve_dir, &path, id.as_bytes())
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(id)
}
