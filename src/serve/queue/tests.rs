use super::*;
use crate::run::Outcome;

fn config() -> Config {
    serde_json::from_value(serde_json::json!({
        "accounts": {"main": {"agent": "claude", "api_key_file": "/run/k"}}
    }))
    .unwrap()
}

fn spec(id: Option<&str>) -> JobSpec {
    JobSpec {
        id: id.map(str::to_string),
        repo: "https://example.invalid/r.git".into(),
        rev: "0123456789abcdef0123456789abcdef01234567".into(),
        git_ref: None,
        trust: crate::job::Trust::Trusted,
        agent: crate::job::AgentKind::Claude,
        account: "main".into(),
        prompt: "p".into(),
        timeout: None,
    }
}

fn queue() -> (tempfile::TempDir, FsQueue) {
    let dir = tempfile::tempdir().unwrap();
    let q = FsQueue::open(&StateDir::at(dir.path()), Duration::from_secs(60)).unwrap();
    (dir, q)
}

#[test]
fn submit_refuses_duplicates_bad_ids_and_unknown_accounts() {
    let (_dir, q) = queue();
    let job = q.submit(spec(Some("a")), &config()).unwrap();
    assert_eq!(job.id, "a");
    let err = q.submit(spec(Some("a")), &config()).unwrap_err();
    assert!(matches!(err, QueueError::Duplicate { .. }), "{err}");
    for bad in ["../x", "a/b", "..", ".hidden"] {
        let err = q.submit(spec(Some(bad)), &config()).unwrap_err();
        assert!(err.to_string().contains("\"id\""), "{bad}: {err}");
    }
    let mut other = spec(Some("b"));
    other.account = "nobody".into();
    let err = q.submit(other, &config()).unwrap_err();
    assert!(err.to_string().contains("nobody"), "{err}");
    assert!(err.is_bad_input());
    let generated = q.submit(spec(None), &config()).unwrap();
    assert_eq!(q.find_state(&generated.id), Some(JobState::Queued));
}

#[test]
fn two_queues_on_one_state_dir_claim_each_job_once() {
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir::at(dir.path());
    let q = FsQueue::open(&state, Duration::from_secs(60)).unwrap();
    for i in 0..40 {
        q.submit(spec(Some(&format!("j{i}"))), &config()).unwrap();
    }
    let claimers: Vec<_> = (0..4)
        .map(|_| {
            let state = state.clone();
            std::thread::spawn(move || {
                let q = FsQueue::open(&state, Duration::from_secs(60)).unwrap();
                let mut got = Vec::new();
                while let Some(c) = q.claim_now().unwrap() {
                    got.push(c.job.id.clone());
                    q.finish_now(
                        c,
                        Outcome::Succeeded,
                        made_up_result("x", Outcome::Succeeded, ""),
                    )
                    .unwrap();
                }
                got
            })
        })
        .collect();
    let mut all: Vec<String> = claimers
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    all.sort();
    let before = all.len();
    all.dedup();
    assert_eq!(before, all.len(), "a job was claimed twice");
    assert_eq!(all.len(), 40);
    assert_eq!(
        q.list()
            .iter()
            .filter(|l| l.state == JobState::Done)
            .count(),
        40
    );
}

#[test]
fn foreign_files_are_claimed_or_rejected_with_a_reason() {
    let (dir, q) = queue();
    let queued = dir.path().join("queue");
    std::fs::write(queued.join("broken.json"), "{not json").unwrap();
    std::fs::write(queued.join(".partial.json"), "{").unwrap();
    let mut bare = serde_json::to_value(spec(None)).unwrap();
    std::fs::write(queued.join("plain.json"), bare.to_string()).unwrap();
    bare["id"] = "other".into();
    std::fs::write(queued.join("mismatch.json"), bare.to_string()).unwrap();
    let claimed = q.claim_now().unwrap().expect("the plain job");
    assert_eq!(claimed.job.id, "plain");
    assert!(q.claim_now().unwrap().is_none());
    let rejected: Vec<_> = q
        .list()
        .into_iter()
        .filter(|l| l.state == JobState::Rejected)
        .collect();
    assert_eq!(rejected.len(), 2, "{rejected:?}");
    assert!(rejected
        .iter()
        .any(|l| l.message.as_deref().unwrap_or("").contains("differs")));
    assert!(
        queued.join(".partial.json").exists(),
        "files being written are left alone"
    );
}

