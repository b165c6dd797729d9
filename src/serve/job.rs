//! One claimed job under `serve`: run until it ends or is stopped (a shutdown, a cancel),
//! its result completed with what `serve` knows (who stopped it, the limits report of its
//! cgroup), saved once, and reported to its source as finished or given back.

use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::enforce::Enforcement;
use super::events::{Event, Events};
use super::metrics::Metrics;
use super::{cgroup, Claimed, Interruption, JobSource, ServeOptions};
use crate::run::{Cancel, JobResult, Outcome, Runner};

/// Who stopped a job before it ended.
#[derive(Debug, Clone, Copy)]
enum Stopper {
    Shutdown(Cancel),
    User,
}

/// What becomes of a job's claim once its run is over.
enum Settled {
    /// The result is final.
    Finish,
    /// The job runs again later.
    Release(Interruption),
}

/// Who hears of a job's start and end: the metrics and the job events, when on.
#[derive(Clone, Default)]
pub(super) struct Observers {
    pub metrics: Option<Arc<Metrics>>,
    pub events: Option<Arc<Events>>,
}

/// Runs one claimed job to its end and reports it to the source.
pub(super) async fn run_one<S: JobSource>(
    source: Arc<S>,
    runner: Arc<Runner>,
    claimed: Claimed<S::Ticket>,
    stop: watch::Receiver<Option<Cancel>>,
    options: ServeOptions,
    limits: Arc<Enforcement>,
    observers: Observers,
) {
    let Observers { metrics, events } = observers;
    let id = claimed.job.id.clone();
    let stopper: Arc<Mutex<Option<Stopper>>> = Arc::new(Mutex::new(None));
    let cancel = stopped(
        source.clone(),
        id.clone(),
        stop,
        options.poll,
        stopper.clone(),
    );
    tracing::info!(job = %id, attempt = claimed.attempt, "starting");
    if let Some(metrics) = &metrics {
        metrics.job_started(claimed.job.agent.name(), &id);
    }
    if let Some(events) = &events {
        events.send(&Event::started(&claimed.job, claimed.attempt));
    }
    let (mut result, report) = runner
        .run_enclosed(&claimed.job, cancel, limits.as_ref())
        .await;
    let report = report.flatten();
    let stopped_by = *stopper.lock().unwrap_or_else(|e| e.into_inner());
    let settled = match stopped_by {
        None => {
            name_limits(&mut result, report, &limits);
            Settled::Finish
        }
        Some(stopper) => settle_stopped(&mut result, stopper, claimed.attempt, &options),
    };
    if matches!(settled, Settled::Finish) {
        // Before the result is recorded, so the source has the push's outcome too.
        runner.deliver(&mut result).await;
    }
    runner.save_result(&result);
    if let Some(metrics) = &metrics {
        metrics.job_ended(&result);
    }
    // A run given back to the source is not the job's end: it runs again.
    if let (Some(events), Settled::Finish) = (&events, &settled) {
        events.send(&Event::ended(&claimed.job, claimed.attempt, &result));
    }
    let reported = match settled {
        Settled::Finish => source.finish(claimed, result).await,
        Settled::Release(why) => source.release(claimed, why).await,
    };
    if let Err(e) = reported {
        tracing::error!(job = %id, "recording the job's end: {e}");
    }
}

/// Resolves when job `id` is to stop: at a shutdown (`stop`), or when its source says a
/// cancel was asked for (looked at every `poll`); `stopper` then says which.
async fn stopped<S: JobSource>(
    source: Arc<S>,
    id: String,
    mut stop: watch::Receiver<Option<Cancel>>,
    poll: std::time::Duration,
    stopper: Arc<Mutex<Option<Stopper>>>,
) -> Cancel {
    let set = |s: Stopper| *stopper.lock().unwrap_or_else(|e| e.into_inner()) = Some(s);
    loop {
        // The watch guard must not live across the source's await: decide first.
        let shutdown = tokio::select! {
            changed = stop.wait_for(Option::is_some) => {
                Some(changed.ok().and_then(|v| *v).unwrap_or(Cancel::Terminate))
            }
            _ = tokio::time::sleep(poll) => None,
        };
        if let Some(how) = shutdown {
            set(Stopper::Shutdown(how));
            return how;
        }
        if source.cancel_requested(&id).await {
            set(Stopper::User);
            return Cancel::Terminate;
        }
    }
}

/// The result of a job `serve` stopped says who did; a job a shutdown stopped runs again,
/// unless it has had `max_attempts`.
fn settle_stopped(
    result: &mut JobResult,
    stopper: Stopper,
    attempt: u32,
    options: &ServeOptions,
) -> Settled {
    let how = match stopper {
        Stopper::User => {
            result.message = Some("cancelled by `quest-runner cancel`".into());
            return Settled::Finish;
        }
        Stopper::Shutdown(how) => how,
    };
    let signal = how.signal_name();
    if attempt < options.max_attempts {
        let reason = format!("interrupted: the runner got {signal}; requeued");
        result.message = Some(reason.clone());
        Settled::Release(Interruption { reason })
    } else {
        let message =
            format!("interrupted: the runner got {signal}; gave up after {attempt} attempt(s)");
        result.end(Outcome::Error, message);
        Settled::Finish
    }
}

/// Adds to a job's result the limit that fired (`limit_fired`, and why in `message`), the
/// limits in force when it did not succeed (`limits`), and how long cpu.max throttled it
/// (`cpu_throttled_ms`), from its cgroup's `report` and the plan.
fn name_limits(
    result: &mut JobResult,
    report: Option<Result<cgroup::Report, cgroup::CgroupError>>,
    limits: &Enforcement,
) {
    let mut notes = Vec::new();
    let group = limits.plan.cgroup.as_ref();
    let fired = match (&report, group) {
        (Some(Ok(report)), Some(group)) => report.fired(group),
        _ => None,
    };
    let cpu_time = limits.plan.rlimits.cpu_seconds;
    let fired = fired.or_else(|| match (result.signal, cpu_time) {
        (Some(sig), Some(s)) if sig == rustix::process::Signal::XCPU.as_raw() => Some((
            "cpu_time",
            format!("the CPU-time limit fired (RLIMIT_CPU={s}s)"),
        )),
        _ => None,
    });
    // A limit the runner itself fired (the disk's) is in the result already, with its reason.
    let fired = fired.filter(|_| result.limit_fired.is_none());
    if let Some((name, why)) = &fired {
        result.limit_fired = Some(name.to_string());
        notes.push(why.clone());
    }
    let succeeded = result.outcome == Outcome::Succeeded;
    match &report {
        Some(Ok(report)) => {
            if let Some(throttled) = report.throttled() {
                result.cpu_throttled_ms = Some(report.cpu_throttled_usec / 1000);
                if !succeeded {
                    notes.push(throttled);
                }
            }
        }
        Some(Err(e)) => notes.push(format!("the job's cgroup could not be read: {e}")),
        None => {}
    }
    if !succeeded {
        if let Some(in_force) = limits.plan.in_force() {
            if result.signal.is_some() || fired.is_some() {
                notes.push(format!("limits in force: {in_force}"));
            }
            result.limits = Some(in_force);
        }
    }
    if !notes.is_empty() {
        result.add_to_message(&notes.join("; "));
    }
}

#[cfg(test)]
#[path = "job_tests.rs"]
mod tests;
