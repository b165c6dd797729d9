//! Killing, removing and sweeping groups: a job's at its end, and what dead runners (or a
//! job's agent, outside its sandbox) left behind.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::plan::is_base_name;
use super::setup::{not_found, write};
use super::{CgroupError, EMPTY_TIMEOUT, JOB_PREFIX};
use crate::util::io::IoError;

/// The pids in group `dir` (its own members, not its children's).
pub fn members(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

fn populated(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("cgroup.events"))
        .map(|t| t.lines().any(|l| l == "populated 1"))
        .unwrap_or(false)
}

/// SIGKILLs every process in `dir` and its children groups, then waits until it is empty.
/// Returns whether it had any process.
pub fn kill(dir: &Path) -> Result<bool, CgroupError> {
    if !populated(dir) {
        return Ok(false);
    }
    let kill_file = dir.join("cgroup.kill");
    match write(&kill_file, "1") {
        Ok(()) => {}
        // Before Linux 5.14 there is no cgroup.kill: signal the members one by one (a
        // process forking meanwhile is caught by the next round of the wait below).
        Err(e) if not_found(&e) => signal_members(dir),
        Err(e) => return Err(e),
    }
    let started = Instant::now();
    while populated(dir) {
        if started.elapsed() > EMPTY_TIMEOUT {
            return Err(CgroupError::NotEmptied {
                path: dir.to_path_buf(),
                waited: started.elapsed(),
            });
        }
        if !kill_file.exists() {
            signal_members(dir);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(true)
}

fn signal_members(dir: &Path) {
    for pid in members(dir) {
        if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
        }
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                signal_members(&e.path());
            }
        }
    }
}

/// Removes an emptied group and any groups a job made inside it (deepest first).
pub fn remove(dir: &Path) -> Result<(), CgroupError> {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove(&e.path())?;
            }
        }
    }
    match std::fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(IoError::at("removing", dir, e).into()),
    }
}

/// Kills and removes group `dir`.
pub fn kill_and_remove(dir: &Path) -> Result<bool, CgroupError> {
    let had = kill(dir)?;
    remove(dir)?;
    Ok(had)
}

/// The job groups under `base`, as (job id, directory). On start, those of jobs no live
/// runner holds are a dead runner's leftovers (see `serve`'s sweep).
pub fn job_groups(base: &Path) -> Vec<(String, PathBuf)> {
    let mut found: Vec<(String, PathBuf)> = subgroups(base)
        .into_iter()
        .filter_map(|(name, dir)| Some((job_id(&name?)?.to_string(), dir)))
        .collect();
    found.sort();
    found
}

/// The groups under `base` that are no job's: no runner makes them, so they are what a
/// job made beside its own group (its agent runs with the runner's uid, outside the
/// sandbox) and no runner will ever remove them but the start sweep.
pub fn stray_groups(base: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = subgroups(base)
        .into_iter()
        .filter(|(name, _)| name.as_deref().and_then(job_id).is_none())
        .map(|(_, dir)| dir)
        .collect();
    found.sort();
    found
}

/// The job id a group's name stands for, if it is one [`super::JobCgroup::create`] makes.
fn job_id(name: &str) -> Option<&str> {
    name.strip_prefix(JOB_PREFIX)
        .filter(|id| crate::job::check_id(id).is_ok())
}

/// The groups directly under `dir`, with their names where those are UTF-8.
fn subgroups(dir: &Path) -> Vec<(Option<String>, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| (e.file_name().into_string().ok(), e.path()))
        .collect()
}

/// What [`remove_empty_bases`] did.
#[derive(Debug, Default)]
pub struct Swept {
    /// Empty state-dir groups removed.
    pub removed: Vec<PathBuf>,
    /// Those still in use (processes, or job groups), left alone.
    pub in_use: Vec<PathBuf>,
    /// Those that could not be removed for another reason.
    pub failed: Vec<CgroupError>,
}

/// Removes the state-dir groups (`quest-runner.<key>`) in `own` other than `keep` that hold
/// no process and no job group. Each is simply `rmdir`ed: the kernel refuses (EBUSY) a group
/// with members or children, atomically, so a live runner's busy group is never touched and
/// a check beforehand could only race. Such a refusal means "in use", not an error.
pub fn remove_empty_bases(own: &Path, keep: &Path) -> Swept {
    let mut swept = Swept::default();
    let entries = match std::fs::read_dir(own) {
        Ok(entries) => entries,
        Err(e) => {
            swept.failed.push(IoError::at("listing", own, e).into());
            return swept;
        }
    };
    for e in entries.flatten() {
        let dir = e.path();
        let ours = e.file_name().to_str().is_some_and(is_base_name);
        if !ours || dir == keep || !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        match std::fs::remove_dir(&dir) {
            Ok(()) => swept.removed.push(dir),
            // Removed meanwhile by another runner's sweep, or its own exit.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            // EBUSY is cgroupfs's answer; ENOTEMPTY a plain directory's.
            Err(e)
                if matches!(
                    rustix::io::Errno::from_io_error(&e),
                    Some(rustix::io::Errno::BUSY | rustix::io::Errno::NOTEMPTY)
                ) =>
            {
                swept.in_use.push(dir)
            }
            Err(e) => swept.failed.push(IoError::at("removing", &dir, e).into()),
        }
    }
    swept.removed.sort();
    swept.in_use.sort();
    swept
}
