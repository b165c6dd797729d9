//! How claims end and live on: the statements that finish, give back, renew and take over
//! claims. Each is one statement (a data-modifying `WITH`), so it applies whole or not at
//! all, and each names the claim's token, so it applies only while that claim holds: a
//! runner that lost its lease (cut off from the database longer than it lasted, while
//! another runner took the job over) cannot overwrite the job's new attempt.

use std::time::Duration;

use super::session::{QueryError, Session};
use super::spool::{End, Pending};

/// What recording an end did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// The job is now in this state.
    Applied(String),
    /// The claim was no longer this runner's: nothing changed.
    Lost,
}

/// Records the end of a claim, at the time the job ended (an end kept while the database
/// was unreachable is recorded late). A job given back keeps its place in the queue
/// (`queued_at`): it was submitted before the jobs queued since.
pub async fn record(session: &Session, pending: &Pending) -> Result<Recorded, QueryError> {
    let Pending {
        id,
        claim,
        attempt,
        end,
        ..
    } = pending;
    let age = pending.age().as_secs_f64();
    let row = match end {
        End::Finish {
            state,
            outcome,
            result,
        } => {
            let outcome = outcome.as_str();
            session
                .run("recording the job's end", |c| async move {
                    c.query_opt(
                        "WITH j AS (
                             UPDATE quest_runner.jobs
                             SET state = $3, result = $4,
                                 finished_at = now() - $7::float8 * interval '1 second',
                                 claim = NULL, runner = NULL, session = NULL, lease_until = NULL
                             WHERE id = $1 AND claim = $2
                             RETURNING id, state
                         ), a AS (
                             UPDATE quest_runner.attempts
                             SET ended_at = now() - $7::float8 * interval '1 second', outcome = $5
                             WHERE job_id IN (SELECT id FROM j) AND number = $6
                         )
                         SELECT state FROM j",
                        &[id, claim, state, result, &outcome, attempt, &age],
                    )
                    .await
                })
                .await?
        }
        End::Release { reason, cancelled } => {
            session
                .run("giving the job back", |c| async move {
                    c.query_opt(
                        "WITH j AS (
                             UPDATE quest_runner.jobs
                             SET state = CASE WHEN cancel_requested_at IS NULL
                                              THEN 'queued' ELSE 'cancelled' END,
                                 result = CASE WHEN cancel_requested_at IS NULL
                                               THEN NULL ELSE $3::jsonb END,
                                 finished_at = CASE WHEN cancel_requested_at IS NULL THEN NULL
                                     ELSE now() - $6::float8 * interval '1 second' END,
                                 claim = NULL, runner = NULL, session = NULL, lease_until = NULL
                             WHERE id = $1 AND claim = $2
                             RETURNING id, state
                         ), a AS (
                             UPDATE quest_runner.attempts
                             SET ended_at = now() - $6::float8 * interval '1 second',
                                 outcome = 'interrupted', reason = $4
                             WHERE job_id IN (SELECT id FROM j) AND number = $5
                         )
                         SELECT state FROM j",
                        &[id, claim, cancelled, reason, attempt, &age],
                    )
                    .await
                })
                .await?
        }
    };
    Ok(match row {
        Some(row) => Recorded::Applied(row.get(0)),
        None => Recorded::Lost,
    })
}

/// What a renewal found.
pub struct Renewed {
    /// Claims still held, and whether a cancel was asked for each.
    pub held: Vec<(String, bool)>,
}

/// Extends the leases of `claims` by `lease` from now, and notes that this runner's session
/// is alive.
pub async fn renew(
    session: &Session,
    claims: &[String],
    lease: Duration,
    me: &str,
) -> Result<Renewed, QueryError> {
    let lease = lease.as_secs_f64();
    let rows = session
        .run("renewing leases", |c| async move {
            c.query(
                "WITH renewed AS (
                     UPDATE quest_runner.jobs
                     SET lease_until = now() + $2::float8 * interval '1 second'
                     WHERE claim = ANY($1) AND state = 'running'
                     RETURNING claim, cancel_requested_at IS NOT NULL AS cancel
                 ), seen AS (
                     UPDATE quest_runner.runners SET seen_at = now() WHERE session = $3
                 )
                 SELECT claim, cancel FROM renewed",
                &[&claims, &lease, &me],
            )
            .await
        })
        .await?;
    Ok(Renewed {
        held: rows.iter().map(|r| (r.get(0), r.get(1))).collect(),
    })
}

