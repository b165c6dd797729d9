use super::*;

#[test]
fn a_failed_agent_names_the_upstreams_failure_and_other_ends_do_not() {
    let job = crate::run::result::tests::job();
    let cause =
        || Some("https://api.anthropic.com did not answer: refused (502 to the agent)".into());
    let mut failed = JobResult::new(&job);
    failed.end(Outcome::Failed, "the agent exited with status 1".into());
    add_model_error(&mut failed, cause());
    assert_eq!(
        failed.message.as_deref(),
        Some(
            "the agent exited with status 1; the model gateway's last upstream error: \
             https://api.anthropic.com did not answer: refused (502 to the agent)"
        )
    );
    let mut succeeded = JobResult::new(&job);
    succeeded.outcome = Outcome::Succeeded;
    add_model_error(&mut succeeded, cause());
    assert_eq!(succeeded.message, None);
    let mut clean = JobResult::new(&job);
    clean.end(Outcome::Failed, "the agent exited with status 1".into());
    add_model_error(&mut clean, None);
    assert_eq!(
        clean.message.as_deref(),
        Some("the agent exited with status 1")
    );
}

#[test]
fn a_failed_agent_names_its_last_line_on_stderr() {
    let job = crate::run::result::tests::job();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent.log");
    std::fs::write(&log, "starting\nError: provider scripted not found\n").unwrap();
    let mut failed = JobResult::new(&job);
    failed.end(Outcome::Failed, "the agent exited with status 1".into());
    add_agent_log(&mut failed, &log);
    let message = failed.message.unwrap();
    assert!(
        message.starts_with("the agent exited with status 1; its last line in ")
            && message.ends_with("agent.log: Error: provider scripted not found"),
        "{message}"
    );
    let mut succeeded = JobResult::new(&job);
    succeeded.outcome = Outcome::Succeeded;
    add_agent_log(&mut succeeded, &log);
    assert_eq!(succeeded.message, None);
}
