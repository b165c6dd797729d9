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
mod enforce;
pub mod events;
pub mod health;
mod job;
mod leftovers;
pub mod limits;
pub mod live;
pub mod metrics;
pub mod not_a_job;
pub mod notify;
pub mod pg;
pub mod procs;
pub mod queue;
pub mod source;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::config::Config;
use crate::run::{Cancel, Runner};
use enforce::Enforcement;
use limits::Limits;
use metrics::Metrics;
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
    #[error(transparent)]
    Metrics(#[from] health::ListenError),
    #[error(transparent)]
    Events(#[from] events::EventsError),
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

/// Runs jobs from `source` until SIGTERM or SIGINT. `on_reload` sees each reloaded config
/// (the queue takes its default timeout from it).
pub async fn serve<S: JobSource>(
    source: Arc<S>,
    runner: Runner,
    options: ServeOptions,
    on_reload: impl Fn(&Config),
) -> Result<(), ServeError> {
    let mut signals = Signals::install()?;
    let metrics = start_metrics(&runner).await?;
    // Read at start, as the metrics: SIGHUP does not change where events go.
    let events = events::Events::start(&runner.config().events, metrics.clone())?.map(Arc::new);
    let limits = Arc::new(Enforcement::start(&runner, &options.limits));
    if let Some(group) = &limits.plan.cgroup {
        enforce::sweep_leftovers(&*source, group).await;
    }
    leftovers::end_orphan_bridges(runner.state());
    let runner = Arc::new(runner);
    crate::netproxy::ca::keep_ready(runner.config().concurrency());
    let recovered = source
        .recover(options.max_attempts)
        .await
        .map_err(|e| ServeError::Recover(e.to_string()))?;
    log_recovered(&recovered);
    let observers = job::Observers { metrics, events };
    let mut serving = Serving::new(source, runner, options, limits, observers);
    serving.announce();
    serving.run(&mut signals, &on_reload).await;
    if let Some(events) = serving.events.take() {
        finish_events(events).await;
    }
    if let Some(group) = &serving.limits.plan.cgroup {
        // Empty once every job's group is gone; a group left by a job that did not stop in
        // time keeps it, for the next start to sweep.
        let _ = std::fs::remove_dir(&group.base);
    }
    tracing::info!("stopped");
    Ok(())
}

/// How long a stopping `serve` waits for the events its jobs' ends sent (a job's `ended` is
/// sent as it ends, moments before serve stops when it was the last).
const EVENTS_DRAIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Delivers what the receivers were handed and not yet given: without it a job that ended
/// just before the stop loses its `ended` event to the receivers still working on it.
async fn finish_events(events: Arc<events::Events>) {
    let Ok(events) = Arc::try_unwrap(events) else {
        tracing::warn!("a job still holds the event receivers: not waiting for their deliveries");
        return;
    };
    if tokio::time::timeout(EVENTS_DRAIN, events.finish())
        .await
        .is_err()
    {
        tracing::warn!(
            "events still being delivered after {}s: stopping without them",
            EVENTS_DRAIN.as_secs()
        );
    }
}

/// The metrics and health listener, when the config names one (`metrics.listen`).
async fn start_metrics(runner: &Runner) -> Result<Option<Arc<Metrics>>, ServeError> {
    let Some(addr) = runner.config().metrics.listen else {
        return Ok(None);
    };
    let budgets = runner.config().accounts.iter();
    let budgets = budgets.filter_map(|(name, a)| Some((name.clone(), a.budget()?)));
    let metrics = Arc::new(Metrics::for_state(
        runner.state().clone(),
        budgets.collect(),
    ));
    let bound = health::start(addr, metrics.clone()).await?;
    tracing::info!(%bound, "metrics and health checks listening");
    Ok(Some(metrics))
}

/// The signals `serve` answers: SIGTERM and SIGINT stop it, SIGHUP reloads the config.
struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
}

impl Signals {
    fn install() -> Result<Signals, ServeError> {
        let handler = |kind: SignalKind, name: &'static str| {
            signal(kind).map_err(|source| ServeError::Signal {
                signal: name,
                source,
            })
        };
        Ok(Signals {
            term: handler(SignalKind::terminate(), "SIGTERM")?,
            int: handler(SignalKind::interrupt(), "SIGINT")?,
            hup: handler(SignalKind::hangup(), "SIGHUP")?,
        })
    }
}

