use std::path::PathBuf;
use std::time::Duration;

use super::*;

fn result() -> JobResult {
    let job = crate::run::result::tests::job();
    let mut result = JobResult::new(&job);
    result.end(
        Outcome::Cancelled(Cancel::Terminate),
        "cancelled by SIGTERM".into(),
    );
    result
}

fn options(max_attempts: u32) -> ServeOptions {
    ServeOptions {
        max_attempts,
        poll: Duration::from_millis(250),
        recover_every: Duration::from_secs(60),
        grace: Duration::from_secs(10),
        limits: Default::default(),
        config_path: PathBuf::new(),
        config_required: false,
    }
}

#[test]
fn a_cancel_finishes_the_job_saying_who_cancelled_it() {
    let mut r = result();
    let settled = settle_stopped(&mut r, Stopper::User, 1, &options(3));
    assert!(matches!(settled, Settled::Finish));
    assert_eq!(r.outcome, Outcome::Cancelled(Cancel::Terminate));
    assert_eq!(
        r.message.as_deref(),
        Some("cancelled by `quest-runner cancel`")
    );
}

#[test]
fn a_shutdown_requeues_until_the_last_attempt_and_then_fails_the_job() {
    let mut r = result();
    let settled = settle_stopped(&mut r, Stopper::Shutdown(Cancel::Interrupt), 1, &options(2));
    let Settled::Release(why) = settled else {
        panic!("not requeued")
    };
    assert_eq!(why.reason, "interrupted: the runner got SIGINT; requeued");
    assert_eq!(r.message.as_deref(), Some(why.reason.as_str()));

    let mut r = result();
    let settled = settle_stopped(&mut r, Stopper::Shutdown(Cancel::Terminate), 2, &options(2));
    assert!(matches!(settled, Settled::Finish));
    assert_eq!(r.outcome, Outcome::Error);
    assert_eq!(
        r.message.as_deref(),
        Some("interrupted: the runner got SIGTERM; gave up after 2 attempt(s)")
    );
}
