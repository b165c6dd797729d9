//! The queue's tables, created and migrated by the runner at start.
//!
//! Everything lives in the schema `quest_runner`, so the database can be shared with other
//! programs. Migrations are numbered; `quest_runner.migrations` records those applied. They
//! run in one transaction under a transaction-level advisory lock, so runners starting at
//! once apply each migration exactly once (the others wait, then find nothing to do), and a
//! migration that fails leaves the schema as it was. A database migrated by a newer runner
//! than this one is refused: its tables may mean things this runner does not know.
//!
//! Never edit a released migration: add the next one.

use tokio_postgres::{Client, GenericClient};

use super::target::error_text;

/// The advisory lock that serialises migrations (an arbitrary constant: "quest-runner" in
/// ASCII, truncated).
const MIGRATION_LOCK: i64 = 0x7175_6573_742d_7275;

pub const SCHEMA: &str = "quest_runner";

/// The channel a `NOTIFY` goes to whenever a job becomes `queued` (submitted, requeued).
pub const QUEUED_CHANNEL: &str = "quest_runner_queued";
/// The channel a `NOTIFY` with the claim's token goes to when a running job's cancel is
/// requested.
pub const CANCEL_CHANNEL: &str = "quest_runner_cancel";

/// (version, name, SQL), in order.
pub const MIGRATIONS: &[(i32, &str, &str)] = &[
    (1, "jobs, attempts, logs, runners", V1),
    (2, "logs: the job's network and model logs", V2),
    (
        3,
        "bundles: a finished job's commits, for export from any host",
        V3,
    ),
];

/// `export --bundle` from any host: a finished job's commits, as a git bundle, beside its row.
const V3: &str = r#"
CREATE TABLE quest_runner.bundles (
    job_id     text PRIMARY KEY REFERENCES quest_runner.jobs (id) ON DELETE CASCADE,
    head       text NOT NULL,
    bundle     bytea NOT NULL,
    stored_at  timestamptz NOT NULL DEFAULT now()
);
"#;

/// `logs --network` and `logs --model` from any host: the job's network and model logs are
/// shipped beside the agent's streams.
const V2: &str = r#"
ALTER TABLE quest_runner.logs DROP CONSTRAINT logs_stream_check;
ALTER TABLE quest_runner.logs ADD CONSTRAINT logs_stream_check
    CHECK (stream IN ('agent', 'transcript', 'network', 'model'));
"#;

const V1: &str = r#"
CREATE TABLE quest_runner.jobs (
    id           text PRIMARY KEY,
    -- Submission order: the queue is first in, first out, but for cache-aware claiming.
    seq          bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    -- The job as submitted (the job file's fields); checked when a runner claims it.
    spec         jsonb NOT NULL,
    state        text NOT NULL DEFAULT 'queued'
                 CHECK (state IN ('queued', 'running', 'done', 'failed', 'cancelled', 'rejected')),
    submitted_at timestamptz NOT NULL DEFAULT now(),
    -- When the job was queued: its submission (a requeue keeps it: the job keeps its place).
    queued_at    timestamptz NOT NULL DEFAULT now(),
    -- Runs started so far (the attempts table has one row each).
    attempts     integer NOT NULL DEFAULT 0,
    -- The running attempt's claim: a token only its runner knows, the runner's persistent id
    -- (one per state directory) and its process's session id, and until when it holds it.
    claim        text,
    runner       text,
    session      text,
    lease_until  timestamptz,
    cancel_requested_at timestamptz,
    -- The job's result (a JobResult), or one the runner made up for a job it did not run.
    result       jsonb,
    -- Why a row was rejected (not a valid job).
    reason       text,
    finished_at  timestamptz,
    repo         text GENERATED ALWAYS AS (spec ->> 'repo') STORED,
    rev          text GENERATED ALWAYS AS (spec ->> 'rev') STORED,
    account      text GENERATED ALWAYS AS (spec ->> 'account') STORED,
    CHECK ((state = 'running') = (claim IS NOT NULL AND lease_until IS NOT NULL)),
    CHECK ((state IN ('queued', 'running')) = (finished_at IS NULL))
);
CREATE INDEX jobs_queued ON quest_runner.jobs (seq) WHERE state = 'queued';
CREATE INDEX jobs_running ON quest_runner.jobs (lease_until) WHERE state = 'running';
CREATE INDEX jobs_finished ON quest_runner.jobs (finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE quest_runner.attempts (
    job_id     text NOT NULL REFERENCES quest_runner.jobs (id) ON DELETE CASCADE,
    number     integer NOT NULL,
    host       text NOT NULL,
    pid        integer NOT NULL,
    runner     text NOT NULL,
    session    text NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    ended_at   timestamptz,
    -- The result's outcome, or interrupted (given back), lost (its runner stopped renewing
    -- the lease), rejected (not a valid job).
    outcome    text,
    reason     text,
    PRIMARY KEY (job_id, number)
);

-- The agent's log and event stream of each attempt, in chunks of at most 256 KiB, at most
-- 8 MiB a stream (a last chunk says where the rest was cut).
CREATE TABLE quest_runner.logs (
    job_id  text NOT NULL,
    attempt integer NOT NULL,
    stream  text NOT NULL CHECK (stream IN ('agent', 'transcript')),
    seq     integer NOT NULL,
    data    bytea NOT NULL,
    PRIMARY KEY (job_id, attempt, stream, seq),
    FOREIGN KEY (job_id, attempt) REFERENCES quest_runner.attempts (job_id, number) ON DELETE CASCADE
);

-- The runners serving the queue: where, and which accounts they run jobs for (`submit`
-- refuses a job no runner has the account of).
CREATE TABLE quest_runner.runners (
    session    text PRIMARY KEY,
    runner     text NOT NULL,
    host       text NOT NULL,
    pid        integer NOT NULL,
    state_dir  text NOT NULL,
    accounts   jsonb NOT NULL,
    version    text NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    seen_at    timestamptz NOT NULL DEFAULT now()
);

-- Runners LISTEN instead of polling. Within a transaction equal notifications fold into one,
-- so a thousand jobs submitted at once wake each runner once.
CREATE FUNCTION quest_runner.notify_queued() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('quest_runner_queued', '');
    RETURN NULL;
END
$$;
CREATE TRIGGER jobs_notify_queued AFTER INSERT OR UPDATE OF state ON quest_runner.jobs
    FOR EACH ROW WHEN (NEW.state = 'queued') EXECUTE FUNCTION quest_runner.notify_queued();

CREATE FUNCTION quest_runner.notify_cancel() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('quest_runner_cancel', NEW.claim);
    RETURN NULL;
END
$$;
CREATE TRIGGER jobs_notify_cancel AFTER UPDATE OF cancel_requested_at ON quest_runner.jobs
    FOR EACH ROW WHEN (NEW.state = 'running' AND NEW.cancel_requested_at IS NOT NULL
                       AND OLD.cancel_requested_at IS NULL)
    EXECUTE FUNCTION quest_runner.notify_cancel();
"#;

#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("{what}: {message}")]
    Sql { what: String, message: String },
    #[error(
        "the queue database is at schema version {found}, newer than this runner's {known}: \
         upgrade this runner (a newer runner migrated it)"
    )]
    Newer { found: i32, known: i32 },
}