/// The serve loop: its jobs, and when it last did each of its periodic chores.
struct Serving<S: JobSource> {
    source: Arc<S>,
    runner: Arc<Runner>,
    options: ServeOptions,
    limits: Arc<Enforcement>,
    tasks: JoinSet<()>,
    /// Tells the running jobs that `serve` is stopping, and on which signal.
    stop_tx: watch::Sender<Option<Cancel>>,
    stop_rx: watch::Receiver<Option<Cancel>>,
    /// When the stop began: no job is claimed from then on.
    stopping: Option<Instant>,
    last_recovery: Instant,
    /// How often systemd's watchdog wants to hear from `serve`, if it does.
    watchdog: Option<Duration>,
    last_watchdog: Instant,
    /// Whether no job is taken now because the disk is below the reserve, and when that was
    /// last logged (on each change, and every minute while it lasts).
    no_room: bool,
    no_room_logged: Instant,
    /// What `/metrics` and `/readyz` answer from, when they are served; and when the queue
    /// and the devShell engine were last looked at for them.
    metrics: Option<Arc<Metrics>>,
    last_observed: Option<Instant>,
    /// Where job events go, when the config names a receiver.
    events: Option<Arc<events::Events>>,
}

/// Whether the serve loop goes on after a wait.
enum Flow {
    Continue,
    Exit,
}

impl<S: JobSource> Serving<S> {
    fn new(
        source: Arc<S>,
        runner: Arc<Runner>,
        options: ServeOptions,
        limits: Arc<Enforcement>,
        observers: job::Observers,
    ) -> Serving<S> {
        let (stop_tx, stop_rx) = watch::channel(None::<Cancel>);
        let now = Instant::now();
        Serving {
            source,
            runner,
            options,
            limits,
            tasks: JoinSet::new(),
            stop_tx,
            stop_rx,
            stopping: None,
            last_recovery: now,
            watchdog: notify::watchdog_interval(),
            last_watchdog: now,
            no_room: false,
            no_room_logged: now,
            metrics: observers.metrics,
            last_observed: None,
            events: observers.events,
        }
    }

    /// Says in the log, and to systemd, that `serve` is serving.
    fn announce(&self) {
        let runner = &self.runner;
        tracing::info!(
            concurrency = runner.config().concurrency(),
            state = %runner.state().root().display(),
            limits = %self.limits.plan.summary(),
            disk = %runner.disk().summary(),
            "serving"
        );
        self.set_check("serve", Ok(()));
        notify::notify(&format!(
            "READY=1\nSTATUS=serving, concurrency {}",
            runner.config().concurrency()
        ));
    }

    /// Claims and runs jobs, recovers those of dead runners, until a stop has let every job
    /// end (or its grace has run out).
    async fn run(&mut self, signals: &mut Signals, on_reload: &impl Fn(&Config)) {
        loop {
            if self.stopping.is_none() {
                self.check_room();
                self.claim_jobs().await;
                self.observe_if_due().await;
                self.recover_if_due().await;
            } else if self.tasks.is_empty() {
                return;
            }
            self.watchdog_if_due();
            if let Flow::Exit = self.wait(signals, on_reload).await {
                return;
            }
        }
    }

    fn has_slot(&self) -> bool {
        self.tasks.len() < self.runner.config().concurrency()
    }

    /// Jobs wait in the queue while a file system they write is below the reserve: started,
    /// they would be refused (or fail on a full disk).
    fn check_room(&mut self) {
        if !self.has_slot() {
            return;
        }
        let room = self.runner.room_to_start();
        self.set_check("disk", room.clone().map_err(|e| e.to_string()));
        match room {
            Err(why) if !self.no_room || self.no_room_logged.elapsed() >= NO_ROOM_LOG_EVERY => {
                tracing::warn!("not starting jobs: {why}");
                (self.no_room, self.no_room_logged) = (true, Instant::now());
            }
            Err(_) => {}
            Ok(()) if self.no_room => {
                tracing::info!("disk space is above the reserve again: starting jobs");
                self.no_room = false;
            }
            Ok(()) => {}
        }
    }

    /// Claims jobs while there is room for them, and starts each.
    async fn claim_jobs(&mut self) {
        while !self.no_room && self.has_slot() {
            match self.source.claim().await {
                Ok(Some(claimed)) => {
                    self.set_check("queue", Ok(()));
                    // Every line logged for the job, on whatever it runs, names it.
                    let span =
                        tracing::info_span!("job", id = %claimed.job.id, attempt = claimed.attempt);
                    let run = job::run_one(
                        self.source.clone(),
                        self.runner.clone(),
                        claimed,
                        self.stop_rx.clone(),
                        self.options.clone(),
                        self.limits.clone(),
                        job::Observers {
                            metrics: self.metrics.clone(),
                            events: self.events.clone(),
                        },
                    );
                    self.tasks.spawn(tracing::Instrument::instrument(run, span));
                }
                Ok(None) => {
                    self.set_check("queue", Ok(()));
                    break;
                }
                Err(e) => {
                    tracing::error!("claiming a job: {e}");
                    self.set_check("queue", Err(format!("claiming a job: {e}")));
                    break;
                }
            }
        }
    }

