//! Recording the end of a claim (finished, or released back to the queue): retried while
//! the database is unreachable, and kept on disk meanwhile so a restart does not lose it.

use std::time::Duration;

use serde_json::Value;

use super::ends::{self, Recorded};
use super::session::{self, QueryError};
use super::spool::{self, End, Pending};
use super::{hostname, PgError, Shared, RESULT_LIMIT};
use crate::serve::queue::made_up_result;

impl Shared {
    /// Records `end` of a claim this process holds: retried with backoff while the database
    /// is unreachable (and kept on disk meanwhile), until it is recorded or found lost.
    pub(super) async fn end_claim(&self, id: &str, end: End) -> Result<(), PgError> {
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
}

/// `result`, or a made-up result saying it was too large to store.
pub(super) fn bounded(id: &str, result: Value) -> Value {
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
