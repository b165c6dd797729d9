//! The jobs and configuration the queue tests submit (tests/suite/pg_queue.rs,
//! tests/suite/soak.rs): one account, a made-up repository and revision, nothing that runs.

use quest_runner::config::{Config, QueueConfig};
use quest_runner::job::JobSpec;
use quest_runner::serve::pg::target::PgTarget;
use serde_json::json;

use super::postgres::Postgres;

/// The revision every queued job names; nothing fetches it.
pub const REV: &str = "0123456789abcdef0123456789abcdef01234567";

/// A configuration with the one account the jobs name, and no queue.
pub fn config() -> Config {
    serde_json::from_value(json!({
        "accounts": {"main": {"agent": "claude", "api_key_file": "/run/k"}}
    }))
    .unwrap()
}

/// [`config`] with the PostgreSQL queue of `pg`, over its socket, with the default lease.
pub fn pg_config(pg: &Postgres) -> Config {
    let mut config = config();
    config.queue = Some(QueueConfig {
        postgres: pg.conninfo(),
        password_file: None,
        lease: None,
    });
    config
}

/// Where [`pg_config`]'s queue is.
pub fn pg_target(pg: &Postgres) -> PgTarget {
    PgTarget::from_config(pg_config(pg).queue.as_ref().unwrap()).unwrap()
}

/// A trusted Claude Code job `id` of the account [`config`] has.
pub fn spec(id: &str) -> JobSpec {
    serde_json::from_value(json!({
        "id": id, "repo": "https://example.invalid/r.git", "rev": REV, "trust": "trusted",
        "agent": "claude", "account": "main", "prompt": "p",
    }))
    .unwrap()
}
