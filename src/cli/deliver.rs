//! `quest-runner export` and `quest-runner push`: a finished job's commits out of this host,
//! found by its result in `<state>/jobs/<id>/result.json` (written by `run` and by `serve`
//! alike) and the shared clone's `refs/quest/jobs/<id>`.

use std::path::{Path, PathBuf};

use super::{Context, Failure};
use crate::deliver::{export, DeliverError, JobWork};
use crate::exit::Exit;
use crate::run::JobResult;

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["bundle", "patch"])))]
pub struct ExportArgs {
    pub id: String,
    /// Write a git bundle of the job's commits on its revision (`git fetch FILE`).
    #[arg(long, value_name = "FILE")]
    pub bundle: Option<PathBuf>,
    /// Write `git format-patch` files of the job's commits into DIR (`git am DIR/*`).
    #[arg(long, value_name = "DIR")]
    pub patch: Option<PathBuf>,
}

fn failure(e: DeliverError) -> Failure {
    let code = match e {
        DeliverError::Git(_) | DeliverError::Io(_) => Exit::Failed,
        _ => Exit::BadInput,
    };
    Failure::new(code, e)
}

/// The job's saved result and its work, or why there is none on this host.
fn finished_job(ctx: &Context, id: &str) -> Result<(PathBuf, JobResult, JobWork), Failure> {
    let bad = |m: String| Failure::new(Exit::BadInput, m);
    crate::job::check_id(id)?;
    let dir = crate::workspace::job_root(&ctx.state, id);
    if !dir.is_dir() {
        return Err(bad(format!(
            "unknown job {id}: no {} on this host (a job's work stays on the host that ran it)",
            dir.display()
        )));
    }
    let file = dir.join("result.json");
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(bad(format!(
                "job {id} has not finished (no {})",
                file.display()
            )))
        }
        Err(e) => {
            return Err(Failure::new(
                Exit::Failed,
                format!("reading {}: {e}", file.display()),
            ))
        }
    };
    let result: JobResult = serde_json::from_str(&text).map_err(|e| {
        Failure::new(
            Exit::Failed,
            format!("{} is not a result: {e}", file.display()),
        )
    })?;
    let incomplete = |what| {
        failure(DeliverError::Incomplete {
            id: id.to_string(),
            what,
        })
    };
    let repo = result
        .repo
        .clone()
        .ok_or_else(|| incomplete("repository"))?;
    let trust = result.trust.ok_or_else(|| incomplete("trust"))?;
    let head = result
        .head
        .clone()
        .ok_or_else(|| failure(DeliverError::NoCommits(id.to_string())))?;
    let work = JobWork::new(&ctx.state, id, &repo, &result.rev, &head, trust);
    Ok((file, result, work))
}

/// `quest-runner export ID --bundle FILE | --patch DIR`.
pub fn export(ctx: Context, args: ExportArgs) -> Result<(), Failure> {
    let here = crate::job::check_id(&args.id).is_ok()
        && crate::workspace::job_root(&ctx.state, &args.id).is_dir();
    if !here && ctx.config.queue.is_some() {
        return export_stored(&ctx, &args);
    }
    let (_, _, work) = finished_job(&ctx, &args.id)?;
    super::block_on_interruptible(async {
        if let Some(file) = &args.bundle {
            let file = export::bundle(&work, file).await.map_err(failure)?;
            super::out(file.display())?;
        }
        if let Some(dir) = &args.patch {
            for patch in export::patches(&work, dir).await.map_err(failure)? {
                super::out(patch.display())?;
            }
        }
        Ok(())
    })
}

/// `export` of a job another host ran (the PostgreSQL queue): the bundle stored with its end.
/// Patches need the revision's objects, which only a clone of the repository has.
fn export_stored(ctx: &Context, args: &ExportArgs) -> Result<(), Failure> {
    let id = args.id.clone();
    let bad = |m: String| Failure::new(Exit::BadInput, m);
    if args.patch.is_some() {
        return Err(bad(format!(
            "job {id} ran on another host: --patch needs its revision's objects, which only a \
             clone of the repository has; export --bundle FILE here, `git fetch FILE` it into a \
             clone, and `git format-patch` there"
        )));
    }
    let Some(file) = &args.bundle else {
        return Ok(());
    };
    let super::queue::Queue::Pg(db) = super::queue::Queue::open(ctx)? else {
        return Err(bad(format!("unknown job {id}: not on this host")));
    };
    let asked = id.clone();
    let stored =
        db.run(|client| async move { crate::serve::pg::bundle::fetch(&client, &asked).await })?;
    let Some((head, bytes)) = stored else {
        return Err(bad(format!(
            "job {id} ran on another host and the queue holds no bundle of its commits (it made \
             none, its bundle was over the size stored, or it ended on an older runner): export \
             it on the host that ran it"
        )));
    };
    write_new(file, &bytes)?;
    tracing::info!(job = %id, %head, "the bundle stored with the job's end");
    super::out(
        std::path::absolute(file)
            .unwrap_or_else(|_| file.clone())
            .display(),
    )
}

/// Writes `bytes` to `file`, which must not exist: whole, or not at all.
fn write_new(file: &Path, bytes: &[u8]) -> Result<(), Failure> {
    use std::io::Write;
    let failed = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::AlreadyExists => failure(DeliverError::Exists(file.to_path_buf())),
        _ => Failure::new(Exit::Failed, format!("writing {}: {e}", file.display())),
    };
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(file)
        .map_err(failed)?;
    let written = out.write_all(bytes).and_then(|()| out.sync_all());
    if let Err(e) = written {
        let _ = std::fs::remove_file(file);
        return Err(failed(e));
    }
    Ok(())
}

/// `quest-runner push ID`: the job's push again (after a failed one, or once its repository
/// has push settings); the outcome replaces the result's `push` and is printed.
pub fn push(ctx: Context, id: String) -> Result<(), Failure> {
    let (file, mut result, work) = finished_job(&ctx, &id)?;
    let Some(config) = crate::config::push::for_repo(&ctx.config.push, &work.repo) else {
        return Err(Failure::new(
            Exit::BadInput,
            format!(
                "the config has no push settings for {} (push.<repo>)",
                work.repo
            ),
        ));
    };
    let record = super::block_on_interruptible(async {
        Ok(crate::deliver::push_job(&work, config, result.push.as_ref()).await)
    })?;
    result.push = Some(record.clone());
    save(&file, &result)?;
    super::out(super::json(&record))?;
    match record.error {
        None => Ok(()),
        Some(why) => Err(Failure::new(Exit::Failed, why)),
    }
}

fn save(file: &Path, result: &JobResult) -> Result<(), Failure> {
    let dir = file.parent().unwrap_or(Path::new("."));
    let data = serde_json::to_vec_pretty(result).unwrap_or_default();
    crate::util::fs::write_atomically(dir, file, &data)
        .map_err(|e| Failure::new(Exit::Failed, format!("writing {}: {e}", file.display())))
}
