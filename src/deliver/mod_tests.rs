use super::*;

fn work(state: &StateDir, head: &str) -> JobWork {
    JobWork::new(state, "j1", "/srv/r", &"a".repeat(40), head, Trust::Trusted)
}

#[tokio::test]
async fn a_job_without_commits_or_clone_has_nothing_to_deliver() {
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir::at(dir.path());
    let err = work(&state, &"a".repeat(40))
        .checked_git()
        .await
        .unwrap_err();
    assert!(matches!(err, DeliverError::NoCommits(_)), "{err}");
    let err = work(&state, &"b".repeat(40))
        .checked_git()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no clone at"), "{err}");
}
