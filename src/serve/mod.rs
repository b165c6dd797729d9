//! `quest-runner serve`: the long-running runner. It takes jobs from a [`JobSource`] (the
//! on-disk queue, [`queue::FsQueue`], or the PostgreSQL queue of many hosts, [`pg::PgQueue`]),
//! runs up to `concurrency` of them at once through one
//! shared [`Runner`] — so jobs at one revision share one devShell build — and survives
//! faults:
//!
//! - SIGTERM / SIGINT: stop claiming, cancel running jobs (their result says so), give them
//!   back to the source up to `max_attempts`, and exit within [`ServeOptions::grace`].
//! - On start: jobs a dead runner left running are stopped, cleaned and requeued (or failed
//!   after `max_attempts`).
//! - SIGHUP: reload the config; running jobs keep the config they started with.
//! - `quest-runner cancel`: a running job is stopped at the next poll (`--poll`, 250 ms)
//!   after its source learns of it (the PostgreSQL queue at once, through `NOTIFY`).
//! - Limits: each job's agent starts in a cgroup of its own where the host has cgroup v2
//!   and the runner may write its group ([`cgroup`]), with the memory, pids and cpu limits
//!   its delegated controllers allow, and rlimits for the rest ([`limits`]). The result
//!   names the limit that fired. On start, the groups a dead runner left are killed and
//!   removed, and so are other state dirs' groups left empty.

pub mod cgroup;
pub mod limits;
pub mod notify;
pub mod pg;
pub mod procs;
pub mod queue;
pub mod source;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::config::Config;
use crate::run::{Cancel, JobAgentHook, JobResult, Runner};
use limits::Limits;
pub use source::{Claimed, Interruption, JobSource, Recovered};

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("installing a {signal} handler: {source}")]
    Signal {
        signal: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("recovering jobs left running: {0}")]
    Recover(String),
}

/// How `serve` runs.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Runs of one job (the first included) before an interrupted job is failed.
    pub max_attempts: u32,
    /// How often the source is polled for new jobs and cancel requests.
    pub poll: Duration,
    /// How often jobs left running by a dead runner are recovered while serving. At start
    /// that is only this runner's own past; later, a peer runner sharing the state dir may
    /// die, and its jobs would otherwise wait for some runner's restart.
    pub recover_every: Duration,
    /// How long a shutdown waits for cancelled jobs to clean up before exiting anyway; what
    /// is left is recovered by the next start.
    pub grace: Duration,
    /// The limits asked for; [`cgroup::plan`] decides how this host enforces each.
    pub limits: Limits,
    /// The config file SIGHUP reloads, and whether it must exist.
    pub config_path: PathBuf,
    pub config_required: bool,
}

/// Who stopped a job before it ended.
#[derive(Debug, Clone, Copy)]
enum Stopper {
    Shutdown(Cancel),
    User,
}

