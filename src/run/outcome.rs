//! How a job's end becomes its result: the agent's end read as an [`Outcome`] and a message
//! (pure), and [`Stop`], the end of a job that stopped before its agent did.

use std::fmt::Display;
use std::path::Path;

use super::agent_process::AgentEnd;
use super::result::{JobResult, Outcome};
use crate::job::Job;
use crate::workspace::WorkspacePaths;

/// Why a job stops before its agent has run to an end: how it ends, and the result's
/// message. Every step before the agent's end returns one.
#[derive(Debug)]
pub(super) struct Stop {
    pub outcome: Outcome,
    pub message: String,
}

impl Stop {
    pub fn new(outcome: Outcome, message: String) -> Stop {
        Stop { outcome, message }
    }

    /// The runner could not do a step (fetch, devShell, I/O): the job ends as an error.
    pub fn error(e: impl Display) -> Stop {
        Stop::new(Outcome::Error, e.to_string())
    }

    pub fn refused(message: String) -> Stop {
        Stop::new(Outcome::Refused, message)
    }
}

/// A step's error message is the job's, and it ends as an error.
impl From<String> for Stop {
    fn from(message: String) -> Stop {
        Stop::new(Outcome::Error, message)
    }
}

/// Records how the agent's run ended in `result`: its exit status or signal, or the limit
/// that stopped it. A failure on a full disk says so, since agents die of it with any status.
pub(super) fn record_end(
    result: &mut JobResult,
    ended: AgentEnd,
    job: &Job,
    paths: &WorkspacePaths,
) {
    match ended {
        AgentEnd::Exited(code) => {
            result.exit_status = Some(code);
            if code == 0 {
                result.outcome = Outcome::Succeeded;
            } else {
                result.end(
                    Outcome::Failed,
                    format!("the agent exited with status {code}"),
                );
            }
        }
        AgentEnd::Signalled(sig) => {
            result.signal = Some(sig);
            let name = crate::util::units::signal_name(sig)
                .map(|n| format!(" ({n})"))
                .unwrap_or_default();
            result.end(
                Outcome::Failed,
                format!("the agent was killed by signal {sig}{name}"),
            );
        }
        AgentEnd::TokensSpent(why) => {
            result.limit_fired = Some("tokens".into());
            result.end(Outcome::Failed, why);
        }
        AgentEnd::TimedOut => {
            let message = format!(
                "timed out after {}",
                humantime::format_duration(job.timeout)
            );
            result.end(Outcome::TimedOut, message);
        }
        AgentEnd::Disk(fired) => {
            result.limit_fired = Some("disk".into());
            result.end(Outcome::Failed, fired.message);
        }
    }
    if result.outcome == Outcome::Failed {
        // A full disk kills agents with an arbitrary status; say so where it applies.
        let clause = crate::disk::space::full_clause(&[&paths.job_dir, &paths.temp_dir]);
        if let Some(message) = result.message.as_mut() {
            message.push_str(&clause);
        }
    }
}

/// A failed job whose model's upstream failed last says so: an agent that gives up on its
/// model exits 1, and the cause was only in the transcript and `model.log`.
pub(super) fn add_model_error(result: &mut JobResult, upstream_error: Option<String>) {
    if let (Outcome::Failed, Some(cause)) = (result.outcome, upstream_error) {
        result.add_to_message(&format!("the model gateway's last upstream error: {cause}"));
    }
}

/// A failed job says the agent's last line on stderr (`agent.log`): an agent that dies at
/// start (a bad config, a tool it cannot find) says why there, and "exited with status 1"
/// alone sent the operator hunting for the file.
pub(super) fn add_agent_log(result: &mut JobResult, log: &Path) {
    if result.outcome != Outcome::Failed {
        return;
    }
    if let Some(line) = crate::util::text::last_line(log) {
        let said = crate::util::text::clip(&line, 300);
        result.add_to_message(&format!("its last line in {}: {said}", log.display()));
    }
}

/// The message of a job whose timeout ran out before its agent started.
pub(super) fn timed_out_while(job: &Job, what: &str) -> String {
    format!(
        "timed out after {} while {what}",
        humantime::format_duration(job.timeout)
    )
}

#[cfg(test)]
#[path = "outcome_tests.rs"]
mod tests;
