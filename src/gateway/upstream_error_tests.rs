//! The upstream's failure is kept for the job's result: an agent that gives up on its model
//! exits 1, and this is why.

use super::tests::{fixture, messages, send};
use super::*;

#[tokio::test]
async fn an_upstream_that_does_not_answer_is_the_jobs_last_upstream_error() {
    let f = fixture(false).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let key = SecretSource::File(f.dir.path().join("key"));
    let grant = f
        .gateway
        .open(JobSpec {
            job_id: "j1".into(),
            account: "work".into(),
            upstream: upstream::UpstreamUrl::parse(&format!("http://{closed}")).unwrap(),
            credential: f.gateway.credential(&key).unwrap(),
            token_limit: None,
            budget: None,
            log: f.dir.path().join("j1.log"),
        })
        .unwrap();
    let (url, h) = messages(&grant, "");
    let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, _) = send(&url, "POST", &h, "{}").await;
    assert_eq!(status, 502);
    let cause = grant.upstream_error().expect("the failure is kept");
    assert!(
        cause.starts_with(&format!("http://{closed} did not answer: ")),
        "{cause}"
    );
}
