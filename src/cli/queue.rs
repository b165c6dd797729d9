//! The queue's subcommands: `serve`, `submit`, `jobs`, `show`, `logs`, `cancel`, `gc`.
//! Their arguments live here so `cli/mod.rs` only dispatches.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::{Context, Failure};
use crate::exit::Exit;
use crate::job::JobSpec;
use crate::serve::limits::Limits;
use crate::serve::pg::{self, PgError};
use crate::serve::queue::{CancelOutcome, FsQueue, JobState, Listed, QueueError};
use crate::serve::ServeOptions;
use crate::util::text::shown_line;

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Runs of one job, the first included, before an interrupted job is failed.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub max_attempts: u32,
    /// How often the queue is polled for jobs and cancel requests.
    #[arg(long, default_value = "250ms", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub poll: Duration,
    /// How often jobs left running by a runner that died are looked for while serving (not
    /// only at start): another runner on the same state dir may die at any time.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub recover_every: Duration,
    /// RLIMIT_NPROC of each agent (processes of the runner's user; not enforced for root).
    #[arg(long, value_name = "N")]
    pub limit_nproc: Option<u64>,
    /// RLIMIT_AS of each agent process, in bytes.
    #[arg(long, value_name = "BYTES")]
    pub limit_address_space: Option<u64>,
    /// RLIMIT_CPU of each agent process, in seconds of CPU time (SIGXCPU, then SIGKILL
    /// five seconds later).
    #[arg(long, value_name = "SECONDS")]
    pub limit_cpu: Option<u64>,
    /// memory.max of each job's cgroup (e.g. 4G) [default: the config's limits.memory].
    /// Needs a delegated memory controller; `doctor` says whether there is one.
    #[arg(long, value_name = "SIZE", value_parser = crate::util::units::parse_size)]
    pub limit_memory: Option<u64>,
    /// pids.max of each job's cgroup [default: the config's limits.pids]; RLIMIT_NPROC
    /// where there is no pids controller.
    #[arg(long, value_name = "N")]
    pub limit_pids: Option<u64>,
    /// cpu.max of each job's cgroup, in CPUs (e.g. 1.5) [default: the config's
    /// limits.cpus]. Throttles; never kills.
    #[arg(long, value_name = "CPUS", value_parser = crate::util::units::parse_cpus)]
    pub limit_cpus: Option<u64>,
    /// The most each job may have on disk at once (e.g. 10G), or `off` [default: the
    /// config's limits.disk, 10G]. A watchdog stops a job past it (`limit_fired: "disk"`).
    #[arg(long, value_name = "SIZE|off", value_parser = parse_disk_limit)]
    pub limit_disk: Option<DiskLimit>,
}

/// `--limit-disk`'s value.
#[derive(Debug, Clone, Copy)]
pub enum DiskLimit {
    Off,
    Bytes(u64),
}

fn parse_disk_limit(text: &str) -> Result<DiskLimit, String> {
    match text.trim() {
        t if t.eq_ignore_ascii_case("off") => Ok(DiskLimit::Off),
        t => crate::util::units::parse_size(t).map(DiskLimit::Bytes),
    }
}