/// Runs jobs from `source` until SIGTERM or SIGINT. `on_reload` sees each reloaded config
/// (the queue takes its default timeout from it).
pub async fn serve<S: JobSource>(
    source: Arc<S>,
    runner: Runner,
    options: ServeOptions,
    on_reload: impl Fn(&Config),
) -> Result<(), ServeError> {
    let handler = |kind: SignalKind, name: &'static str| {
        signal(kind).map_err(|source| ServeError::Signal {
            signal: name,
            source,
        })
    };
    let mut sigterm = handler(SignalKind::terminate(), "SIGTERM")?;
    let mut sigint = handler(SignalKind::interrupt(), "SIGINT")?;
    let mut sighup = handler(SignalKind::hangup(), "SIGHUP")?;

    let limits = Arc::new(Enforcement::start(&runner, &options.limits));
    if let Some(group) = &limits.plan.cgroup {
        sweep_leftovers(&*source, group).await;
    }
    let mut runner = Arc::new(with_agent_hook(runner, &limits));
    crate::netproxy::ca::keep_ready(runner.config.concurrency());
    let recovered = source
        .recover(options.max_attempts)
        .await
        .map_err(|e| ServeError::Recover(e.to_string()))?;
    log_recovered(&recovered);
    let mut last_recovery = tokio::time::Instant::now();

    let (stop_tx, stop_rx) = watch::channel(None::<Cancel>);
    let mut tasks: JoinSet<()> = JoinSet::new();
    let mut stopping: Option<tokio::time::Instant> = None;
    let watchdog = notify::watchdog_interval();
    let mut last_watchdog = tokio::time::Instant::now();
    tracing::info!(
        concurrency = runner.config.concurrency(),
        state = %runner.state.root().display(),
        limits = %limits.plan.summary(),
        disk = %runner.disk.summary(),
        "serving"
    );
    // Whether no job is taken now because the disk is below the reserve, and when that was
    // last logged (on each change, and every minute while it lasts).
    let mut no_room = false;
    let mut no_room_logged = tokio::time::Instant::now();
    notify::notify(&format!(
        "READY=1\nSTATUS=serving, concurrency {}",
        runner.config.concurrency()
    ));

    loop {
        if stopping.is_none() && tasks.len() < runner.config.concurrency() {
            // Jobs wait in the queue while a file system they write is below the reserve:
            // started, they would be refused (or fail on a full disk).
            match runner.room_to_start() {
                Err(why) if !no_room || no_room_logged.elapsed() >= NO_ROOM_LOG_EVERY => {
                    tracing::warn!("not starting jobs: {why}");
                    (no_room, no_room_logged) = (true, tokio::time::Instant::now());
                }
                Err(_) => {}
                Ok(()) if no_room => {
                    tracing::info!("disk space is above the reserve again: starting jobs");
                    no_room = false;
                }
                Ok(()) => {}
            }
        }
        if stopping.is_none() {
            while !no_room && tasks.len() < runner.config.concurrency() {
                match source.claim().await {
                    Ok(Some(claimed)) => {
                        tasks.spawn(run_one(
                            source.clone(),
                            runner.clone(),
                            claimed,
                            stop_rx.clone(),
                            options.clone(),
                            limits.clone(),
                        ));
                    }
                    Ok(None) => break,
                    Err(e) => {
                        tracing::error!("claiming a job: {e}");
                        break;
                    }
                }
            }
        } else if tasks.is_empty() {
            break;
        }
        if stopping.is_none() && last_recovery.elapsed() >= options.recover_every {
            // Only jobs whose lock no live runner holds are taken, so this runner's own
            // running jobs are never touched; a failure is retried at the next round.
            match source.recover(options.max_attempts).await {
                Ok(recovered) => log_recovered(&recovered),
                Err(e) => tracing::error!("recovering jobs of a runner that died: {e}"),
            }
            last_recovery = tokio::time::Instant::now();
        }
        if let Some(every) = watchdog {
            if last_watchdog.elapsed() >= every {
                notify::notify("WATCHDOG=1");
                last_watchdog = tokio::time::Instant::now();
            }
        }
        let deadline = stopping.unwrap_or_else(tokio::time::Instant::now) + options.grace;
        tokio::select! {
            _ = sigterm.recv() => begin_stop(&mut stopping, &stop_tx, Cancel::Terminate, tasks.len()),
            _ = sigint.recv() => begin_stop(&mut stopping, &stop_tx, Cancel::Interrupt, tasks.len()),
            _ = sighup.recv() => {
                if let Some(next) = reload(&runner, &options) {
                    on_reload(&next.config);
                    runner = Arc::new(next);
                    crate::netproxy::ca::keep_ready(runner.config.concurrency());
                    notify::notify("READY=1\nSTATUS=configuration reloaded");
                }
            }
            Some(joined) = tasks.join_next(), if !tasks.is_empty() => {
                if let Err(e) = joined {
                    tracing::error!("a job task failed: {e}");
                }
            }
            _ = tokio::time::sleep(options.poll), if stopping.is_none() => {}
            () = source.changed(), if stopping.is_none() => {}
            _ = tokio::time::sleep_until(deadline), if stopping.is_some() => {
                tracing::error!(left = tasks.len(),
                    "jobs did not stop in time; exiting anyway (the next start recovers them)");
                break;
            }
        }
    }
    if let Some(group) = &limits.plan.cgroup {
        // Empty once every job's group is gone; a group left by a job that did not stop in
        // time keeps it, for the next start to sweep.
        let _ = std::fs::remove_dir(&group.base);
    }
    tracing::info!("stopped");
    Ok(())
}

