//! The end of a claim: finished (the file moves to its final state's directory) or released
//! back to the queue (the attempt's job directory set aside, so the next one starts clean).

use serde_json::Value;

use super::entry::write_entry;
use super::{now_rfc3339, FsQueue, JobState, QueueError, Ticket};
use crate::run::Outcome;
use crate::serve::source::{Claimed, Interruption};
use crate::util::io::IoContext;

impl FsQueue {
    /// Ends a claim with its result (which ended as `outcome`): the file moves to `done/`,
    /// `failed/` or `cancelled/`.
    pub fn finish_now(
        &self,
        mut claimed: Claimed<Ticket>,
        outcome: Outcome,
        result: Value,
    ) -> Result<(), QueueError> {
        self.try_finish(&mut claimed, outcome, result)
        // The claim lock drops here, after the file has left `running/`.
    }

    /// [`Self::finish_now`] without ending the claim, so that a failure (a full disk) can
    /// be retried.
    pub(super) fn try_finish(
        &self,
        claimed: &mut Claimed<Ticket>,
        outcome: Outcome,
        result: Value,
    ) -> Result<(), QueueError> {
        let id = claimed.job.id.clone();
        let entry = &mut claimed.ticket.entry;
        if let Some(a) = entry.attempts.last_mut() {
            a.ended_at = Some(now_rfc3339());
            a.outcome = Some(outcome.as_str().to_string());
        }
        entry.result = Some(result);
        let target_state = match outcome {
            Outcome::Succeeded => JobState::Done,
            Outcome::Cancelled(_) => JobState::Cancelled,
            _ => JobState::Failed,
        };
        let outcome = outcome.as_str();
        let running = self.path(JobState::Running, &id);
        write_entry(&running, entry)?;
        let target = self.path(target_state, &id);
        std::fs::rename(&running, &target).at("finishing", &running)?;
        let _ = std::fs::remove_file(self.cancel_path(&id));
        tracing::info!(job = %id, state = target_state.name(), %outcome, "finished");
        Ok(())
    }

    /// Gives a claimed job back to the queue; its job directory moves to
    /// `serve/attempts/<id>/<n>` so the next attempt starts clean and this one's logs stay.
    pub fn release_now(
        &self,
        claimed: Claimed<Ticket>,
        why: Interruption,
    ) -> Result<(), QueueError> {
        let id = claimed.job.id.clone();
        let mut entry = claimed.ticket.entry;
        if let Some(a) = entry.attempts.last_mut() {
            a.ended_at = Some(now_rfc3339());
            a.outcome = Some("interrupted".into());
            a.reason = Some(why.reason.clone());
        }
        self.set_aside(&id, claimed.attempt)?;
        let running = self.path(JobState::Running, &id);
        // A full disk, say: the job is requeued all the same (a rename needs no room), and
        // the error says that its attempt's end is not in its history.
        let recorded = write_entry(&running, &entry);
        let queued = self.path(JobState::Queued, &id);
        std::fs::rename(&running, &queued).at("requeueing", &running)?;
        if let Err(e) = recorded {
            return Err(QueueError::Release(format!(
                "requeued job {id:?}, but without the end of its attempt: {e}"
            )));
        }
        tracing::info!(job = %id, reason = %why.reason, "requeued");
        Ok(())
    }

    /// Moves `jobs/<id>` (if any) to `serve/attempts/<id>/<n>`.
    pub(super) fn set_aside(&self, id: &str, attempt: u32) -> Result<(), QueueError> {
        let root = crate::workspace::job_root(&self.state, id);
        if !root.exists() {
            return Ok(());
        }
        let parent = self.sub("serve/attempts").join(id);
        std::fs::create_dir_all(&parent).at("creating", &parent)?;
        let mut n = attempt;
        while parent.join(n.to_string()).exists() {
            n += 1;
        }
        let target = parent.join(n.to_string());
        Ok(std::fs::rename(&root, &target).at("moving aside", &root)?)
    }
}