fn sql(what: impl Into<String>) -> impl FnOnce(tokio_postgres::Error) -> SchemaError {
    let what = what.into();
    move |e| SchemaError::Sql {
        what,
        message: error_text(&e),
    }
}

/// The newest migration this runner knows.
pub fn latest() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.0)
}

/// The schema's version, or `None` before the first migration.
pub async fn version(client: &impl GenericClient) -> Result<Option<i32>, SchemaError> {
    let exists: bool = client
        .query_one(
            "SELECT to_regclass('quest_runner.migrations') IS NOT NULL",
            &[],
        )
        .await
        .map_err(sql("looking for quest_runner.migrations"))?
        .get(0);
    if !exists {
        return Ok(None);
    }
    let v: i32 = client
        .query_one(
            "SELECT coalesce(max(version), 0) FROM quest_runner.migrations",
            &[],
        )
        .await
        .map_err(sql("reading the schema version"))?
        .get(0);
    Ok(Some(v))
}

/// Brings the schema to [`latest`]; returns the versions it applied (empty when another
/// runner already had).
pub async fn migrate(client: &mut Client) -> Result<Vec<i32>, SchemaError> {
    // Up to date (the common case): no lock, no DDL, no privilege beyond reading.
    match version(client).await? {
        Some(v) if v == latest() => return Ok(Vec::new()),
        Some(v) if v > latest() => {
            return Err(SchemaError::Newer {
                found: v,
                known: latest(),
            })
        }
        _ => {}
    }
    let tx = client
        .transaction()
        .await
        .map_err(sql("starting the migration"))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(sql("waiting for the migration lock"))?;
    // CREATE SCHEMA IF NOT EXISTS needs the right to create schemas even when it exists; a
    // role that an administrator gave the schema to needs no more than that.
    let exists = tx
        .query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&SCHEMA])
        .await
        .map_err(sql("looking for the schema"))?
        .is_some();
    if !exists {
        tx.batch_execute(&format!("CREATE SCHEMA {SCHEMA}"))
            .await
            .map_err(sql(format!("creating the schema {SCHEMA}")))?;
    }
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS quest_runner.migrations (
             version    integer PRIMARY KEY,
             name       text NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now())",
    )
    .await
    .map_err(sql("creating quest_runner.migrations"))?;
    let current = version(&tx).await?.unwrap_or(0);
    if current > latest() {
        return Err(SchemaError::Newer {
            found: current,
            known: latest(),
        });
    }
    let mut applied = Vec::new();
    for (version, name, text) in MIGRATIONS.iter().filter(|m| m.0 > current) {
        tx.batch_execute(text)
            .await
            .map_err(sql(format!("applying migration {version} ({name})")))?;
        tx.execute(
            "INSERT INTO quest_runner.migrations (version, name) VALUES ($1, $2)",
            &[version, name],
        )
        .await
        .map_err(sql(format!("recording migration {version}")))?;
        applied.push(*version);
    }
    tx.commit().await.map_err(sql("committing the migration"))?;
    Ok(applied)
}
