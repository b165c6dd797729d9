//! Where `serve` gets its jobs from, as one small trait.
//!
//! Execution (the serve loop, [`crate::run::Runner`]) only ever talks to a [`JobSource`]; the
//! on-disk queue ([`super::queue::FsQueue`]) is the first implementation. Another intake — a
//! forge's job API, say — implements the same five calls and needs no change to execution
//! ([`JobSource::hold_idle`] and [`JobSource::changed`] have defaults). The PostgreSQL queue
//! ([`super::pg::PgQueue`]) is the second.
//!
//! The contract, which the serve loop relies on:
//! - [`JobSource::claim`] hands a job to exactly one runner process, even when several poll
//!   the same source; a claimed job stays claimed until it is finished or released, or until
//!   its runner dies (then [`JobSource::recover`] of the next runner gives it back).
//! - Every claim ends in exactly one of [`JobSource::finish`] (the job ended: its result is
//!   final) or [`JobSource::release`] (the job was interrupted and should run again).
//! - Calls are cheap enough to make from the serve loop several times a second; a source that
//!   talks to a network should cache or rate-limit on its own.

use std::future::Future;

use crate::job::Job;
use crate::run::{JobResult, Outcome};

/// A job handed to this runner, with the source's own handle on the claim.
pub struct Claimed<T> {
    pub job: Job,
    /// 1 for the first run, 2 for the first retry, …
    pub attempt: u32,
    /// What the source needs to finish or release the claim (a lock, an API lease, …).
    pub ticket: T,
}

/// Why a job is given back instead of finished.
#[derive(Debug, Clone)]
pub struct Interruption {
    /// One line for the job's history, e.g. "interrupted: the runner got SIGTERM".
    pub reason: String,
}

/// What a recovery on start found and did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// Ids of jobs given back to be run again.
    pub requeued: Vec<String>,
    /// Ids of jobs that ran out of attempts and were failed.
    pub failed: Vec<String>,
}

/// An intake of jobs. See the module documentation for the contract.
pub trait JobSource: Send + Sync + 'static {
    /// The source's handle on one claim.
    type Ticket: Send + 'static;
    type Error: std::error::Error + Send + Sync + 'static;

    /// Takes the next job for this runner, or `None` when there is none right now. Invalid
    /// jobs are rejected by the source (with a message where its submitter can see it), not
    /// returned.
    fn claim(
        &self,
    ) -> impl Future<Output = Result<Option<Claimed<Self::Ticket>>, Self::Error>> + Send;

    /// Records the job's final result and ends the claim. A source that stores the result
    /// as JSON stores [`result_json`] of it.
    fn finish(
        &self,
        claimed: Claimed<Self::Ticket>,
        result: JobResult,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Gives the job back to run again later, recording why, and ends the claim.
    fn release(
        &self,
        claimed: Claimed<Self::Ticket>,
        why: Interruption,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Whether someone asked for this claimed job to be cancelled.
    fn cancel_requested(&self, claimed_id: &str) -> impl Future<Output = bool> + Send;

    /// On start: gives back (or fails, after `max_attempts`) jobs whose runner died while
    /// running them, after stopping what is left of them.
    fn recover(
        &self,
        max_attempts: u32,
    ) -> impl Future<Output = Result<Recovered, Self::Error>> + Send;

    /// Resolves when the source may have something new for this runner — a job queued, a
    /// cancel asked for — so that the serve loop need not wait for its next poll. The default
    /// never resolves: the loop polls.
    fn changed(&self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }

    /// How many jobs wait and how long the oldest has, for the metrics; `Err` when the
    /// queue cannot be read (then `serve` is not ready). The default: a source that cannot
    /// tell reports nothing.
    fn queue_depth(
        &self,
    ) -> impl Future<Output = Result<Option<super::metrics::QueueDepth>, String>> + Send {
        std::future::ready(Ok(None))
    }

    /// If no runner runs job `id` now, a guard that keeps every runner from starting it
    /// until the guard is dropped; `None` if one runs it. On start, `serve` removes what a
    /// dead runner left of a job outside the source (its cgroup) only under this guard, so
    /// it never touches a live runner's job. The default says "someone may": nothing is
    /// swept for a source that cannot tell.
    fn hold_idle(
        &self,
        id: &str,
    ) -> impl Future<Output = Option<Box<dyn std::any::Any + Send>>> + Send {
        let _ = id;
        std::future::ready(None)
    }
}

/// A result object for a job the runner ended without running it to the end, as every
/// source stores it.
pub fn made_up_result(id: &str, outcome: Outcome, message: &str) -> serde_json::Value {
    serde_json::json!({"job_id": id, "outcome": outcome.as_str(), "message": message})
}

/// `result` as the JSON object a source stores (the same as `result.json`), and the outcome
/// to record with it: the result's own or, if it cannot be written as JSON (a path that is
/// not UTF-8), an error, with a made-up result that says why.
pub fn result_json(result: &JobResult) -> (Outcome, serde_json::Value) {
    match serde_json::to_value(result) {
        Ok(value) => (result.outcome, value),
        Err(e) => (
            Outcome::Error,
            made_up_result(
                &result.job_id,
                Outcome::Error,
                &format!("unserialisable result: {e}"),
            ),
        ),
    }
}
