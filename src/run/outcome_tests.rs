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
