//! The PostgreSQL queue as the [`JobSource`] `serve` runs jobs from: claiming (with the
//! log shipper each claim gets), finishing, releasing, cancels, and taking over the jobs of
//! runners that stopped renewing.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use super::end::bounded;
use super::local::set_aside;
use super::session::QueryError;
use super::spool::End;
use super::{claim, ends, logship, Held, PgError, PgQueue, Shared, Ticket, LOOK_AGAIN};
use crate::job::{check_id, Job, JobSpec};
use crate::run::{JobResult, Outcome};
use crate::serve::not_a_job::NotAJob;
use crate::serve::source::made_up_result;
use crate::serve::source::{result_json, Claimed, Interruption, JobSource, Recovered};

impl Shared {
    /// Checks a claimed row; the error says why it is not a job.
    pub(super) fn admit(&self, row: &claim::Row0) -> Result<Job, NotAJob> {
        check_id(&row.id)?;
        let spec = JobSpec::from_json(&row.spec)?;
        if let Some(inner) = &spec.id {
            if inner != &row.id {
                return Err(NotAJob::IdDiffers {
                    inner: inner.clone(),
                    named: format!("the row's id {:?}", row.id),
                });
            }
        }
        let mut spec = spec;
        spec.id = Some(row.id.clone());
        Ok(spec.validate(self.default_timeout())?)
    }
}

impl Shared {
    /// Whether the last claim found nothing at this same generation, recently: then nothing
    /// has changed that a claim could find, and the database is spared the query.
    fn looked_lately(&self, generation: u64) -> bool {
        let looked = self.looked.lock().unwrap_or_else(|e| e.into_inner());
        let recent = looked.1.is_some_and(|t| t.elapsed() < LOOK_AGAIN);
        looked.0 == generation && recent
    }
}

/// Records the claim of `row` as held by this process, with the task that ships the job's
/// output to the database while it runs.
fn hold(shared: &Arc<Shared>, job: &Job, row: &claim::Row0) {
    let shipper = Arc::new(logship::Shipper::new(
        &job.id,
        row.attempt,
        crate::workspace::job_root(&shared.state, &job.id).join("runner"),
        &shared.me.host,
    ));
    let shipping = {
        let (shared, shipper) = (shared.clone(), shipper.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(logship::SHIP_EVERY).await;
                if let Err(QueryError::Sql { what, message }) = shipper.ship(&shared.session).await
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
}

/// Where the job of stale claim `s` goes: cancelled if that was asked for, failed once it
/// has had `max` attempts, else back to the queue; with the result the first two record.
fn verdict(s: &ends::Stale, reason: &str, max: i32) -> (&'static str, Option<Value>) {
    if s.cancel {
        let r = made_up_result(
            &s.id,
            Outcome::CANCELLED_ON_REQUEST,
            &format!("cancelled by `quest-runner cancel`; {reason}"),
        );
        ("cancelled", Some(r))
    } else if s.attempts >= max {
        let message = format!("{reason}; gave up after {} attempt(s)", s.attempts);
        (
            "failed",
            Some(made_up_result(&s.id, Outcome::Error, &message)),
        )
    } else {
        ("queued", None)
    }
}

impl JobSource for PgQueue {
    type Ticket = Ticket;
    type Error = PgError;

    async fn claim(&self) -> Result<Option<Claimed<Ticket>>, PgError> {
        let shared = &self.shared;
        let generation = shared.signals.generation.load(Ordering::SeqCst);
        if shared.looked_lately(generation) || shared.session.client().is_err() {
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
                    let reason = reason.to_string();
                    tracing::warn!(job = %row.id, "rejected: {reason}");
                    if let Err(e) = claim::reject(&shared.session, &row, &reason).await {
                        tracing::error!(job = %row.id, "rejecting it: {e} (its lease will expire)");
                    }
                    continue;
                }
            };
            set_aside(&shared.state, &job.id, row.attempt - 1);
            hold(shared, &job, &row);
            tracing::info!(job = %job.id, attempt = row.attempt, submitted = %row.submitted_at, "claimed");
            return Ok(Some(Claimed {
                job,
                attempt: row.attempt as u32,
                ticket: Ticket { claim: row.claim },
            }));
        }
    }

    async fn finish(&self, claimed: Claimed<Ticket>, result: JobResult) -> Result<(), PgError> {
        let id = claimed.job.id.clone();
        debug_assert!(!claimed.ticket.claim.is_empty());
        // Before the end is recorded: a host that sees the job ended finds its bundle.
        super::bundle::store(&self.shared, &result).await;
        let (outcome, result) = result_json(&result);
        let state = match outcome {
            Outcome::Succeeded => "done",
            Outcome::Cancelled(_) => "cancelled",
            _ => "failed",
        };
        let end = End::Finish {
            state: state.into(),
            outcome,
            result: bounded(&id, outcome, result),
        };
        self.shared.end_claim(&id, end).await
    }

    async fn release(&self, claimed: Claimed<Ticket>, why: Interruption) -> Result<(), PgError> {
        let id = claimed.job.id.clone();
        let cancelled = made_up_result(
            &id,
            Outcome::CANCELLED_ON_REQUEST,
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

    /// Every host's queued jobs, by the database's clock (one indexed count per look).
    async fn queue_depth(&self) -> Result<Option<crate::serve::metrics::QueueDepth>, String> {
        let statement =
            "SELECT count(*), coalesce(extract(epoch FROM now() - min(queued_at)), 0)::float8
                         FROM quest_runner.jobs WHERE state = 'queued'";
        let row = self
            .shared
            .session
            .run("reading the queue's depth", |c| async move {
                c.query_one(statement, &[]).await
            })
            .await
            .map_err(|e| e.to_string())?;
        let queued: i64 = row.get(0);
        Ok(Some(crate::serve::metrics::QueueDepth {
            queued: u64::try_from(queued).unwrap_or(0),
            oldest_age_seconds: row.get::<_, f64>(1).max(0.0),
        }))
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
        let taker = ends::Taker {
            runner: &me.runner,
            session: &me.session,
            // After an outage, the owners of expired leases get time to reconnect and renew.
            expired: shared
                .session
                .connected_for()
                .is_some_and(|t| t >= shared.grace()),
        };
        let stale = match ends::stale(&shared.session, taker).await {
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
            let (state, result) = verdict(&s, &reason, max);
            let verdict = ends::Verdict {
                state,
                result: result.as_ref(),
                reason: &reason,
            };
            match ends::take_over(&shared.session, &s, verdict, taker).await {
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
