use super::*;
use crate::job::JobSpec;

fn job() -> Job {
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
            "network"
        ]
    );
}

#[test]
fn serve_fields_are_saved_when_filled_and_notes_follow_the_message() {
    let mut result = JobResult::new(&job());
    result.end(Outcome::Failed, "the agent was killed by signal 9".into());
    result.add_to_message("limits in force: memory.max=1G");
    result.limit_fired = Some("memory");
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
