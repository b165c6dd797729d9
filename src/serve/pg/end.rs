//! Recording the end of a claim (finished, or released back to the queue): retried while
//! the database is unreachable, and kept on disk meanwhile so a restart does not lose it.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::ends::{self, Recorded};
use super::logship::Shipper;
use super::session::{self, QueryError};
use super::spool::{self, End, Pending};
use super::{hostname, PgError, Shared, RESULT_LIMIT};
use crate::run::Outcome;
use crate::serve::source::made_up_result;

impl Shared {
    /// Records `end` of a claim this process holds: retried with backoff while the database
    /// is unreachable (and kept on disk meanwhile), until it is recorded or found lost.
    pub(super) async fn end_claim(&self, id: &str, end: End) -> Result<(), PgError> {
        let (claim, attempt, shipper) = self.start_finishing(id)?;
        let pending = Pending {
            id: id.to_string(),
            claim,
            attempt,
            end,
            ended_at: Some(spool::now()),
        };
        let (outcome, spooled) = self.record_until_reachable(&pending, &shipper).await;
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

    /// Marks the claim of `id` as finishing (a renewal that no longer finds it is then no
    /// loss) and stops its periodic log shipping; returns its token, attempt and shipper.
    fn start_finishing(&self, id: &str) -> Result<(String, i32, Arc<Shipper>), PgError> {
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
        Ok((h.claim.clone(), h.attempt, h.shipper.clone()))
    }

    /// Ships the last of the job's output, then records its end; both again, with backoff,
    /// while the database is unreachable, the end kept on disk from the first failure on.
    /// Also says whether it was kept there.
    async fn record_until_reachable(
        &self,
        pending: &Pending,
        shipper: &Shipper,
    ) -> (Result<Recorded, PgError>, bool) {
        let id = pending.id.as_str();
        let mut backoff = Duration::from_millis(200);
        let mut spooled = false;
        loop {
            // The last of the output first: `logs --follow` stops once the job has ended.
            let shipped = shipper.ship(&self.session).await;
            let recorded = match shipped {
                Ok(()) | Err(QueryError::Sql { .. }) => {
                    if let Err(e) = &shipped {
                        tracing::warn!(job = %id, "storing the agent's output: {e}");
                    }
                    ends::record(&self.session, pending).await
                }
                Err(e) => Err(e),
            };
            match recorded {
                Ok(r) => return (Ok(r), spooled),
                Err(QueryError::Unavailable(why)) => {
                    if !spooled {
                        self.keep_on_disk(pending, &why);
                        spooled = true;
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(session::MAX_BACKOFF);
                }
                Err(e) => return (Err(PgError::from(e)), spooled),
            }
        }
    }

    /// Keeps an end the database could not take in the spool, for a restarted runner to
    /// record if this one dies first.
    fn keep_on_disk(&self, pending: &Pending, why: &session::Unavailable) {
        let id = pending.id.as_str();
        match spool::write(&self.state, pending) {
            Ok(path) => tracing::error!(job = %id,
                "recording the job's end: {why}; kept in {} and retried until the database is back",
                path.display()),
            Err(e) => tracing::error!(job = %id,
                "recording the job's end: {why}; retried until the database is back (keeping it on disk failed: {e})"),
        }
    }
}

/// `result` (which ended as `outcome`), or a made-up result saying it was too large to store.
pub(super) fn bounded(id: &str, outcome: Outcome, result: Value) -> Value {
    let size = serde_json::to_vec(&result).map_or(usize::MAX, |v| v.len());
    if size <= RESULT_LIMIT {
        return result;
    }
    made_up_result(
        id,
        outcome,
        &format!(
            "the result ({size} bytes) is larger than the queue keeps ({RESULT_LIMIT}); \
             the whole of it is result.json in the job's directory on {}",
            hostname()
        ),
    )
}
