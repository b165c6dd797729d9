//! `quest-runner serve`: the long-running runner. It takes jobs from a [`JobSource`] (the
//! on-disk queue, [`queue::FsQueue`]), runs up to `concurrency` of them at once through one
//! shared [`Runner`] — so jobs at one revision share one devShell build — and survives
//! faults:
//!
//! - SIGTERM / SIGINT: stop claiming, cancel running jobs (their result says so), give them
//!   back to the source up to `max_attempts`, and exit within [`ServeOptions::grace`].
//! - On start: jobs a dead runner left running are stopped, cleaned and requeued (or failed
//!   after `max_attempts`).
//! - SIGHUP: reload the config; running jobs keep the config they started with.
//! - `quest-runner cancel`: a running job is stopped at the next poll.

pub mod commands;
pub mod limits;
pub mod notify;
pub mod procs;
pub mod queue;
pub mod source;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::config::Config;
use crate::run::{Cancel, JobResult, Runner};
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
    /// How long a shutdown waits for cancelled jobs to clean up before exiting anyway; what
    /// is left is recovered by the next start.
    pub grace: Duration,
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

    let mut runner = Arc::new(with_agent_hook(runner, options.limits));
    let recovered = source
        .recover(options.max_attempts)
        .await
        .map_err(|e| ServeError::Recover(e.to_string()))?;
    if recovered != Recovered::default() {
        tracing::warn!(requeued = ?recovered.requeued, failed = ?recovered.failed,
                       "recovered jobs left running by a runner that died");
    }

    let (stop_tx, stop_rx) = watch::channel(None::<Cancel>);
    let mut tasks: JoinSet<()> = JoinSet::new();
    let mut stopping: Option<tokio::time::Instant> = None;
    let watchdog = notify::watchdog_interval();
    let mut last_watchdog = tokio::time::Instant::now();
    tracing::info!(
        concurrency = runner.config.concurrency(),
        state = %runner.state.root().display(),
        limits = ?options.limits.describe(),
        "serving"
    );
    notify::notify(&format!(
        "READY=1\nSTATUS=serving, concurrency {}",
        runner.config.concurrency()
    ));

    loop {
        if stopping.is_none() {
            while tasks.len() < runner.config.concurrency() {
                match source.claim().await {
                    Ok(Some(claimed)) => {
                        tasks.spawn(run_one(
                            source.clone(),
                            runner.clone(),
                            claimed,
                            stop_rx.clone(),
                            options.clone(),
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
                    notify::notify("READY=1\nSTATUS=configuration reloaded");
                }
            }
            Some(joined) = tasks.join_next(), if !tasks.is_empty() => {
                if let Err(e) = joined {
                    tracing::error!("a job task failed: {e}");
                }
            }
            _ = tokio::time::sleep(options.poll), if stopping.is_none() => {}
            _ = tokio::time::sleep_until(deadline), if stopping.is_some() => {
                tracing::error!(left = tasks.len(),
                    "jobs did not stop in time; exiting anyway (the next start recovers them)");
                break;
            }
        }
    }
    tracing::info!("stopped");
    Ok(())
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
/// caller set.
fn with_agent_hook(mut runner: Runner, limits: Limits) -> Runner {
    runner.hooks.agent_command = Some(limits::agent_hook(limits, runner.hooks.agent_command));
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
    Some(Runner {
        state: current.state.clone(),
        config,
        devshells,
        hooks: current.hooks.clone(),
        env_source: current.env_source.clone(),
        operator_home: current.operator_home.clone(),
        config_file: current.config_file.clone(),
    })
}

/// Runs one claimed job to its end and reports it to the source.
async fn run_one<S: JobSource>(
    source: Arc<S>,
    runner: Arc<Runner>,
    claimed: Claimed<S::Ticket>,
    mut stop: watch::Receiver<Option<Cancel>>,
    options: ServeOptions,
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
            if let (Some(limits), false) = (
                options.limits.describe(),
                result.outcome == crate::run::Outcome::Succeeded,
            ) {
                value["limits"] = serde_json::Value::String(limits);
            }
            if let (Some(signal), Some(message)) = (result.signal, &result.message) {
                if let Some(why) = options.limits.explain(signal) {
                    value["message"] = format!("{message}; {why}").into();
                    rewrite_result(&runner, &id, &value);
                }
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
    if let Err(e) = crate::devshell::nix_version::write_atomically(&root, &path, &data) {
        tracing::warn!("writing {}: {e}", path.display());
    }
}
