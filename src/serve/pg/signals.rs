//! What the session's notifications change: the queue's generation (which wakes the serve
//! loop) and the cancel flag of the claim a cancel names.

use std::sync::atomic::Ordering;

use super::{schema, session, Held, Signals};
use std::collections::HashMap;

impl Signals {
    pub(super) fn bump(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.wake.notify_one();
    }

    pub(super) fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
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