#[test]
fn release_requeues_and_recover_gives_up_after_max_attempts() {
    let (dir, q) = queue();
    q.submit(spec(Some("r")), &config()).unwrap();
    let c = q.claim_now().unwrap().unwrap();
    std::fs::create_dir_all(dir.path().join("jobs/r/runner")).unwrap();
    q.release_now(
        c,
        Interruption {
            reason: "interrupted".into(),
        },
    )
    .unwrap();
    assert!(dir.path().join("serve/attempts/r/1/runner").exists());
    assert!(!dir.path().join("jobs/r").exists());
    // A claim whose runner "dies": its lock is released, its file stays in running/.
    let c = q.claim_now().unwrap().unwrap();
    assert_eq!(c.attempt, 2);
    drop(c.ticket._lock);
    let report = q.recover_now(2).unwrap();
    assert_eq!(report.failed, vec!["r".to_string()]);
    let (state, entry) = q.show("r").unwrap();
    assert_eq!(state, JobState::Failed);
    assert_eq!(entry.attempts.len(), 2);
    let message = entry.result.unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains("died"), "{message}");
}

#[test]
fn cancel_dequeues_and_gc_removes_old_jobs() {
    let (dir, q) = queue();
    q.submit(spec(Some("c")), &config()).unwrap();
    assert_eq!(q.cancel("c").unwrap(), CancelOutcome::Dequeued);
    assert_eq!(q.find_state("c"), Some(JobState::Cancelled));
    assert!(matches!(
        q.cancel("c").unwrap_err(),
        QueueError::AlreadyFinished { .. }
    ));
    assert!(matches!(
        q.cancel("zz").unwrap_err(),
        QueueError::NotFound(_)
    ));
    std::fs::create_dir_all(dir.path().join("jobs/c")).unwrap();
    assert!(q.gc(Duration::from_secs(3600)).unwrap().is_empty());
    assert_eq!(q.gc(Duration::ZERO).unwrap(), vec!["c".to_string()]);
    assert!(!dir.path().join("jobs/c").exists());
    assert_eq!(q.find_state("c"), None);
}

/// A finished job's listing reads its stored result as what it is: a run's (with its model
/// use), a made-up one (outcome and message only), or a run's whose other fields this
/// version cannot read (outcome and message still shown).
#[test]
fn the_listing_reads_each_kind_of_stored_result() {
    let (_dir, q) = queue();
    let mut ran =
        crate::run::JobResult::new(&spec(Some("a")).validate(Duration::from_secs(60)).unwrap());
    ran.end(Outcome::Failed, "it failed".into());
    ran.usage = Some(crate::gateway::Usage {
        requests: 3,
        ..Default::default()
    });
    let ran = serde_json::to_value(&ran).unwrap();
    let mut unreadable = ran.clone();
    unreadable["devshell"] = serde_json::json!("from a later version");
    let results = [
        ("a", Outcome::Failed, ran),
        (
            "b",
            Outcome::CANCELLED_ON_REQUEST,
            made_up_result("b", Outcome::CANCELLED_ON_REQUEST, "cancelled"),
        ),
        ("c", Outcome::Failed, unreadable),
    ];
    for (id, outcome, result) in results {
        q.submit(spec(Some(id)), &config()).unwrap();
        let c = q.claim_now().unwrap().unwrap();
        q.finish_now(c, outcome, result).unwrap();
    }
    let listed = q.list();
    let row = |id: &str| listed.iter().find(|l| l.id == id).unwrap();
    assert_eq!(row("a").outcome.as_deref(), Some("failed"));
    assert_eq!(row("a").message.as_deref(), Some("it failed"));
    assert_eq!(row("a").usage.as_ref().map(|u| u.requests), Some(3));
    assert_eq!(row("b").state, JobState::Cancelled);
    assert_eq!(row("b").outcome.as_deref(), Some("cancelled"));
    assert_eq!(row("b").message.as_deref(), Some("cancelled"));
    assert!(row("b").usage.is_none());
    assert_eq!(row("c").outcome.as_deref(), Some("failed"));
    assert_eq!(row("c").message.as_deref(), Some("it failed"));
}

#[test]
fn a_cancel_cut_short_between_its_write_and_its_move_is_finished_by_the_next_claim() {
    let (_dir, q) = queue();
    q.submit(spec(Some("cut")), &config()).unwrap();
    // What a cancel that crashed after its first step leaves: the result in the queued file.
    let queued = q.path(JobState::Queued, "cut");
    let mut entry = entry::read_entry(&queued).unwrap();
    entry.result = Some(made_up_result(
        "cut",
        Outcome::CANCELLED_ON_REQUEST,
        "cancelled",
    ));
    entry::write_entry(&queued, &entry).unwrap();
    q.submit(spec(Some("next")), &config()).unwrap();
    let claimed = q.claim_now().unwrap().expect("the next job");
    assert_eq!(claimed.job.id, "next");
    assert_eq!(q.find_state("cut"), Some(JobState::Cancelled));
    let (_, shown) = q.show("cut").unwrap();
    assert!(shown.attempts.is_empty(), "it never ran");
}
