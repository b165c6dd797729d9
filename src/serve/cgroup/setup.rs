//! The once-per-`serve` part of a plan (the runner's leaf, the controllers, the state dir's
//! group), and the cgroupfs write that every other part uses.

use std::path::Path;

use super::{CgroupError, CgroupPlan};
use crate::util::io::{IoContext, IoError};

/// Writes `value` to the cgroup file `path`, which must exist: opened without `O_CREAT`,
/// which cgroupfs answers with EACCES for a file it does not have (a controller not
/// enabled, a kernel without `cgroup.kill`) where ENOENT says what is wrong.
pub(super) fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
    write_raw(path, value).map_err(|source| CgroupError::Write {
        path: path.to_path_buf(),
        value: value.to_string(),
        source,
    })
}

fn write_raw(path: &Path, value: &str) -> std::io::Result<()> {
    use std::io::Write;
    // No O_CREAT, no O_TRUNC; a value this short goes in one write(2), as cgroupfs wants.
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(value.as_bytes())
}

/// Whether `e` is a missing file's error, [`write()`]'s or another.
pub(super) fn not_found(e: &CgroupError) -> bool {
    match e {
        CgroupError::Io(e) => e.kind() == std::io::ErrorKind::NotFound,
        CgroupError::Write { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
        _ => false,
    }
}

/// Carries out the once-per-`serve` part of `plan`: moves the runner into its leaf,
/// enables the controllers, creates the state dir's group.
pub fn setup(plan: &CgroupPlan) -> Result<(), CgroupError> {
    if let Some(leaf) = &plan.runner_leaf {
        mkdir(leaf)?;
        // Every process of `own` (the runner, and anything it started before now) goes,
        // until none is left; a process forked meanwhile is caught by the next round.
        let procs = plan.own.join("cgroup.procs");
        for _ in 0..10 {
            let pids = std::fs::read_to_string(&procs).at("reading", &procs)?;
            if pids.trim().is_empty() {
                break;
            }
            for pid in pids.split_whitespace() {
                match write_raw(&leaf.join("cgroup.procs"), pid) {
                    Ok(()) => {}
                    // Exited meanwhile.
                    Err(e)
                        if rustix::io::Errno::from_io_error(&e)
                            == Some(rustix::io::Errno::SRCH) => {}
                    Err(e) => return Err(IoError::at("moving the runner into", leaf, e).into()),
                }
            }
        }
    }
    let own_line = enable_line(plan, &plan.own);
    if !own_line.is_empty() {
        write(&plan.own.join("cgroup.subtree_control"), &own_line)?;
    }
    ensure_base(plan)
}

/// The `cgroup.subtree_control` line enabling what `plan` needs and `dir` lacks.
fn enable_line(plan: &CgroupPlan, dir: &Path) -> String {
    let current = std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
    plan.enable
        .iter()
        .filter(|c| !current.split_whitespace().any(|w| w == c.name()))
        .map(|c| format!("+{}", c.name()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// How often the state dir's group is made again when it vanishes while being set up.
pub(super) const BASE_TRIES: usize = 3;

/// Makes the state dir's group, with the jobs' controllers enabled, unless it is there.
/// While it is empty another state dir's runner may remove it ([`super::remove_empty_bases`]):
/// vanishing midway is retried.
pub(super) fn ensure_base(plan: &CgroupPlan) -> Result<(), CgroupError> {
    let control = plan.base.join("cgroup.subtree_control");
    let mut made_here = false;
    let mut tries = 0;
    loop {
        tries += 1;
        made_here |= mkdir(&plan.base)?;
        let line = enable_line(plan, &plan.base);
        if line.is_empty() {
            return Ok(());
        }
        match write(&control, &line) {
            Ok(()) => return Ok(()),
            // ENOENT is also the kernel's answer for a controller it cannot enable: retried
            // only when the group is really gone.
            Err(e) if not_found(&e) && !plan.base.exists() && tries < BASE_TRIES => {}
            Err(e) => {
                // A group without the controllers would fail every job's limits: do not
                // leave one made here (one with a dead runner's jobs refuses, and stays).
                if made_here {
                    let _ = std::fs::remove_dir(&plan.base);
                }
                return Err(e);
            }
        }
    }
}

/// Makes group `dir` unless it is there; says whether it made it.
fn mkdir(dir: &Path) -> Result<bool, CgroupError> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(IoError::at("creating", dir, e).into()),
    }
}
