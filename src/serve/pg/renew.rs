//! Lease renewal: how a live runner keeps its claims, learns of cancels sent while it was
//! cut off, and finds out that a claim was taken over.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::ends;
use super::session::QueryError;
use super::Shared;

/// How long an idle runner goes without telling the database it is alive.
pub(super) const HEARTBEAT: Duration = Duration::from_secs(300);

/// The renewer: every third of the lease (at once after a reconnection), extends the
/// leases of this process's claims and learns of cancels; a claim the database no longer
/// has for this runner is lost, and its job is stopped.
pub(super) async fn renew_loop(shared: Arc<Shared>) {
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