    /// Only jobs whose lock no live runner holds are taken, so this runner's own running
    /// jobs are never touched; a failure is retried at the next round.
    async fn recover_if_due(&mut self) {
        if self.last_recovery.elapsed() < self.options.recover_every {
            return;
        }
        match self.source.recover(self.options.max_attempts).await {
            Ok(recovered) => log_recovered(&recovered),
            Err(e) => tracing::error!("recovering jobs of a runner that died: {e}"),
        }
        self.last_recovery = Instant::now();
    }

    fn set_check(&self, name: &'static str, state: Result<(), String>) {
        if let Some(metrics) = &self.metrics {
            metrics.set_check(name, state);
        }
    }

    /// For the metrics: the queue's depth and whether a devShell can be built (nix found),
    /// at most every [`OBSERVE_EVERY`].
    async fn observe_if_due(&mut self) {
        let Some(metrics) = self.metrics.clone() else {
            return;
        };
        if self
            .last_observed
            .is_some_and(|t| t.elapsed() < OBSERVE_EVERY)
        {
            return;
        }
        self.last_observed = Some(Instant::now());
        match self.source.queue_depth().await {
            Ok(Some(depth)) => metrics.set_queue(depth),
            Ok(None) => {}
            Err(why) => metrics.set_check("queue", Err(why)),
        }
        let nix = crate::binaries::find(crate::binaries::Tool::Nix);
        metrics.set_check("devshell", nix.map(|_| ()).map_err(|e| e.to_string()));
    }

    fn watchdog_if_due(&mut self) {
        if let Some(every) = self.watchdog {
            if self.last_watchdog.elapsed() >= every {
                notify::notify("WATCHDOG=1");
                self.last_watchdog = Instant::now();
            }
        }
    }

    /// Waits for the next thing to do: a signal, a job's end, the next poll or a change at
    /// the source, or the end of a stop's grace.
    async fn wait(&mut self, signals: &mut Signals, on_reload: &impl Fn(&Config)) -> Flow {
        let deadline = self.stopping.unwrap_or_else(Instant::now) + self.options.grace;
        let stopping = self.stopping.is_some();
        tokio::select! {
            _ = signals.term.recv() => self.begin_stop(Cancel::Terminate),
            _ = signals.int.recv() => self.begin_stop(Cancel::Interrupt),
            _ = signals.hup.recv() => {
                if let Some(next) = reload(&self.runner, &self.options) {
                    on_reload(next.config());
                    self.runner = Arc::new(next);
                    crate::netproxy::ca::keep_ready(self.runner.config().concurrency());
                    notify::notify("READY=1\nSTATUS=configuration reloaded");
                }
            }
            Some(joined) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                if let Err(e) = joined {
                    tracing::error!("a job task failed: {e}");
                }
            }
            _ = tokio::time::sleep(self.options.poll), if !stopping => {}
            () = self.source.changed(), if !stopping => {}
            _ = tokio::time::sleep_until(deadline), if stopping => {
                tracing::error!(left = self.tasks.len(),
                    "jobs did not stop in time; exiting anyway (the next start recovers them)");
                return Flow::Exit;
            }
        }
        Flow::Continue
    }

    fn begin_stop(&mut self, how: Cancel) {
        if self.stopping.is_some() {
            return;
        }
        let running = self.tasks.len();
        tracing::info!(signal = ?how, running, "stopping: no new jobs; cancelling the running ones");
        notify::notify("STOPPING=1");
        self.set_check("serve", Err("stopping".into()));
        self.stopping = Some(Instant::now());
        let _ = self.stop_tx.send(Some(how));
    }
}

/// How often the queue is looked at for the metrics.
const OBSERVE_EVERY: Duration = Duration::from_secs(1);

/// How often `serve` says again that it starts no job for lack of disk space.
const NO_ROOM_LOG_EVERY: Duration = Duration::from_secs(60);

fn log_recovered(recovered: &Recovered) {
    if *recovered != Recovered::default() {
        tracing::warn!(requeued = ?recovered.requeued, failed = ?recovered.failed,
                       "recovered jobs left running by a runner that died");
    }
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
    let devshells = if config.nix == current.config().nix {
        current.devshells().clone()
    } else {
        Arc::new(crate::devshell::DevShells::new(current.state(), &config))
    };
    tracing::info!(
        concurrency = config.concurrency(),
        "SIGHUP: configuration reloaded"
    );
    Some(current.reloaded(config, devshells))
}