/// A running job whose runner is gone.
pub struct Stale {
    pub id: String,
    pub claim: String,
    pub attempts: i32,
    pub cancel: bool,
    /// Where its last attempt ran.
    pub host: String,
    pub pid: i32,
}

/// The runner looking for stale claims, and how far it may reach: the claims of its own
/// state directory's earlier processes always, other runners' expired leases only when
/// `expired` (after an outage their owners get time to reconnect first).
#[derive(Debug, Clone, Copy)]
pub struct Taker<'a> {
    /// This state directory's runner id.
    pub runner: &'a str,
    /// This process's session.
    pub session: &'a str,
    /// Whether other runners' expired leases may be taken over.
    pub expired: bool,
}

/// Where a stale claim's job goes: back to `queued`, or to `failed` or `cancelled` with
/// `result`; its attempt ends as `lost` with `reason`.
#[derive(Debug, Clone, Copy)]
pub struct Verdict<'a> {
    pub state: &'a str,
    pub result: Option<&'a serde_json::Value>,
    pub reason: &'a str,
}

/// Running jobs whose claim is stale: those of this runner's earlier processes (`runner` is
/// this state directory's id, and its lock says no other process of it lives), and, when
/// `expired` is allowed, those whose lease ran out.
pub async fn stale(session: &Session, taker: Taker<'_>) -> Result<Vec<Stale>, QueryError> {
    let Taker {
        runner,
        session: me,
        expired,
    } = taker;
    let rows = session
        .run("looking for jobs whose runner is gone", |c| async move {
            c.query(
                "SELECT j.id, j.claim, j.attempts, j.cancel_requested_at IS NOT NULL,
                        coalesce(a.host, '?'), coalesce(a.pid, 0)
                 FROM quest_runner.jobs j
                 LEFT JOIN quest_runner.attempts a ON a.job_id = j.id AND a.number = j.attempts
                 WHERE j.state = 'running'
                   AND ((j.runner = $1 AND j.session <> $2) OR ($3 AND j.lease_until < now()))
                 ORDER BY j.seq",
                &[&runner, &me, &expired],
            )
            .await
        })
        .await?;
    Ok(rows
        .iter()
        .map(|r| Stale {
            id: r.get(0),
            claim: r.get(1),
            attempts: r.get(2),
            cancel: r.get(3),
            host: r.get(4),
            pid: r.get(5),
        })
        .collect())
}

/// Takes over a stale claim: the job goes to `state` (queued, failed or cancelled, with
/// `result` for the last two), its attempt ends as `lost` with `reason`. Fenced by the
/// token and by the staleness itself: a runner that renewed meanwhile keeps its job. A
/// requeued job keeps its `queued_at`, and so its place in the queue.
pub async fn take_over(
    session: &Session,
    stale: &Stale,
    verdict: Verdict<'_>,
    taker: Taker<'_>,
) -> Result<bool, QueryError> {
    let Verdict {
        state,
        result,
        reason,
    } = verdict;
    let Taker {
        runner,
        session: me,
        expired,
    } = taker;
    let row = session
        .run("requeueing a job whose runner is gone", |c| async move {
            c.query_opt(
                "WITH j AS (
                     UPDATE quest_runner.jobs
                     SET state = $3, result = $4,
                         finished_at = CASE WHEN $3 = 'queued' THEN NULL ELSE now() END,
                         claim = NULL, runner = NULL, session = NULL, lease_until = NULL
                     WHERE id = $1 AND claim = $2 AND state = 'running'
                       AND ((runner = $6 AND session <> $7) OR ($8 AND lease_until < now()))
                     RETURNING id, attempts
                 ), a AS (
                     UPDATE quest_runner.attempts att
                     SET ended_at = now(), outcome = 'lost', reason = $5
                     FROM j WHERE att.job_id = j.id AND att.number = j.attempts
                 )
                 SELECT id FROM j",
                &[
                    &stale.id,
                    &stale.claim,
                    &state,
                    &result,
                    &reason,
                    &runner,
                    &me,
                    &expired,
                ],
            )
            .await
        })
        .await?;
    Ok(row.is_some())
}
