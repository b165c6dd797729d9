//! `quest-runner export`: a job's commits as a file a person carries to a laptop, for hosts
//! that may not push. A bundle holds the commits above the job's revision (which the bundle
//! names as its prerequisite) under `refs/quest/jobs/<id>`, for `git fetch FILE`; patches
//! are `git format-patch` of the same range, for `git am`.

use std::path::{Path, PathBuf};

use super::{DeliverError, JobWork, DELIVER_GIT_LIMIT};
use crate::util::io::IoContext;

/// Writes the bundle of `work` to `file`, which must not exist. It is made beside `file` and
/// linked in at the end, so `file` is the whole bundle or nothing.
pub async fn bundle(work: &JobWork, file: &Path) -> Result<PathBuf, DeliverError> {
    if file.symlink_metadata().is_ok() {
        return Err(DeliverError::Exists(file.to_path_buf()));
    }
    let git = work.checked_git().await?;
    let file = std::path::absolute(file).at("resolving", file)?;
    let name = file.file_name().map(|n| n.to_string_lossy().into_owned());
    let partial = file.with_file_name(format!(
        ".{}.partial-{}",
        name.unwrap_or_default(),
        std::process::id()
    ));
    let partial_arg = partial.to_string_lossy().into_owned();
    let made = git
        .output_within(
            &[
                "bundle",
                "create",
                "--quiet",
                &partial_arg,
                &work.refname(),
                &format!("^{}", work.base),
            ],
            DELIVER_GIT_LIMIT,
        )
        .await;
    let linked = made.map_err(DeliverError::from).and_then(|_| {
        // A hard link does not replace what appeared at `file` meanwhile.
        std::fs::hard_link(&partial, &file).map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => DeliverError::Exists(file.clone()),
            _ => crate::util::io::IoError::at("linking", &file, e).into(),
        })
    });
    let _ = std::fs::remove_file(&partial);
    linked.map(|()| file)
}

/// Writes one `git format-patch` file per commit of `work` into `dir` (made here; an existing
/// directory must be empty); returns the files, oldest first.
pub async fn patches(work: &JobWork, dir: &Path) -> Result<Vec<PathBuf>, DeliverError> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(DeliverError::Exists(dir.to_path_buf()));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).at("creating", dir)?;
        }
        Err(e) => return Err(crate::util::io::IoError::at("reading", dir, e).into()),
    }
    let git = work.checked_git().await?;
    let dir = std::path::absolute(dir).at("resolving", dir)?;
    let listed = git
        .output_within(
            &[
                "format-patch",
                "--no-signature",
                "--no-color",
                "-o",
                &dir.to_string_lossy(),
                &format!("{}..{}", work.base, work.head),
            ],
            DELIVER_GIT_LIMIT,
        )
        .await?;
    Ok(listed.lines().map(PathBuf::from).collect())
}
