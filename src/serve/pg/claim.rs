//! Taking a job: one statement that picks, locks, claims and records the attempt.
//!
//! Exactly one runner gets a job: the pick is `FOR UPDATE SKIP LOCKED`, so concurrent
//! claimers skip each other's rows instead of waiting, and the claim sets a fresh random
//! token that every later change of the job must name (a runner whose lease was taken over
//! can no longer finish the job).
//!
//! Cache-aware, without starving anyone: among the [`WINDOW`] oldest queued jobs this runner
//! has the account for, it takes the one that has waited longest, counting a job whose
//! revision's devShell it has cached as if it had waited [`WARM_DEVSHELL`] longer, and one
//! whose repository it has cloned [`WARM_CLONE`] longer. A job no runner is warm for is thus
//! passed over only by jobs submitted less than a minute after it, and runners that are not
//! warm for those take it meanwhile.

use std::time::Duration;

use tokio_postgres::Row;

use super::session::{QueryError, Session};
use super::warm::Warm;

/// How many of the oldest queued jobs a claim chooses among.
pub const WINDOW: i64 = 256;
/// The head start of a job whose devShell this runner has cached.
pub const WARM_DEVSHELL: Duration = Duration::from_secs(60);
/// The head start of a job whose repository this runner has cloned.
pub const WARM_CLONE: Duration = Duration::from_secs(20);

/// `repo`'s hash as [`crate::workspace::bare_clone_path`] names the clone: the first ten bytes
/// of its SHA-256, in hex.
pub const REPO_HASH_SQL: &str = "substr(encode(sha256(convert_to(j.repo, 'UTF8')), 'hex'), 1, 20)";

/// Who claims.
pub struct Claimer<'a> {
    pub runner: &'a str,
    pub session: &'a str,
    pub host: &'a str,
    pub pid: i32,
    pub accounts: &'a [String],
    pub lease: Duration,
}

/// A claimed row, not checked yet.
pub struct Row0 {
    pub id: String,
    pub spec: String,
    pub attempt: i32,
    pub claim: String,
    pub submitted_at: String,
}

/// RFC 3339, UTC, to the second: how timestamps leave the database.
pub fn rfc3339(column: &str) -> String {
    format!("to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')")
}

/// Claims the best job for `who`, if any.
pub async fn claim(
    session: &Session,
    who: &Claimer<'_>,
    warm: &Warm,
) -> Result<Option<Row0>, QueryError> {
    let statement = format!(
        "WITH candidates AS (
             SELECT id FROM quest_runner.jobs
             WHERE state = 'queued' AND (account IS NULL OR account = ANY($1))
             ORDER BY seq LIMIT {WINDOW}
         ), pick AS (
             SELECT j.id FROM quest_runner.jobs j
             WHERE j.id IN (SELECT id FROM candidates) AND j.state = 'queued'
             ORDER BY extract(epoch FROM now() - j.queued_at)::float8
                      + CASE WHEN j.rev = ANY($2) THEN $4::float8 ELSE 0 END
                      + CASE WHEN {REPO_HASH_SQL} = ANY($3) THEN $5::float8 ELSE 0 END DESC,
                      j.seq
             LIMIT 1
             FOR UPDATE OF j SKIP LOCKED
         ), claimed AS (
             UPDATE quest_runner.jobs j
             SET state = 'running', attempts = j.attempts + 1,
                 claim = gen_random_uuid()::text, runner = $6, session = $7,
                 lease_until = now() + $8::float8 * interval '1 second'
             FROM pick WHERE j.id = pick.id
             RETURNING j.id, j.spec, j.attempts, j.claim, j.submitted_at
         ), attempt AS (
             INSERT INTO quest_runner.attempts (job_id, number, host, pid, runner, session)
             SELECT id, attempts, $9, $10, $6, $7 FROM claimed
         )
         SELECT id, spec::text, attempts, claim, {} FROM claimed",
        rfc3339("submitted_at")
    );
    let devshell = WARM_DEVSHELL.as_secs_f64();
    let clone = WARM_CLONE.as_secs_f64();
    let lease = who.lease.as_secs_f64();
    let row: Option<Row> = session
        .run("claiming a job", |c| async move {
            c.query_opt(
                &statement,
                &[
                    &who.accounts,
                    &warm.revs,
                    &warm.repos,
                    &devshell,
                    &clone,
                    &who.runner,
                    &who.session,
                    &lease,
                    &who.host,
                    &who.pid,
                ],
            )
            .await
        })
        .await?;
    Ok(row.map(|r| Row0 {
        id: r.get(0),
        spec: r.get(1),
        attempt: r.get(2),
        claim: r.get(3),
        submitted_at: r.get(4),
    }))
}

/// Moves a claimed row that is not a valid job aside: `rejected`, with the reason (`jobs`
/// lists it).
pub async fn reject(session: &Session, row: &Row0, reason: &str) -> Result<bool, QueryError> {
    let n: i64 = session
        .run("rejecting an invalid job", |c| async move {
            c.query_one(
                "WITH j AS (
                     UPDATE quest_runner.jobs
                     SET state = 'rejected', reason = $3, finished_at = now(),
                         claim = NULL, runner = NULL, session = NULL, lease_until = NULL
                     WHERE id = $1 AND claim = $2
                     RETURNING id
                 ), a AS (
                     UPDATE quest_runner.attempts
                     SET ended_at = now(), outcome = 'rejected', reason = $3
                     WHERE job_id IN (SELECT id FROM j) AND number = $4
                 )
                 SELECT count(*) FROM j",
                &[&row.id, &row.claim, &reason, &row.attempt],
            )
            .await
        })
        .await?
        .get(0);
    Ok(n == 1)
}
