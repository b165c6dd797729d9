//! A job's build within its disk limits.
//!
//! What nix writes for a job is the job's, on disk as its own files are: the client's scratch
//! directory (its fetches' checkouts), the daemon's build directories, and what the build adds
//! to the repository's store — its outputs, its sandbox's directory, the paths it substitutes.
//! The job's disk watchdog ([`crate::disk::watch`]) counts them as it counts the job's files,
//! in bytes and in files, against `limits.disk` and `limits.disk_files` and the runner's
//! reserve; when it fires, the build is stopped and its error says which limit. The store is
//! shared by the repository's runs, so only what was added to it since the build began counts
//! (of two runs of one repository building at once, each counts both's additions: the same
//! tenant's, and the error errs towards stopping).
//!
//! `RLIMIT_FSIZE` of `limits.disk` on the daemon ([`super::daemon`]) stops a single file past
//! the limit at once, before any walk sees it.

use std::path::Path;

use crate::disk::watch::{Tree, Watchdog};
use crate::process::Captured;

use super::daemon::RunnerDaemon;
use super::{DevShellError, DevShells, Prepared};

/// The watchdog over what the run of `p` writes: its client's `scratch`, and its `daemon`'s
/// build directories and store. `None` for the operator's own run (no job), or where the job
/// has no disk limit.
pub(super) fn watchdog(
    shells: &DevShells,
    p: &Prepared,
    scratch: &Path,
    daemon: Option<&RunnerDaemon>,
) -> Option<Watchdog> {
    p.confine.as_ref()?;
    let daemon = daemon?;
    let trees = vec![
        Tree::new("nix scratch", scratch),
        Tree::new("nix build dirs", daemon.build_dir()),
        Tree::added_to("repository store", daemon.store().real_store_dir()),
    ];
    let id = format!("devshell {}", p.key);
    Watchdog::start(&id, trees, shells.disk, shells.disk_builds.clone())
}

/// Awaits `run` (nix, whose future stops it when dropped) unless `watchdog` fires first.
pub(super) async fn within<F>(
    run: F,
    watchdog: Option<Watchdog>,
) -> Result<F::Output, DevShellError>
where
    F: std::future::Future<Output = std::io::Result<Captured>>,
{
    let Some(mut watchdog) = watchdog else {
        return Ok(run.await);
    };
    tokio::select! {
        out = run => Ok(out),
        fired = watchdog.fired() => Err(DevShellError::LimitFired {
            message: format!("{} (while building the devShell)", fired.message),
        }),
    }
}

/// The error for a build that ran into `limits.disk` (`bytes`) as the largest file it may
/// write (SIGXFSZ, signal 25, or EFBIG where the builder ignores the signal); `None` for any
/// other failure.
pub(super) fn file_too_large(message: &str, bytes: Option<u64>) -> Option<DevShellError> {
    let bytes = bytes?;
    let hit = ["signal 25", "File size limit exceeded", "File too large"]
        .iter()
        .any(|m| message.contains(m));
    hit.then(|| DevShellError::LimitFired {
        message: format!(
            "the disk limit fired: a build of the devShell wrote a file larger than limits.disk \
             ({}), which bounds every file a build writes: {message}",
            crate::disk::human(bytes)
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_over_the_disk_limit_names_it() {
        let hit = file_too_large("builder failed due to signal 25", Some(1 << 20))
            .expect("signal 25 is SIGXFSZ")
            .to_string();
        assert!(
            hit.starts_with("the disk limit fired: ") && hit.contains("limits.disk (1 MiB)"),
            "{hit}"
        );
        assert!(file_too_large("builder failed with exit code 1", Some(1024)).is_none());
        assert!(file_too_large("signal 25", None).is_none());
    }
}
