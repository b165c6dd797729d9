//! The PostgreSQL job queue: runners on many hosts share one database, behind the same
//! [`JobSource`](crate::serve::source::JobSource) seam as the directory queue ([`super::queue::FsQueue`]).
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
pub mod bundle;
pub mod claim;
pub mod ends;
pub mod logship;
pub mod schema;
pub mod session;
pub mod spool;
/// Where the queue is: the config's `queue`, parsed by the config that names it.
pub use crate::config::postgres as target;
pub mod warm;

mod end;
mod lifecycle;
mod local;
mod renew;
mod signals;
mod source;

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::lockfile::LockFile;
use crate::state::StateDir;
use lifecycle::max_backoff;
use session::Session;

pub use admin::PgError;
pub use local::remove_local;

/// With nothing notified, how long before the queue is looked at again anyway (a lost
/// notification, a job this runner lacked the account for when it was last asked).
pub const LOOK_AGAIN: Duration = Duration::from_secs(30);
/// The largest result stored; a larger one is replaced by a made-up result saying so (the
/// whole one stays in the job's directory on the runner's host).
pub const RESULT_LIMIT: usize = 4 * 1024 * 1024;

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
    /// Wakes the serve loop ([`JobSource::changed`](crate::serve::source::JobSource::changed)).
    wake: tokio::sync::Notify,
    /// Wakes the renewer at once (reconnected: cancels sent meanwhile were lost).
    renew_now: tokio::sync::Notify,
    held: Mutex<HashMap<String, Held>>,
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

impl Shared {
    /// How long this runner must have been connected before it takes over others' expired
    /// leases: one lease, and two of the owners' longest waits to reconnect.
    pub(super) fn grace(&self) -> Duration {
        self.lease + 2 * max_backoff(self.lease)
    }

    pub(super) fn default_timeout(&self) -> Duration {
        *self
            .default_timeout
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

/// This host's name (uname's nodename: no name service lookup).
pub fn hostname() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}
