use super::*;
use crate::job::JobSpec;

/// A valid job for the tests that need one (serve's tests too).
pub(crate) fn job() -> Job {
    let spec = serde_json::json!({
        "id": "j1",
        "repo": "https://example.org/r.git",
        "rev": "0123456789abcdef0123456789abcdef01234567",
        "trust": "trusted",
        "agent": "claude",
        "account": "main",
        "prompt": "p",
    });
    JobSpec::from_json(&spec.to_string())
        .unwrap()
        .validate(std::time::Duration::from_secs(60))
        .unwrap()
}

/// The fields only `serve` fills stay out of the file when empty, so a job run by
/// `quest-runner run` writes the keys it always wrote, in their order.
#[test]
fn a_run_result_has_the_keys_it_always_had() {
    let text = serde_json::to_string_pretty(&JobResult::new(&job())).unwrap();
    let keys: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("  \"")?.split_once('"').map(|(k, _)| k))
        .collect();
    assert_eq!(
        keys,
        [
            "job_id",
            "outcome",
            "agent",
            "rev",
            "exit_status",
            "signal",
            "duration_ms",
            "head",
            "commits",
            "uncommitted",
            "transcript",
            "devshell",
            "agent_started_ms",
            "message",
            "network",
            // Added last, so readers of the older keys are unaffected: what `export` and
            // `push` find the job's work by.
            "repo",
            "trust"
        ]
    );
}

#[test]
fn serve_fields_are_saved_when_filled_and_notes_follow_the_message() {
    let mut result = JobResult::new(&job());
    result.end(Outcome::Failed, "the agent was killed by signal 9".into());
    result.add_to_message("limits in force: memory.max=1G");
    result.limit_fired = Some("memory".into());
    result.cpu_throttled_ms = Some(12);
    result.limits = Some("memory.max=1G".into());
    let value = serde_json::to_value(&result).unwrap();
    assert_eq!(value["outcome"], "failed");
    assert_eq!(
        value["message"],
        "the agent was killed by signal 9; limits in force: memory.max=1G"
    );
    assert_eq!(value["limit_fired"], "memory");
    assert_eq!(value["cpu_throttled_ms"], 12);
    assert_eq!(value["limits"], "memory.max=1G");

    let mut fresh = JobResult::new(&job());
    fresh.add_to_message("only a note");
    assert_eq!(fresh.message.as_deref(), Some("only a note"));
}

/// What is saved reads back as the same result: writing it again gives the same JSON.
#[test]
fn a_saved_result_reads_back_as_it_was_saved() {
    let mut result = JobResult::new(&job());
    result.end(Outcome::Failed, "the agent was killed by signal 9".into());
    result.limit_fired = Some("memory".into());
    result.cpu_throttled_ms = Some(12);
    result.commits = vec!["c1".into()];
    let saved = serde_json::to_value(&result).unwrap();
    let read: JobResult = serde_json::from_value(saved.clone()).unwrap();
    assert_eq!(serde_json::to_value(&read).unwrap(), saved);
    assert_eq!(read.limit_fired.as_deref(), Some("memory"));

    for outcome in [
        Outcome::Succeeded,
        Outcome::Failed,
        Outcome::TimedOut,
        Outcome::Cancelled(Cancel::Interrupt),
        Outcome::Refused,
        Outcome::Error,
    ] {
        let read: Outcome = serde_json::from_value(serde_json::to_value(outcome).unwrap()).unwrap();
        assert_eq!(read.as_str(), outcome.as_str());
    }
    assert!(serde_json::from_str::<Outcome>("\"exploded\"").is_err());
}

/// A result saved by the first runner (before `signal`, `uncommitted`, `network`, the
/// limits report and `usage` existed) still reads, with those empty.
#[test]
fn a_result_saved_before_later_fields_still_reads() {
    let old = serde_json::json!({
        "job_id": "j1",
        "outcome": "succeeded",
        "agent": "claude",
        "rev": "0123456789abcdef0123456789abcdef01234567",
        "exit_status": 0,
        "duration_ms": 1200,
        "head": "0123456789abcdef0123456789abcdef01234567",
        "commits": [],
        "transcript": "/state/jobs/j1/transcript.jsonl",
        "devshell": {"cache": "hit", "key": "k", "present": true},
        "message": null,
    });
    let read: JobResult = serde_json::from_value(old).unwrap();
    assert_eq!(read.outcome, Outcome::Succeeded);
    assert_eq!(read.duration_ms, 1200);
    assert!(read.uncommitted.is_empty() && read.network.is_none() && read.usage.is_none());
    assert!(read.limit_fired.is_none() && read.signal.is_none());
}