/// How often `serve` says again that it starts no job for lack of disk space.
const NO_ROOM_LOG_EVERY: Duration = Duration::from_secs(60);

fn log_recovered(recovered: &Recovered) {
    if *recovered != Recovered::default() {
        tracing::warn!(requeued = ?recovered.requeued, failed = ?recovered.failed,
                       "recovered jobs left running by a runner that died");
    }
}

/// How `serve` enforces limits on this host, and what each job's group counted.
struct Enforcement {
    plan: cgroup::Plan,
    /// Each finished job's group's counters (or why they could not be had), by job id,
    /// until its result is written.
    reports: Mutex<HashMap<String, Result<cgroup::Report, String>>>,
}

impl Enforcement {
    /// Plans for `limits` and sets up the cgroup part; if that fails, jobs run without
    /// groups (rlimits only) and the log says why.
    fn start(runner: &Runner, limits: &Limits) -> Enforcement {
        let mut plan = cgroup::probe(limits, runner.state.root());
        if let Some(group) = &plan.cgroup {
            if let Err(e) = cgroup::setup(group) {
                tracing::warn!("per-job cgroups unavailable: {e}");
                let why = format!("setting up the runner's cgroup failed: {e}");
                plan = cgroup::plan(Err(&why), None, limits, "");
            }
        }
        tracing::info!(plan = %plan.summary(), "per-job limits");
        Enforcement {
            plan,
            reports: Mutex::new(HashMap::new()),
        }
    }

    fn take_report(&self, id: &str) -> Option<Result<cgroup::Report, String>> {
        self.reports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id)
    }
}

/// Kills and removes the job groups a dead runner left under `group.base`: those of jobs no
/// live runner holds (the source's guard keeps any from starting meanwhile). Before
/// recovery, so that no process of a job survives into its requeued run. Then removes the
/// empty groups of other state dirs beside it: a runner killed outright and never started
/// again leaves one, and nothing else would ever remove it.
async fn sweep_leftovers<S: JobSource>(source: &S, group: &cgroup::CgroupPlan) {
    sweep_job_groups(source, group).await;
    let swept = cgroup::remove_empty_bases(&group.own, &group.base);
    for dir in &swept.removed {
        tracing::info!(group = %dir.display(), "removed an empty state-dir cgroup");
    }
    for e in &swept.failed {
        tracing::warn!("sweeping empty state-dir cgroups: {e}");
    }
}

async fn sweep_job_groups<S: JobSource>(source: &S, group: &cgroup::CgroupPlan) {
    for dir in cgroup::stray_groups(&group.base) {
        match cgroup::kill_and_remove(&dir) {
            Ok(had) => tracing::warn!(group = %dir.display(), had_processes = had,
                                      "removed a cgroup that is no job's"),
            Err(e) => tracing::error!("removing a cgroup that is no job's: {e}"),
        }
    }
    for (id, dir) in cgroup::job_groups(&group.base) {
        let Some(guard) = source.hold_idle(&id).await else {
            continue; // a live runner's job
        };
        match cgroup::kill_and_remove(&dir) {
            Ok(had) => {
                tracing::warn!(job = %id, had_processes = had, "removed the cgroup a dead runner left")
            }
            Err(e) => tracing::error!(job = %id, "removing the cgroup a dead runner left: {e}"),
        }
        drop(guard);
    }
}

/// Kept while a job's agent runs; dropped once its tree is stopped: kills whatever is left
/// in the job's group, records what the group counted, removes it.
struct JobGroupGuard {
    id: String,
    group: Option<cgroup::JobCgroup>,
    limits: Arc<Enforcement>,
}

