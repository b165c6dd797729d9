//! The PostgreSQL job queue: runners on many hosts share one database, behind the same
//! [`JobSource`] seam as the directory queue ([`super::queue::FsQueue`]).
//!
//! - Claiming ([`claim`]): one statement, `FOR UPDATE SKIP LOCKED`, cache-aware without
//!   starvation; each claim gets a random token and a lease.
//! - Leases: a runner renews its claims every third of the lease. A runner that dies (kill
//!   -9, its host gone) stops renewing, and a live runner gives the job back to the queue once
//!   the lease has expired — or fails it after `max_attempts` — recording the attempt as
//!   lost, with where it ran. A runner (re)connected for less than its grace (the
//!   lease and twice the reconnection backoff's cap) leaves others' expired leases alone:
//!   after an outage, every lease has expired, and their owners get that long to reconnect
//!   and renew first.
//!   Jobs of this state directory's own earlier process are taken back at once: this process
//!   holds the state directory's lock, so that one is dead.
//! - Faults ([`session`]): while the database is unreachable, running jobs go on, claiming
//!   pauses, and a job's end is retried with backoff (and kept on disk, [`spool`]) until it
//!   is recorded.
//! - Cancel: `LISTEN quest_runner_cancel` reaches the job's runner at once; a renewal also
//!   reports it, for a runner that was disconnected when it was sent.
//! - Waiting: `LISTEN quest_runner_queued` wakes the serve loop; with nothing notified the
//!   queue is not asked again for [`LOOK_AGAIN`].
//! - Logs ([`logship`]) and results live in the database, bounded, so `logs`, `show` and
//!   `jobs` ([`admin`]) work from any host.

pub mod admin;
pub mod claim;
pub mod ends;
pub mod logship;
pub mod schema;
pub mod session;
pub mod spool;
pub mod target;
pub mod warm;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::queue::made_up_result;
use super::source::{Claimed, Interruption, JobSource, Recovered};
use crate::config::Config;
use crate::job::{check_id, Job, JobSpec};
use crate::lockfile::LockFile;
use crate::state::StateDir;
use ends::Recorded;
use session::{QueryError, Session};
use spool::{End, Pending};
use target::PgTarget;

pub use admin::PgError;

/// With nothing notified, how long before the queue is looked at again anyway (a lost
/// notification, a job this runner lacked the account for when it was last asked).
pub const LOOK_AGAIN: Duration = Duration::from_secs(30);
/// The largest result stored; a larger one is replaced by a made-up result saying so (the
/// whole one stays in the job's directory on the runner's host).
pub const RESULT_LIMIT: usize = 4 * 1024 * 1024;
/// How long an idle runner goes without telling the database it is alive.
const HEARTBEAT: Duration = Duration::from_secs(300);

/// Who this runner is, in the database.
#[derive(Debug, Clone)]
pub struct Me {
    pub host: String,
    pub pid: i32,
    /// This state directory's id: the same across restarts (`serve/runner-id`).
    pub runner: String,
    /// This process's id, new at each start.
    pub session: String,
}

/// A claim this process holds.
struct Held {
    claim: String,
    attempt: i32,
    /// A cancel was asked for.
    cancel: bool,
    /// The claim was taken over (its lease expired while this runner was cut off): the job
    /// must stop, and its end will not be recorded.
    lost: bool,
    /// Its end is being recorded: a renewal that no longer finds it is not a loss.
    finishing: bool,
    shipper: Arc<logship::Shipper>,
    shipping: Option<tokio::task::JoinHandle<()>>,
}

/// What the session's notifications change.
struct Signals {
    /// Bumped by every sign that the queue changed.
    generation: AtomicU64,
    /// Wakes the serve loop ([`JobSource::changed`]).
    wake: tokio::sync::Notify,
    /// Wakes the renewer at once (reconnected: cancels sent meanwhile were lost).
    renew_now: tokio::sync::Notify,
    held: Mutex<HashMap<String, Held>>,
}

