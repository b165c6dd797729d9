//! A finished job's commits stored in the queue's database with its end, as a git bundle (the
//! commits above the job's revision, `export --bundle`'s format), so that
//! `quest-runner export <id> --bundle FILE` works from any host, not only the one that ran it
//! (issue 29). The bundle is made from the shared clone's verified copy of the commits, as a
//! local export is, after the push; a bundle over [`MAX_BYTES`] is not stored (the host that
//! ran the job still exports it). A job's row going (`gc`) takes its bundle with it.

use tokio_postgres::Client;

use super::admin::PgError;
use super::Shared;
use crate::deliver::{export, JobWork};
use crate::run::JobResult;

/// The largest bundle stored.
pub const MAX_BYTES: usize = 64 << 20;

/// Stores the bundle of `result`'s commits, when it has any. Never the job's failure: what
/// goes wrong is logged, and the job's work stays on this host.
pub(super) async fn store(shared: &Shared, result: &JobResult) {
    let id = result.job_id.as_str();
    if let Err(why) = try_store(shared, result).await {
        tracing::warn!(
            job = id,
            "its commits are not stored for export from other hosts: {why}"
        );
    }
}

async fn try_store(shared: &Shared, result: &JobResult) -> Result<(), String> {
    let (Some(head), Some(repo), Some(trust)) = (&result.head, &result.repo, result.trust) else {
        return Ok(());
    };
    if result.commits.is_empty() {
        return Ok(());
    }
    let work = JobWork::new(
        &shared.state,
        &result.job_id,
        repo,
        &result.rev,
        head,
        trust,
    );
    let dir = tempfile::tempdir().map_err(|e| format!("a temp dir: {e}"))?;
    let file = dir.path().join("job.bundle");
    export::bundle(&work, &file)
        .await
        .map_err(|e| e.to_string())?;
    let size = std::fs::metadata(&file).map_err(|e| e.to_string())?.len();
    if size > MAX_BYTES as u64 {
        return Err(format!("its bundle is {size} bytes, over {MAX_BYTES}"));
    }
    let bytes = std::fs::read(&file).map_err(|e| e.to_string())?;
    let (id, head) = (result.job_id.clone(), head.clone());
    shared
        .session
        .run("storing the job's bundle", |c| async move {
            c.execute(
                "INSERT INTO quest_runner.bundles (job_id, head, bundle) VALUES ($1, $2, $3)
                 ON CONFLICT (job_id) DO UPDATE
                 SET head = excluded.head, bundle = excluded.bundle, stored_at = now()",
                &[&id, &head, &bytes],
            )
            .await
        })
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The stored bundle of job `id` and the head it holds, if one is stored.
pub async fn fetch(client: &Client, id: &str) -> Result<Option<(String, Vec<u8>)>, PgError> {
    let row = client
        .query_opt(
            "SELECT head, bundle FROM quest_runner.bundles WHERE job_id = $1",
            &[&id],
        )
        .await
        .map_err(|e| PgError::Sql {
            what: "reading the job's bundle".into(),
            message: e.to_string(),
        })?;
    Ok(row.map(|r| (r.get(0), r.get(1))))
}
