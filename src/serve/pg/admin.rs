//! The queue commands against the database — `submit`, `jobs`, `show`, `logs`, `cancel`,
//! `gc` — from any host that can reach it. Each opens its own connection (no reconnecting:
//! a command fails with the reason instead) and brings the schema up to date first, so a
//! job can be submitted before any runner has started.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use serde_json::Value;
use tokio_postgres::Client;

use super::claim::rfc3339;
use super::logship::Stream;
use super::schema::{self, SchemaError};
use super::session::{QueryError, Unavailable};
use super::target::{error_text, ConnectError, PgTarget};
use crate::config::Config;
use crate::job::{check_id, Job, JobError, JobSpec};
use crate::run::Outcome;
use crate::serve::queue::{Attempt, CancelOutcome, JobState, Listed};
use crate::serve::source::made_up_result;

#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error("the queue database: {0}")]
    Schema(#[from] SchemaError),
    #[error("{what}: {message}")]
    Sql { what: String, message: String },
    #[error(transparent)]
    Unavailable(#[from] Unavailable),
    #[error(transparent)]
    Job(#[from] JobError),
    #[error("job id {0:?} is already taken (in the queue database)")]
    Duplicate(String),
    #[error("invalid job field \"account\": {0}")]
    Account(String),
    #[error("no job {0:?} in the queue database")]
    NotFound(String),
    #[error("job {id:?} is already {state}")]
    AlreadyFinished { id: String, state: String },
    #[error("{0}")]
    Local(String),
}

impl PgError {
    /// Whether the caller's input was at fault (exit code 2) rather than the host.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            PgError::Job(_)
                | PgError::Duplicate(_)
                | PgError::Account(_)
                | PgError::NotFound(_)
                | PgError::AlreadyFinished { .. }
        )
    }
}

impl From<QueryError> for PgError {
    fn from(e: QueryError) -> PgError {
        match e {
            QueryError::Unavailable(u) => PgError::Unavailable(u),
            QueryError::Sql { what, message } => PgError::Sql { what, message },
        }
    }
}

fn sql(what: &str) -> impl FnOnce(tokio_postgres::Error) -> PgError + '_ {
    move |e| PgError::Sql {
        what: what.to_string(),
        message: error_text(&e),
    }
}