impl Signals {
    fn bump(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.wake.notify_one();
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl session::Events for Signals {
    fn notified(&self, channel: &str, payload: &str) {
        if channel == schema::CANCEL_CHANNEL {
            let mut held = self.held();
            if let Some((id, h)) = held.iter_mut().find(|(_, h)| h.claim == payload) {
                tracing::info!(job = %id, "cancel requested");
                h.cancel = true;
            }
        } else {
            self.bump();
        }
    }

    fn connected(&self) {
        self.bump();
        self.renew_now.notify_one();
    }
}

struct Shared {
    session: Session,
    signals: Arc<Signals>,
    me: Me,
    lease: Duration,
    state: StateDir,
    default_timeout: Mutex<Duration>,
    /// The accounts of this runner's config: it claims only jobs it has the account for.
    accounts: Mutex<Vec<String>>,
    /// The generation the last empty claim saw, and when.
    looked: Mutex<(u64, Option<Instant>)>,
    warm: warm::WarmSet,
    last_prune: Mutex<Option<Instant>>,
}

/// The claim a runner holds on a job.
pub struct Ticket {
    claim: String,
}

/// The queue as `serve` sees it.
pub struct PgQueue {
    shared: Arc<Shared>,
    renewer: tokio::task::JoinHandle<()>,
    _state_lock: LockFile,
}

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
        let (mut client, connection) = admin::connect_waiting(&target).await?;
        let driver = tokio::spawn(connection);
        let applied = schema::migrate(&mut client).await?;
        if !applied.is_empty() {
            tracing::info!(?applied, "migrated the queue database");
        }
        drop(client);
        let _ = driver.await;
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
        if let Ok(t) = humantime::parse_duration(&config.default_timeout) {
            *self
                .shared
                .default_timeout
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = t;
        }
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

impl Drop for PgQueue {
    fn drop(&mut self) {
        self.renewer.abort();
        for (_, held) in self.shared.signals.held().drain() {
            if let Some(task) = held.shipping {
                task.abort();
            }
        }
    }
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
fn max_backoff(lease: Duration) -> Duration {
    (lease / 4).clamp(Duration::from_millis(100), session::MAX_BACKOFF)
}

impl Shared {
    /// How long this runner must have been connected before it takes over others' expired
    /// leases: one lease, and two of the owners' longest waits to reconnect.
    fn grace(&self) -> Duration {
        self.lease + 2 * max_backoff(self.lease)
    }

    fn default_timeout(&self) -> Duration {
        *self
            .default_timeout
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    async fn register(&self, config: &Config) -> Result<(), PgError> {
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
    async fn flush_spool(&self) {
        for (path, pending) in spool::list(&self.state) {
            let pending = match pending {
                Ok(p) => p,
                Err(e) => {
                    tracing::error!(file = %path.display(), "not a pending job end (left for you to look at): {e}");
                    continue;
                }
            };
            match ends::record(
                &self.session,
                &pending.id,
                &pending.claim,
                pending.attempt,
                &pending.end,
            )
            .await
            {
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

    /// Checks a claimed row; the message says why it is not a job.
    fn admit(&self, row: &claim::Row0) -> Result<Job, String> {
        check_id(&row.id).map_err(|e| e.to_string())?;
        let spec = JobSpec::from_json(&row.spec).map_err(|e| e.to_string())?;
        if let Some(inner) = &spec.id {
            if inner != &row.id {
                return Err(format!(
                    "invalid job field \"id\": {inner:?} differs from the row's id {:?}",
                    row.id
                ));
            }
        }
        let mut spec = spec;
        spec.id = Some(row.id.clone());
        spec.validate(self.default_timeout())
            .map_err(|e| e.to_string())
    }

    /// Records `end` of a claim this process holds: retried with backoff while the database
    /// is unreachable (and kept on disk meanwhile), until it is recorded or found lost.
    async fn end_claim(&self, id: &str, end: End) -> Result<(), PgError> {
        let (claim, attempt, shipper) = {
            let mut held = self.signals.held();
            let Some(h) = held.get_mut(id) else {
                return Err(PgError::Local(format!(
                    "job {id:?} is not claimed by this runner"
                )));
            };
            h.finishing = true;
            if let Some(task) = h.shipping.take() {
                task.abort();
            }
            (h.claim.clone(), h.attempt, h.shipper.clone())
        };
        let mut backoff = Duration::from_millis(200);
        let mut spooled = false;
        let outcome = loop {
            // The last of the output first: `logs --follow` stops once the job has ended.
            let shipped = shipper.ship(&self.session).await;
            let recorded = match shipped {
                Ok(()) | Err(QueryError::Sql { .. }) => {
                    if let Err(e) = &shipped {
                        tracing::warn!(job = %id, "storing the agent's output: {e}");
                    }
                    ends::record(&self.session, id, &claim, attempt, &end).await
                }
                Err(e) => Err(e),
            };
            match recorded {
                Ok(r) => break Ok(r),
                Err(QueryError::Unavailable(why)) => {
                    if !spooled {
                        let pending = Pending {
                            id: id.to_string(),
                            claim: claim.clone(),
                            attempt,
                            end: end.clone(),
                        };
                        match spool::write(&self.state, &pending) {
                            Ok(path) => tracing::error!(job = %id,
                                "recording the job's end: {why}; kept in {} and retried until the database is back",
                                path.display()),
                            Err(e) => tracing::error!(job = %id,
                                "recording the job's end: {why}; retried until the database is back (keeping it on disk failed: {e})"),
                        }
                        spooled = true;
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(session::MAX_BACKOFF);
                }
                Err(e) => break Err(PgError::from(e)),
            }
        };
        if spooled && outcome.is_ok() {
            spool::remove(&self.state, id);
        }
        self.signals.held().remove(id);
        self.warm.invalidate();
        match outcome? {
            Recorded::Applied(state) => {
                tracing::info!(job = %id, %state, "recorded");
                Ok(())
            }
            Recorded::Lost => {
                tracing::warn!(job = %id, "this runner's claim was taken over (its lease expired while the database could not be reached); its end is not recorded");
                Ok(())
            }
        }
    }

    /// Removes the job directories (and earlier attempts' directories) of jobs the database
    /// no longer has (`gc` removed them): at most every ten minutes.
    async fn prune_local(&self) {
        {
            let mut last = self.last_prune.lock().unwrap_or_else(|e| e.into_inner());
            if last.is_some_and(|t| t.elapsed() < Duration::from_secs(600)) {
                return;
            }
            *last = Some(Instant::now());
        }
        let held: Vec<String> = self.signals.held().keys().cloned().collect();
        let mut local: Vec<String> = ["jobs", "serve/attempts"]
            .iter()
            .flat_map(|sub| {
                std::fs::read_dir(self.state.root().join(sub))
                    .map(|d| {
                        d.flatten()
                            .filter_map(|e| e.file_name().into_string().ok())
                            .collect::<Vec<_>>()
                    })
                    .unwrap_or_default()
            })
            .filter(|id| check_id(id).is_ok() && !held.contains(id))
            .collect();
        local.sort();
        local.dedup();
        if local.is_empty() {
            return;
        }
        let gone = self
            .session
            .run("looking for removed jobs", |c| async move {
                c.query(
                    "SELECT x FROM unnest($1::text[]) x
                     WHERE NOT EXISTS (SELECT 1 FROM quest_runner.jobs WHERE id = x)",
                    &[&local],
                )
                .await
            })
            .await;
        let Ok(gone) = gone else {
            return;
        };
        for row in gone {
            let id: String = row.get(0);
            remove_local(&self.state, &id);
        }
    }
}

/// Removes what this host keeps of job `id`: its job directory and earlier attempts'.
pub fn remove_local(state: &StateDir, id: &str) {
    if check_id(id).is_err() {
        return;
    }
    for path in [
        crate::workspace::job_root(state, id),
        state.root().join("serve/attempts").join(id),
    ] {
        if let Err(e) = crate::remove::remove_tree(&path) {
            tracing::warn!("removing {}: {e}", path.display());
        }
    }
}

/// Stops the processes of jobs an earlier process of this state directory was running
/// (their directories still have a workspace record) and removes their workspaces. Only
/// called with the state directory's lock held, so no live runner's job is touched.
fn stop_local_leftovers(state: &StateDir) {
    let jobs = state.root().join("jobs");
    let Ok(entries) = std::fs::read_dir(&jobs) else {
        return;
    };
    let mut any = false;
    for entry in entries.flatten() {
        let Some(id) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if check_id(&id).is_err() || !entry.path().join("workspace.json").exists() {
            continue;
        }
        any = true;
        let killed = super::procs::stop_leftovers(state, &id);
        if killed > 0 {
            tracing::info!(job = %id, killed, "stopped processes left by this runner's earlier process");
        }
    }
    if any {
        crate::workspace::sweep_abandoned(state);
    }
}

/// Moves the job directory an earlier attempt of `id` left on this host to
/// `serve/attempts/<id>/<n>` (`n` from `attempt` up), so the next attempt starts clean and
/// that one's files stay.
fn set_aside(state: &StateDir, id: &str, attempt: i32) {
    let root = crate::workspace::job_root(state, id);
    if !root.exists() {
        return;
    }
    let parent = state.root().join("serve/attempts").join(id);
    if let Err(e) = std::fs::create_dir_all(&parent) {
        tracing::warn!("creating {}: {e}", parent.display());
        return;
    }
    let mut n = attempt.max(1);
    while parent.join(n.to_string()).exists() {
        n += 1;
    }
    let target = parent.join(n.to_string());
    if let Err(e) = std::fs::rename(&root, &target) {
        tracing::warn!("moving {} aside: {e}", root.display());
    }
}

/// The renewer: every third of the lease (at once after a reconnection), extends the
/// leases of this process's claims and learns of cancels; a claim the database no longer
/// has for this runner is lost, and its job is stopped.
async fn renew_loop(shared: Arc<Shared>) {
    let every = shared.lease / 3;
    let mut last_beat = Instant::now();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shared.signals.renew_now.notified() => {}
        }
        let claims: Vec<String> = shared
            .signals
            .held()
            .values()
            .map(|h| h.claim.clone())
            .collect();
        if claims.is_empty() && last_beat.elapsed() < HEARTBEAT {
            continue;
        }
        match ends::renew(&shared.session, &claims, shared.lease, &shared.me.session).await {
            Ok(renewed) => {
                last_beat = Instant::now();
                let mut held = shared.signals.held();
                for (id, h) in held.iter_mut() {
                    match renewed.held.iter().find(|(c, _)| *c == h.claim) {
                        Some((_, true)) if !h.cancel => {
                            tracing::info!(job = %id, "cancel requested");
                            h.cancel = true;
                        }
                        Some(_) => {}
                        None if !h.finishing && claims.contains(&h.claim) && !h.lost => {
                            tracing::error!(job = %id, "this runner's claim was taken over by another runner (its lease expired while this one was cut off); stopping the job");
                            h.lost = true;
                        }
                        None => {}
                    }
                }
            }
            Err(QueryError::Unavailable(_)) => {}
            Err(e) => tracing::warn!("{e}"),
        }
    }
}

impl JobSource for PgQueue {
    type Ticket = Ticket;
    type Error = PgError;

    async fn claim(&self) -> Result<Option<Claimed<Ticket>>, PgError> {
        let shared = &self.shared;
        let generation = shared.signals.generation.load(Ordering::SeqCst);
        {
            let looked = shared.looked.lock().unwrap_or_else(|e| e.into_inner());
            let recent = looked.1.is_some_and(|t| t.elapsed() < LOOK_AGAIN);
            if looked.0 == generation && recent {
                return Ok(None);
            }
        }
        if shared.session.client().is_err() {
            return Ok(None);
        }
        let accounts = shared
            .accounts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let warm = shared.warm.get();
        let me = &shared.me;
        let who = claim::Claimer {
            runner: &me.runner,
            session: &me.session,
            host: &me.host,
            pid: me.pid,
            accounts: &accounts,
            lease: shared.lease,
        };
        loop {
            let row = match claim::claim(&shared.session, &who, &warm).await {
                Ok(Some(row)) => row,
                Ok(None) => {
                    *shared.looked.lock().unwrap_or_else(|e| e.into_inner()) =
                        (generation, Some(Instant::now()));
                    return Ok(None);
                }
                Err(QueryError::Unavailable(_)) => return Ok(None),
                Err(e) => return Err(e.into()),
            };
            let job = match shared.admit(&row) {
                Ok(job) => job,
                Err(reason) => {
                    tracing::warn!(job = %row.id, "rejected: {reason}");
                    if let Err(e) = claim::reject(&shared.session, &row, &reason).await {
                        tracing::error!(job = %row.id, "rejecting it: {e} (its lease will expire)");
                    }
                    continue;
                }
            };
            set_aside(&shared.state, &job.id, row.attempt - 1);
            let shipper = Arc::new(logship::Shipper::new(
                &job.id,
                row.attempt,
                crate::workspace::job_root(&shared.state, &job.id).join("runner"),
                &me.host,
            ));
            let shipping = {
                let (shared, shipper) = (shared.clone(), shipper.clone());
                tokio::spawn(async move {
                    loop {
                        tokio::time::sleep(logship::SHIP_EVERY).await;
                        if let Err(QueryError::Sql { what, message }) =
                            shipper.ship(&shared.session).await
                        {
                            tracing::warn!("{what}: {message}");
                        }
                    }
                })
            };
            shared.signals.held().insert(
                job.id.clone(),
                Held {
                    claim: row.claim.clone(),
                    attempt: row.attempt,
                    cancel: false,
                    lost: false,
                    finishing: false,
                    shipper,
                    shipping: Some(shipping),
                },
            );
            tracing::info!(job = %job.id, attempt = row.attempt, submitted = %row.submitted_at, "claimed");
            return Ok(Some(Claimed {
                job,
                attempt: row.attempt as u32,
                ticket: Ticket { claim: row.claim },
            }));
        }
    }

    async fn finish(&self, claimed: Claimed<Ticket>, result: Value) -> Result<(), PgError> {
        let id = claimed.job.id.clone();
        debug_assert!(!claimed.ticket.claim.is_empty());
        let outcome = result
            .get("outcome")
            .and_then(Value::as_str)
            .unwrap_or("error")
            .to_string();
        let state = match outcome.as_str() {
            "succeeded" => "done",
            "cancelled" => "cancelled",
            _ => "failed",
        };
        let result = bounded(&id, result);
        let end = End::Finish {
            state: state.into(),
            outcome,
            result,
        };
        self.shared.end_claim(&id, end).await
    }

    async fn release(&self, claimed: Claimed<Ticket>, why: Interruption) -> Result<(), PgError> {
        let id = claimed.job.id.clone();
        let cancelled = made_up_result(
            &id,
            "cancelled",
            &format!("cancelled by `quest-runner cancel` ({})", why.reason),
        );
        let end = End::Release {
            reason: why.reason,
            cancelled,
        };
        let ended = self.shared.end_claim(&id, end).await;
        set_aside(&self.shared.state, &id, claimed.attempt as i32);
        ended
    }

    async fn cancel_requested(&self, claimed_id: &str) -> bool {
        self.shared
            .signals
            .held()
            .get(claimed_id)
            .is_some_and(|h| h.cancel || h.lost)
    }

    async fn recover(&self, max_attempts: u32) -> Result<Recovered, PgError> {
        let shared = &self.shared;
        let me = &shared.me;
        // After an outage, the owners of expired leases get time to reconnect and renew.
        let expired = shared
            .session
            .connected_for()
            .is_some_and(|t| t >= shared.grace());
        let stale = match ends::stale(&shared.session, &me.runner, &me.session, expired).await {
            Ok(stale) => stale,
            Err(QueryError::Unavailable(_)) => return Ok(Recovered::default()),
            Err(e) => return Err(e.into()),
        };
        let mut report = Recovered::default();
        let max = max_attempts.max(1) as i32;
        for s in stale {
            let reason = format!(
                "the runner on {} (pid {}) stopped renewing its lease: it died, or lost the database",
                s.host, s.pid
            );
            let (state, result) = if s.cancel {
                let r = made_up_result(
                    &s.id,
                    "cancelled",
                    &format!("cancelled by `quest-runner cancel`; {reason}"),
                );
                ("cancelled", Some(r))
            } else if s.attempts >= max {
                let message = format!("{reason}; gave up after {} attempt(s)", s.attempts);
                ("failed", Some(made_up_result(&s.id, "error", &message)))
            } else {
                ("queued", None)
            };
            match ends::take_over(
                &shared.session,
                &s,
                state,
                result.as_ref(),
                &reason,
                &me.runner,
                &me.session,
                expired,
            )
            .await
            {
                Ok(true) => {
                    tracing::warn!(job = %s.id, attempt = s.attempts, %state, "{reason}");
                    match state {
                        "queued" => report.requeued.push(s.id),
                        _ => report.failed.push(s.id),
                    }
                }
                Ok(false) => {} // renewed, or taken over by another runner meanwhile
                Err(QueryError::Unavailable(_)) => break,
                Err(e) => return Err(e.into()),
            }
        }
        shared.prune_local().await;
        Ok(report)
    }

    /// Jobs of this state directory run only in this process (it holds the directory's
    /// lock): any other is idle here.
    async fn hold_idle(&self, id: &str) -> Option<Box<dyn std::any::Any + Send>> {
        if self.shared.signals.held().contains_key(id) {
            return None;
        }
        Some(Box::new(()))
    }

    async fn changed(&self) {
        self.shared.signals.wake.notified().await;
    }
}

/// `result`, or a made-up result saying it was too large to store.
fn bounded(id: &str, result: Value) -> Value {
    let size = serde_json::to_vec(&result).map_or(usize::MAX, |v| v.len());
    if size <= RESULT_LIMIT {
        return result;
    }
    let outcome = result
        .get("outcome")
        .and_then(Value::as_str)
        .unwrap_or("error")
        .to_string();
    made_up_result(
        id,
        &outcome,
        &format!(
            "the result ({size} bytes) is larger than the queue keeps ({RESULT_LIMIT}); \
             the whole of it is result.json in the job's directory on {}",
            hostname()
        ),
    )
}

/// This host's name (uname's nodename: no name service lookup).
pub fn hostname() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

fn random_hex(bytes: usize) -> std::io::Result<String> {
    use std::io::Read;
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(hex::encode(buf))
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
    crate::devshell::nix_version::write_atomically(serve_dir, &path, id.as_bytes())
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(id)
}