impl Drop for JobGroupGuard {
    fn drop(&mut self) {
        let Some(group) = self.group.take() else {
            return;
        };
        let report = group.finish().map_err(|e| {
            tracing::error!(job = %self.id, "{e} (the next start removes it)");
            e.to_string()
        });
        self.limits
            .reports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(self.id.clone(), report);
    }
}

/// The per-job hook: a group for the job, the agent placed in it before it execs.
fn job_group_hook(limits: Arc<Enforcement>) -> JobAgentHook {
    Arc::new(move |id: &str, cmds: &mut [&mut std::process::Command]| {
        let Some(plan) = &limits.plan.cgroup else {
            return Ok(Box::new(()) as Box<dyn std::any::Any + Send>);
        };
        let group = cgroup::JobCgroup::create(plan, id).map_err(|e| e.to_string())?;
        for cmd in cmds.iter_mut() {
            group.place(cmd);
        }
        Ok(Box::new(JobGroupGuard {
            id: id.to_string(),
            group: Some(group),
            limits: limits.clone(),
        }))
    })
}

fn begin_stop(
    stopping: &mut Option<tokio::time::Instant>,
    stop_tx: &watch::Sender<Option<Cancel>>,
    how: Cancel,
    running: usize,
) {
    if stopping.is_some() {
        return;
    }
    tracing::info!(signal = ?how, running, "stopping: no new jobs; cancelling the running ones");
    notify::notify("STOPPING=1");
    *stopping = Some(tokio::time::Instant::now());
    let _ = stop_tx.send(Some(how));
}

/// The serve-wide agent hook (parent-death signal, rlimits), kept around any hook the
/// caller set, and the per-job cgroup hook where the host has them.
fn with_agent_hook(mut runner: Runner, limits: &Arc<Enforcement>) -> Runner {
    runner.hooks.agent_command = Some(limits::agent_hook(
        limits.plan.rlimits,
        runner.hooks.agent_command,
    ));
    if limits.plan.cgroup.is_some() {
        runner.job_agent = Some(job_group_hook(limits.clone()));
    }
    runner
}

/// A runner with the config reloaded from disk, or `None` (logged) if it does not load.
/// The devShell engine is kept, with its in-flight builds, unless the Nix options changed.
fn reload(current: &Runner, options: &ServeOptions) -> Option<Runner> {
    let config = match Config::load(&options.config_path, options.config_required) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("SIGHUP: keeping the current config: {e}");
            return None;
        }
    };
    let devshells = if config.nix == current.config.nix {
        current.devshells.clone()
    } else {
        Arc::new(crate::devshell::DevShells::new(&current.state, &config))
    };
    tracing::info!(
        concurrency = config.concurrency(),
        "SIGHUP: configuration reloaded"
    );
    Some(current.reloaded(config, devshells))
}