/// Connects, waiting with backoff (up to 5 s apart) while the server is unreachable or
/// starting, and failing at once when it refuses (bad password, no such database).
pub async fn connect_waiting(
    target: &PgTarget,
) -> Result<(Client, super::target::Connection), PgError> {
    let mut backoff = Duration::from_millis(200);
    let mut tries = 0u32;
    loop {
        match target.connect().await {
            Ok(pair) => return Ok(pair),
            Err(e) if e.is_transient() => {
                tries += 1;
                if tries == 1 || tries % 10 == 0 {
                    tracing::warn!("{e}; retrying");
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(super::session::MAX_BACKOFF);
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// What `doctor` says of the queue: the server, the schema's version and the runners serving
/// it. Reads only (no migration).
pub async fn status(target: &PgTarget) -> Result<String, PgError> {
    let (client, connection) = target.connect().await?;
    tokio::spawn(connection);
    let version = schema::version(&client).await?;
    let runners = match version {
        Some(_) => client
            .query(
                "SELECT host, count(*) FROM quest_runner.runners GROUP BY host ORDER BY host",
                &[],
            )
            .await
            .map_err(sql("reading the runners"))?
            .iter()
            .map(|r| format!("{} ({})", r.get::<_, String>(0), r.get::<_, i64>(1)))
            .collect::<Vec<_>>(),
        None => Vec::new(),
    };
    let version = match version {
        Some(v) if v > schema::latest() => {
            return Err(SchemaError::Newer {
                found: v,
                known: schema::latest(),
            }
            .into())
        }
        Some(v) => format!("schema version {v} of {}", schema::latest()),
        None => "no tables yet (the first runner or command makes them)".into(),
    };
    Ok(format!(
        "{}: {version}; runners serving: {}",
        target.describe(),
        if runners.is_empty() {
            "none".to_string()
        } else {
            runners.join(", ")
        }
    ))
}

/// A command's connection, with the schema brought up to date.
pub async fn connect(target: &PgTarget) -> Result<Client, PgError> {
    let (mut client, connection) = target.connect().await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!("the queue database connection: {}", error_text(&e));
        }
    });
    schema::migrate(&mut client).await?;
    Ok(client)
}

/// Validates `spec` (a generated id when it has none), checks its account against this
/// host's config and the runners serving the queue, and queues it.
pub async fn submit(
    client: &Client,
    mut spec: JobSpec,
    config: &Config,
    default_timeout: Duration,
) -> Result<Job, PgError> {
    let job = spec.clone().validate(default_timeout)?;
    check_account(client, &job, config).await?;
    spec.id = Some(job.id.clone());
    let value = serde_json::to_value(&spec).map_err(|e| PgError::Local(e.to_string()))?;
    let inserted = client
        .query_opt(
            "INSERT INTO quest_runner.jobs (id, spec) VALUES ($1, $2)
             ON CONFLICT (id) DO NOTHING RETURNING id",
            &[&job.id, &value],
        )
        .await
        .map_err(sql("queueing the job"))?;
    match inserted {
        Some(_) => Ok(job),
        None => Err(PgError::Duplicate(job.id)),
    }
}

/// The account must be one this host's config or a runner of the queue has, for the job's
/// agent: a job no runner can run would wait for ever.
async fn check_account(client: &Client, job: &Job, config: &Config) -> Result<(), PgError> {
    // account name -> agents it is for, across this host and the runners.
    let mut known: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, account) in &config.accounts {
        known
            .entry(name.clone())
            .or_default()
            .push(account.agent().name().to_string());
    }
    let rows = client
        .query("SELECT accounts FROM quest_runner.runners", &[])
        .await
        .map_err(sql("reading the runners' accounts"))?;
    for row in rows {
        let accounts: Value = row.get(0);
        for (name, agent) in accounts.as_object().into_iter().flatten() {
            if let Some(agent) = agent.as_str() {
                known
                    .entry(name.clone())
                    .or_default()
                    .push(agent.to_string());
            }
        }
    }
    match known.get(&job.account) {
        None => Err(PgError::Account(format!(
            "{:?} is an account of neither this host's config nor a runner serving the queue \
             (those have: {})",
            job.account,
            if known.is_empty() {
                "none".to_string()
            } else {
                known.keys().cloned().collect::<Vec<_>>().join(", ")
            }
        ))),
        Some(agents) if !agents.iter().any(|a| a == job.agent.name()) => {
            let mut agents = agents.clone();
            agents.sort();
            agents.dedup();
            Err(PgError::Account(format!(
                "{:?} is for {}, but the job asks for {}",
                job.account,
                agents.join(" and "),
                job.agent.name()
            )))
        }
        Some(_) => Ok(()),
    }
}

fn state_of(name: &str) -> JobState {
    JobState::ALL
        .into_iter()
        .find(|s| s.name() == name)
        .unwrap_or(JobState::Rejected)
}

/// Every job, oldest submission first; rejected rows last.
pub async fn list(client: &Client) -> Result<Vec<Listed>, PgError> {
    let rows = client
        .query(
            &format!(
                "SELECT id, state, {}, attempts, result ->> 'outcome',
                        coalesce(result ->> 'message', reason), repo, rev,
                        (result -> 'usage')::text
                 FROM quest_runner.jobs
                 ORDER BY state = 'rejected', seq",
                rfc3339("submitted_at")
            ),
            &[],
        )
        .await
        .map_err(sql("listing the jobs"))?;
    Ok(rows
        .iter()
        .map(|r| {
            let state = state_of(r.get(1));
            Listed {
                id: r.get(0),
                state,
                submitted_at: Some(r.get(2)),
                attempts: r.get::<_, i32>(3) as usize,
                outcome: r.get(4),
                message: r.get(5),
                repo: r.get(6),
                rev: r.get(7),
                usage: r
                    .get::<_, Option<String>>(8)
                    .and_then(|u| serde_json::from_str(&u).ok()),
                live: None,
            }
        })
        .collect())
}

/// A job's attempts, oldest first, with where each ran.
async fn attempts(client: &Client, id: &str) -> Result<Vec<Attempt>, PgError> {
    let rows = client
        .query(
            &format!(
                "SELECT number, host, pid, {}, {}, outcome, reason
                 FROM quest_runner.attempts WHERE job_id = $1 ORDER BY number",
                rfc3339("started_at"),
                rfc3339("ended_at")
            ),
            &[&id],
        )
        .await
        .map_err(sql("reading the job's attempts"))?;
    Ok(rows
        .iter()
        .map(|r| Attempt {
            number: r.get::<_, i32>(0) as u32,
            host: Some(r.get(1)),
            runner_pid: r.get::<_, i32>(2) as u32,
            started_at: r.get(3),
            ended_at: r.get(4),
            outcome: r.get(5),
            reason: r.get(6),
        })
        .collect())
}

/// The job as `show` prints it: its state, the job as submitted, its attempts and result.
pub async fn show(client: &Client, id: &str) -> Result<Value, PgError> {
    let row = client
        .query_opt(
            &format!(
                "SELECT state, spec, {}, result, reason, cancel_requested_at IS NOT NULL
                 FROM quest_runner.jobs WHERE id = $1",
                rfc3339("submitted_at")
            ),
            &[&id],
        )
        .await
        .map_err(sql("reading the job"))?
        .ok_or_else(|| PgError::NotFound(id.to_string()))?;
    let state: String = row.get(0);
    let attempts = attempts(client, id).await?;
    let mut value = serde_json::json!({
        "id": id,
        "state": state,
        "job": row.get::<_, Value>(1),
        "submitted_at": row.get::<_, String>(2),
        "attempts": attempts,
    });
    if let Some(result) = row.get::<_, Option<Value>>(3) {
        value["result"] = result;
    }
    if let Some(reason) = row.get::<_, Option<String>>(4) {
        value["reason"] = reason.into();
    }
    if row.get::<_, bool>(5) {
        value["cancel_requested"] = true.into();
    }
    Ok(value)
}

/// Cancels a queued job at once, or asks the runner of a running one to stop it (its
/// runner hears of it through `NOTIFY` at once). Each step is one statement, applied whole
/// or not at all; a job that moved between them (claimed, or given back) is tried again.
pub async fn cancel(client: &Client, id: &str) -> Result<CancelOutcome, PgError> {
    check_id(id)?;
    for _ in 0..CANCEL_TRIES {
        if let Some(done) = cancel_once(client, id).await? {
            return Ok(done);
        }
    }
    Err(PgError::Local(format!(
        "job {id:?} moved between queued and running {CANCEL_TRIES} times while it was being \
         cancelled; nothing was changed: try again"
    )))
}

/// How often `cancel` tries a job that keeps moving under it.
const CANCEL_TRIES: usize = 5;

/// One try of [`cancel`]: `None` when the job was neither queued nor running at its step,
/// but is one of them now.
async fn cancel_once(client: &Client, id: &str) -> Result<Option<CancelOutcome>, PgError> {
    let result = made_up_result(
        id,
        Outcome::CANCELLED_ON_REQUEST,
        "cancelled by `quest-runner cancel` before it started",
    );
    let dequeued = client
        .query_opt(
            "UPDATE quest_runner.jobs SET state = 'cancelled', result = $2, finished_at = now()
             WHERE id = $1 AND state = 'queued' RETURNING id",
            &[&id, &result],
        )
        .await
        .map_err(sql("cancelling the job"))?;
    if dequeued.is_some() {
        return Ok(Some(CancelOutcome::Dequeued));
    }
    let requested = client
        .query_opt(
            "UPDATE quest_runner.jobs SET cancel_requested_at = coalesce(cancel_requested_at, now())
             WHERE id = $1 AND state = 'running' RETURNING id",
            &[&id],
        )
        .await
        .map_err(sql("asking for the job's cancel"))?;
    if requested.is_some() {
        return Ok(Some(CancelOutcome::Requested));
    }
    let state = client
        .query_opt("SELECT state FROM quest_runner.jobs WHERE id = $1", &[&id])
        .await
        .map_err(sql("reading the job"))?;
    match state.map(|row| row.get::<_, String>(0)) {
        Some(s) if s == "queued" || s == "running" => Ok(None),
        Some(state) => Err(PgError::AlreadyFinished {
            id: id.to_string(),
            state,
        }),
        None => Err(PgError::NotFound(id.to_string())),
    }
}

/// Removes finished and rejected jobs that ended more than `older_than` ago, with their
/// attempts and logs; returns their ids.
pub async fn gc(client: &Client, older_than: Duration) -> Result<Vec<String>, PgError> {
    let secs = older_than.as_secs_f64();
    let rows = client
        .query(
            "DELETE FROM quest_runner.jobs
             WHERE finished_at IS NOT NULL AND finished_at <= now() - $1::float8 * interval '1 second'
             RETURNING id",
            &[&secs],
        )
        .await
        .map_err(sql("removing old jobs"))?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Writes job `id`'s `stream` to `out`: its latest attempt's, and with `follow` until the
/// job ends (a requeued job's next attempt starts over, as its log does).
pub async fn logs(
    client: &Client,
    id: &str,
    stream: Stream,
    follow: bool,
    out: &mut impl Write,
) -> Result<(), PgError> {
    check_id(id)?;
    let mut attempt = -1;
    let mut next = 0;
    loop {
        let row = client
            .query_opt(
                "SELECT state, attempts FROM quest_runner.jobs WHERE id = $1",
                &[&id],
            )
            .await
            .map_err(sql("reading the job"))?
            .ok_or_else(|| PgError::NotFound(id.to_string()))?;
        let state = state_of(row.get(0));
        let latest: i32 = row.get(1);
        if latest != attempt {
            attempt = latest;
            next = 0;
        }
        let chunks = client
            .query(
                "SELECT seq, data FROM quest_runner.logs
                 WHERE job_id = $1 AND attempt = $2 AND stream = $3 AND seq >= $4
                 ORDER BY seq",
                &[&id, &attempt, &stream.name(), &next],
            )
            .await
            .map_err(sql("reading the job's output"))?;
        for chunk in chunks {
            let seq: i32 = chunk.get(0);
            let data: Vec<u8> = chunk.get(1);
            out.write_all(&data)
                .and_then(|()| out.flush())
                .map_err(|e| PgError::Local(format!("writing to stdout: {e}")))?;
            next = seq + 1;
        }
        // The state was read before the chunks: once it said the job ended, every chunk
        // of its last attempt was stored, and has been printed.
        if !follow || state.is_finished() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