#[derive(Debug, clap::Args)]
pub struct SubmitArgs {
    /// The job file (JSON, as for `run --job`); `-` reads stdin.
    pub job: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct JobsArgs {
    /// One JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct IdArgs {
    pub id: String,
}

#[derive(Debug, clap::Args)]
pub struct GcArgs {
    /// Remove finished jobs last changed longer ago than this (e.g. 7d, 12h).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub older_than: Duration,
}

pub(super) fn failure(e: QueueError) -> Failure {
    Failure::new(
        if e.is_bad_input() {
            Exit::BadInput
        } else {
            Exit::HostNotReady
        },
        e,
    )
}

fn pg_failure(e: PgError) -> Failure {
    Failure::new(
        if e.is_bad_input() {
            Exit::BadInput
        } else {
            Exit::HostNotReady
        },
        e,
    )
}

fn open(ctx: &Context) -> Result<FsQueue, Failure> {
    FsQueue::open(&ctx.state, ctx.config.default_timeout).map_err(failure)
}

/// Where the queue commands find the jobs: the config's `queue`.
pub(super) enum Queue {
    Dir(FsQueue),
    Pg(Box<PgCli>),
}

impl Queue {
    pub(super) fn open(ctx: &Context) -> Result<Queue, Failure> {
        let Some(queue) = &ctx.config.queue else {
            return open(ctx).map(Queue::Dir);
        };
        // Checked when the config was loaded.
        let target = pg::target::PgTarget::from_config(queue)
            .map_err(|e| Failure::new(Exit::BadInput, format!("config queue: {e}")))?;
        let runtime = super::runtime::runtime(None)?;
        Ok(Queue::Pg(Box::new(PgCli { target, runtime })))
    }
}

/// A queue command's way to the PostgreSQL queue.
pub(super) struct PgCli {
    target: pg::target::PgTarget,
    runtime: tokio::runtime::Runtime,
}

impl PgCli {
    /// Runs `f` on a connection (the schema brought up to date first).
    pub(super) fn run<T, F, Fut>(&self, f: F) -> Result<T, Failure>
    where
        F: FnOnce(tokio_postgres::Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, PgError>>,
    {
        self.runtime
            .block_on(async {
                let client = pg::admin::connect(&self.target).await?;
                f(client).await
            })
            .map_err(pg_failure)
    }
}

/// `quest-runner serve`. `config_flag` is `--config`, for SIGHUP to reload the same file.
pub fn serve(ctx: Context, config_flag: Option<PathBuf>, args: ServeArgs) -> Result<(), Failure> {
    let options = serve_options(&ctx, config_flag, &args);
    // Enough threads that one job's blocking teardown (stopping its process tree) never
    // holds up another's, whatever the concurrency is reloaded to.
    let threads = crate::config::default_concurrency()
        .max(ctx.config.concurrency())
        .max(2)
        + 1;
    let runtime = super::runtime::runtime(Some(threads))?;
    let runner = job_runner(&ctx, &args);
    let served = match ctx.config.queue.clone() {
        None => {
            let queue = Arc::new(open(&ctx)?);
            // Seen by `jobs` while this process serves (released with it, however it ends).
            let _serving = queue
                .serving()
                .map_err(|e| Failure::new(Exit::Failed, format!("marking this runner: {e}")))?;
            let reload_queue = queue.clone();
            runtime.block_on(crate::serve::serve(queue, runner, options, move |config| {
                reload_queue.set_default_timeout(config.default_timeout);
            }))
        }
        Some(settings) => runtime.block_on(serve_pg(&ctx, settings, runner, options))?,
    };
    runtime.shutdown_timeout(Duration::from_millis(500));
    served.map_err(|e| Failure::new(Exit::Failed, e))
}

/// `serve`'s settings: its flags over the config's limits.
fn serve_options(ctx: &Context, config_flag: Option<PathBuf>, args: &ServeArgs) -> ServeOptions {
    let (config_path, config_required) = match config_flag {
        Some(path) => (path, true),
        None => (ctx.state.config_file(), false),
    };
    let configured = &ctx.config.limits;
    ServeOptions {
        max_attempts: args.max_attempts.max(1),
        poll: args.poll.max(Duration::from_millis(10)),
        recover_every: args.recover_every.max(Duration::from_millis(100)),
        grace: Duration::from_secs(9),
        limits: Limits {
            nproc: args.limit_nproc,
            address_space: args.limit_address_space,
            cpu_seconds: args.limit_cpu,
            memory: args.limit_memory.or(configured.memory),
            pids: args.limit_pids.or(configured.pids).filter(|n| *n > 0),
            cpus_milli: args.limit_cpus.or(configured.cpus.map(|c| c.0)),
        },
        config_path,
        config_required,
    }
}

/// The runner of `serve`'s jobs, with `--limit-disk` over the config's disk limit.
fn job_runner(ctx: &Context, args: &ServeArgs) -> crate::run::Runner {
    let runner = crate::run::Runner::new(ctx.state.clone(), ctx.config.clone())
        .with_config_file(ctx.config_path.clone());
    match args.limit_disk {
        Some(DiskLimit::Off) => runner.with_disk_limit(None),
        Some(DiskLimit::Bytes(b)) => runner.with_disk_limit(Some(b)),
        None => runner,
    }
}

/// Serves the PostgreSQL queue `settings` names until a signal ends it; the connection closed
/// after the last job.
async fn serve_pg(
    ctx: &Context,
    settings: crate::config::QueueConfig,
    runner: crate::run::Runner,
    options: ServeOptions,
) -> Result<Result<(), crate::serve::ServeError>, Failure> {
    let target = pg::target::PgTarget::from_config(&settings)
        .map_err(|e| Failure::new(Exit::BadInput, format!("config queue: {e}")))?;
    let timeout = ctx.config.default_timeout;
    let queue = pg::PgQueue::open(target, &ctx.state, &ctx.config, settings.lease(), timeout)
        .await
        .map_err(pg_failure)?;
    let queue = Arc::new(queue);
    let reload_queue = queue.clone();
    let served = crate::serve::serve(queue.clone(), runner, options, move |config| {
        if config.queue.as_ref() != Some(&settings) {
            tracing::warn!("SIGHUP: the queue setting changed; it applies at the next start");
        }
        reload_queue.reloaded(config);
    })
    .await;
    queue.close().await;
    Ok(served)
}

/// `quest-runner submit FILE`: prints the job's id.
pub fn submit(ctx: Context, args: SubmitArgs) -> Result<(), Failure> {
    let spec = if args.job == Path::new("-") {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .map_err(|e| Failure::new(Exit::BadInput, format!("reading stdin: {e}")))?;
        JobSpec::from_json(&text)?
    } else {
        JobSpec::from_file(&args.job)?
    };
    super::check_account(&ctx, &spec.account)?;
    let job = match Queue::open(&ctx)? {
        Queue::Dir(queue) => queue.submit(spec, &ctx.config).map_err(failure)?,
        Queue::Pg(db) => {
            let timeout = ctx.config.default_timeout;
            let config = &ctx.config;
            db.run(|client| async move { pg::admin::submit(&client, spec, config, timeout).await })?
        }
    };
    super::events::queued(&ctx, &job);
    super::out(job.id)?;
    Ok(())
}

/// `quest-runner jobs [--json]`.
pub fn jobs(ctx: Context, args: JobsArgs) -> Result<(), Failure> {
    let mut listed: Vec<Listed> = match Queue::open(&ctx)? {
        Queue::Dir(queue) => {
            let listed = queue.list();
            let queued = listed
                .iter()
                .filter(|j| j.state == JobState::Queued)
                .count();
            if queued > 0 && queue.runners().is_empty() {
                tracing::warn!(
                    "no serve is running on {}: its {queued} queued job(s) wait until one starts \
                     (quest-runner serve, or the service)",
                    ctx.state.root().display()
                );
            }
            listed
        }
        Queue::Pg(db) => db.run(|client| async move { pg::admin::list(&client).await })?,
    };
    for job in listed.iter_mut() {
        job.live = live(&ctx, &job.id, job.state);
    }
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        writeln!(out, "{}", super::json(&listed))
    } else {
        let mut text = format!(
            "{:<32} {:<10} {:<10} {:>3}  {:<20}  {:<28}  {}\n",
            "ID", "STATE", "OUTCOME", "TRY", "SUBMITTED", "MODEL", "MESSAGE"
        );
        for j in &listed {
            text.push_str(&format!(
                "{:<32} {:<10} {:<10} {:>3}  {:<20}  {:<28}  {}\n",
                shown_line(&j.id),
                j.state.name(),
                shown_line(j.outcome.as_deref().unwrap_or("-")),
                j.attempts,
                shown_line(j.submitted_at.as_deref().unwrap_or("-")),
                match (&j.usage, &j.live) {
                    (Some(u), _) => shown_line(&u.brief()),
                    (None, Some(live)) => live.brief(),
                    (None, None) => "-".to_string(),
                },
                shown_line(j.message.as_deref().unwrap_or(""))
            ));
        }
        out.write_all(text.as_bytes())
    };
    written.map_err(super::stdout_failure)
}

/// `quest-runner show ID`: the job's queue entry (job, attempts, result) and its state.
pub fn show(ctx: Context, args: IdArgs) -> Result<(), Failure> {
    let value = match Queue::open(&ctx)? {
        Queue::Dir(queue) => {
            let (state, entry) = match queue.show(&args.id) {
                Ok(shown) => shown,
                Err(QueueError::NotFound(id)) => match super::ran::show(&ctx, &id) {
                    Some(value) => return super::out(pretty(&value?)),
                    None => return Err(failure(QueueError::NotFound(id))),
                },
                Err(e) => return Err(failure(e)),
            };
            let mut value = serde_json::to_value(&entry).unwrap_or_default();
            value["id"] = args.id.clone().into();
            value["state"] = state.name().into();
            value["dir"] = queue.job_dir(&args.id).display().to_string().into();
            if let Some(live) = live(&ctx, &args.id, state) {
                value["live"] = serde_json::to_value(live).unwrap_or_default();
            }
            // A `quest-runner push` after the job's end is in its result file only.
            if let (Some(push), Some(result)) = (
                local_push(&ctx, &args.id),
                value.get_mut("result").filter(|r| r.is_object()),
            ) {
                result["push"] = push;
            }
            value
        }
        Queue::Pg(db) => {
            crate::job::check_id(&args.id)?;
            let id = &args.id;
            db.run(|client| async move { pg::admin::show(&client, id).await })?
        }
    };
    super::out(pretty(&value))
}

/// A running job's use now, when it runs on this host (its directory is here).
fn live(ctx: &Context, id: &str, state: JobState) -> Option<crate::serve::live::Live> {
    let here = crate::workspace::job_root(&ctx.state, id).is_dir();
    (state == JobState::Running && here).then(|| crate::serve::live::sample(&ctx.state, id))
}

fn pretty(value: &serde_json::Value) -> String {
    super::json(value)
}

/// `quest-runner cancel ID`.
pub fn cancel(ctx: Context, args: IdArgs) -> Result<(), Failure> {
    let outcome = match Queue::open(&ctx)? {
        Queue::Dir(queue) => queue.cancel(&args.id).map_err(failure)?,
        Queue::Pg(db) => {
            let id = &args.id;
            db.run(|client| async move { pg::admin::cancel(&client, id).await })?
        }
    };
    match outcome {
        CancelOutcome::Dequeued => super::out(format_args!("{}: cancelled", args.id))?,
        CancelOutcome::Requested => super::out(format_args!(
            "{}: cancel requested; its runner stops it",
            args.id
        ))?,
    }
    Ok(())
}

/// `quest-runner gc --older-than D`: removes finished jobs' files, then the refs that kept
/// their commits in the shared clones (those of every job whose directory is gone), then the
/// revision trees no job started on for as long; prints the removed jobs' ids, the deleted
/// refs and the removed trees as JSON.
pub fn gc(ctx: Context, args: GcArgs) -> Result<(), Failure> {
    let removed = match Queue::open(&ctx)? {
        Queue::Dir(queue) => {
            let mut removed = queue.gc(args.older_than).map_err(failure)?;
            let queued = |id: &str| queue.find_state(id).is_some();
            removed.extend(super::ran::gc(&ctx, args.older_than, &queued));
            removed
        }
        Queue::Pg(db) => {
            let older_than = args.older_than;
            let removed =
                db.run(|client| async move { pg::admin::gc(&client, older_than).await })?;
            // This host's files of them, if it is a runner's (the others' runners remove
            // theirs when they next look).
            for id in &removed {
                pg::remove_local(&ctx.state, id);
            }
            removed
        }
    };
    // Then the refs that kept their commits in this host's shared clones.
    let refs = super::block_on_interruptible(async {
        crate::workspace::forget_removed_jobs(&ctx.state)
            .await
            .map_err(|e| Failure::new(Exit::Failed, e))
    })?;
    // And the shared revision trees no job has started on for as long.
    let trees = crate::workspace::revision_tree::gc(&ctx.state, args.older_than);
    super::out(format_args!(
        "{}",
        serde_json::json!({ "removed": removed, "refs_deleted": refs, "trees_removed": trees })
    ))?;
    Ok(())
}

/// The push this host recorded last for job `id` (a later `push` than the queue's result).
fn local_push(ctx: &Context, id: &str) -> Option<serde_json::Value> {
    crate::job::check_id(id).ok()?;
    let file = crate::workspace::job_root(&ctx.state, id).join("result.json");
    let value: serde_json::Value = serde_json::from_slice(&std::fs::read(file).ok()?).ok()?;
    value.get("push").cloned()
}