/// Runs one claimed job to its end and reports it to the source.
async fn run_one<S: JobSource>(
    source: Arc<S>,
    runner: Arc<Runner>,
    claimed: Claimed<S::Ticket>,
    mut stop: watch::Receiver<Option<Cancel>>,
    options: ServeOptions,
    limits: Arc<Enforcement>,
) {
    let id = claimed.job.id.clone();
    let stopper: Arc<Mutex<Option<Stopper>>> = Arc::new(Mutex::new(None));
    let cancel = {
        let stopper = stopper.clone();
        let source = source.clone();
        let id = id.clone();
        async move {
            let set = |s: Stopper| *stopper.lock().unwrap_or_else(|e| e.into_inner()) = Some(s);
            loop {
                // The watch guard must not live across the source's await: decide first.
                let shutdown = tokio::select! {
                    changed = stop.wait_for(Option::is_some) => {
                        Some(changed.ok().and_then(|v| *v).unwrap_or(Cancel::Terminate))
                    }
                    _ = tokio::time::sleep(options.poll) => None,
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
    };
    tracing::info!(job = %id, attempt = claimed.attempt, "starting");
    let result = runner.run(&claimed.job, cancel).await;
    let stopped_by = *stopper.lock().unwrap_or_else(|e| e.into_inner());
    let mut value = result_json(&result);
    let reported = match stopped_by {
        None => {
            if name_limits(&mut value, &result, &limits) {
                rewrite_result(&runner, &id, &value);
            }
            source.finish(claimed, value).await
        }
        Some(Stopper::User) => {
            value["message"] = "cancelled by `quest-runner cancel`".into();
            rewrite_result(&runner, &id, &value);
            source.finish(claimed, value).await
        }
        Some(Stopper::Shutdown(how)) => {
            let signal = match how {
                Cancel::Interrupt => "SIGINT",
                Cancel::Terminate => "SIGTERM",
            };
            if claimed.attempt < options.max_attempts {
                let reason = format!("interrupted: the runner got {signal}; requeued");
                value["message"] = reason.clone().into();
                rewrite_result(&runner, &id, &value);
                source.release(claimed, Interruption { reason }).await
            } else {
                let message = format!(
                    "interrupted: the runner got {signal}; gave up after {} attempt(s)",
                    claimed.attempt
                );
                value["outcome"] = "error".into();
                value["message"] = message.into();
                rewrite_result(&runner, &id, &value);
                source.finish(claimed, value).await
            }
        }
    };
    if let Err(e) = reported {
        tracing::error!(job = %id, "recording the job's end: {e}");
    }
}

/// Adds to a job's result the limit that fired (`limit_fired`, and why in `message`), the
/// limits in force when it did not succeed (`limits`), and how long cpu.max throttled it
/// (`cpu_throttled_ms`). Returns whether it changed anything.
fn name_limits(value: &mut serde_json::Value, result: &JobResult, limits: &Enforcement) -> bool {
    let mut notes = Vec::new();
    let report = limits.take_report(&result.job_id);
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
    let mut changed = false;
    // A limit the runner itself fired (the disk's) is in the result already, with its reason.
    let fired = fired.filter(|_| result.limit_fired.is_none());
    if let Some((name, why)) = &fired {
        value["limit_fired"] = (*name).into();
        notes.push(why.clone());
    }
    if let Some(Ok(report)) = &report {
        if let Some(throttled) = report.throttled() {
            value["cpu_throttled_ms"] = (report.cpu_throttled_usec / 1000).into();
            changed = true;
            if result.outcome != crate::run::Outcome::Succeeded {
                notes.push(throttled);
            }
        }
    }
    if let Some(Err(e)) = &report {
        notes.push(format!("the job's cgroup could not be read: {e}"));
    }
    if result.outcome != crate::run::Outcome::Succeeded {
        if let Some(in_force) = limits.plan.in_force() {
            value["limits"] = in_force.clone().into();
            changed = true;
            if result.signal.is_some() || fired.is_some() {
                notes.push(format!("limits in force: {in_force}"));
            }
        }
    }
    if !notes.is_empty() {
        let message = value["message"].as_str().map(str::to_string);
        value["message"] = match message {
            Some(m) => format!("{m}; {}", notes.join("; ")),
            None => notes.join("; "),
        }
        .into();
        changed = true;
    }
    changed
}

fn result_json(result: &JobResult) -> serde_json::Value {
    serde_json::to_value(result).unwrap_or_else(|e| {
        queue::made_up_result(
            &result.job_id,
            "error",
            &format!("unserialisable result: {e}"),
        )
    })
}

/// Replaces `result.json` in the job's directory (if the job got that far) with `value`.
fn rewrite_result(runner: &Runner, id: &str, value: &serde_json::Value) {
    let root = crate::workspace::job_root(&runner.state, id);
    if !root.exists() {
        return;
    }
    let path = root.join("result.json");
    let data = serde_json::to_vec_pretty(value).unwrap_or_default();
    if let Err(e) = crate::util::fs::write_atomically(&root, &path, &data) {
        tracing::warn!("writing {}: {e}", path.display());
    }
}
