//! One job's group: made with its limits before the agent starts, joined by the agent between
//! fork and exec, and read for what fired after its last process is gone.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use super::setup::{ensure_base, not_found, write, BASE_TRIES};
use super::sweep::{kill, kill_and_remove, members, remove};
use super::{CgroupError, CgroupPlan, JOB_PREFIX, OPTIONAL_FILES};
use crate::util::io::IoError;

/// What a job's group counted, read after its processes are gone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Report {
    /// `memory.events` `oom_kill`: processes the OOM killer killed at memory.max.
    pub oom_kills: u64,
    /// `memory.events` `oom_group_kill` (Linux 5.19+): times it killed the whole job
    /// (`memory.oom.group`).
    pub oom_group_kills: u64,
    /// `pids.events` `max`: forks refused at pids.max.
    pub pids_refused: u64,
    /// `cpu.stat` `nr_throttled` / `throttled_usec`: periods cpu.max held the job back.
    pub cpu_throttled: u64,
    pub cpu_throttled_usec: u64,
}

impl Report {
    pub fn read(dir: &Path) -> Report {
        let field = |file: &str, key: &str| -> u64 {
            std::fs::read_to_string(dir.join(file))
                .ok()
                .and_then(|t| {
                    t.lines().find_map(|l| {
                        let (k, v) = l.split_once(' ')?;
                        (k == key).then(|| v.trim().parse().ok()).flatten()
                    })
                })
                .unwrap_or(0)
        };
        Report {
            oom_kills: field("memory.events", "oom_kill"),
            oom_group_kills: field("memory.events", "oom_group_kill"),
            pids_refused: field("pids.events", "max"),
            cpu_throttled: field("cpu.stat", "nr_throttled"),
            cpu_throttled_usec: field("cpu.stat", "throttled_usec"),
        }
    }

    /// The limit that fired, as the result's `limit_fired` names it, and one line saying
    /// so. The memory limit first: an OOM kill ends processes, a refused fork may not.
    pub fn fired(&self, plan: &CgroupPlan) -> Option<(&'static str, String)> {
        let value = |file: &str| {
            plan.job_files
                .iter()
                .find(|(f, _)| *f == file)
                .map_or("?".to_string(), |(_, v)| v.clone())
        };
        if self.oom_kills > 0 {
            let whom = if self.oom_group_kills > 0 {
                format!(
                    "the whole job, {} process(es), as memory.oom.group asks",
                    self.oom_kills
                )
            } else {
                format!("{} process(es) of the job", self.oom_kills)
            };
            return Some((
                "memory",
                format!(
                    "the memory limit fired: memory.max={} (the kernel's OOM killer killed \
                     {whom})",
                    value("memory.max"),
                ),
            ));
        }
        if self.pids_refused > 0 {
            return Some((
                "pids",
                format!(
                    "the process-count limit fired: pids.max={} refused {} fork(s)",
                    value("pids.max"),
                    self.pids_refused
                ),
            ));
        }
        None
    }

    /// A note when cpu.max slowed the job (it throttles, never kills).
    pub fn throttled(&self) -> Option<String> {
        (self.cpu_throttled > 0).then(|| {
            format!(
                "cpu.max throttled the job {} time(s), {} ms in all (it slows a job, never kills it)",
                self.cpu_throttled,
                self.cpu_throttled_usec / 1000
            )
        })
    }
}

/// One job's group, from before its agent starts until after its last process is gone.
#[derive(Debug)]
pub struct JobCgroup {
    pub dir: PathBuf,
    procs: CString,
}

impl JobCgroup {
    /// The group of job `id` under `plan.base`, with the job's limits written. A group of the
    /// same name left by a dead runner (whose job this runner now holds) is killed and
    /// removed first.
    ///
    /// Everything that can be checked is checked before the group is made, and a group made
    /// here is removed again if its limits cannot be written: an error leaves nothing.
    pub fn create(plan: &CgroupPlan, id: &str) -> Result<JobCgroup, CgroupError> {
        // The id names a directory: one that is not a job id (`/`, `..`) would put the group
        // elsewhere. Job ids are checked on intake; this is the last line.
        crate::job::check_id(id).map_err(|e| CgroupError::BadId(id.to_string(), e.to_string()))?;
        let group = JobCgroup::at(plan.base.join(format!("{JOB_PREFIX}{id}")))?;
        let dir = &group.dir;
        if dir.exists() {
            kill_and_remove(dir)?;
        }
        let mut tries = 0;
        loop {
            tries += 1;
            match std::fs::create_dir(dir) {
                Ok(()) => break,
                // The state dir's group is gone: removed while empty by another state
                // dir's runner starting (or by hand). Make it again.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && tries < BASE_TRIES => {
                    ensure_base(plan)?
                }
                Err(e) => return Err(IoError::at("creating", dir, e).into()),
            }
        }
        for (file, value) in &plan.job_files {
            match write(&dir.join(file), value) {
                Ok(()) => {}
                Err(e) if not_found(&e) && OPTIONAL_FILES.contains(file) => {}
                Err(e) => {
                    // Nothing is in it yet: a plain rmdir removes it.
                    let _ = std::fs::remove_dir(dir);
                    return Err(e);
                }
            }
        }
        Ok(group)
    }

    /// An existing group (a test's, or one being swept).
    pub fn at(dir: PathBuf) -> Result<JobCgroup, CgroupError> {
        let procs = CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())
            .map_err(|_| CgroupError::BadPath(dir.clone()))?;
        Ok(JobCgroup { dir, procs })
    }

    /// Makes `cmd`'s child enter this group before it execs, so the program and all it
    /// starts are members from their first instruction.
    pub fn place(&self, cmd: &mut std::process::Command) {
        place_in(&self.procs, cmd);
    }

    /// [`JobCgroup::place`], as a hook for every command of the job.
    pub fn placing(&self) -> crate::process::CommandHook {
        let procs = self.procs.clone();
        std::sync::Arc::new(move |cmd: &mut std::process::Command| place_in(&procs, cmd))
    }

    /// The pids in the group now.
    pub fn members(&self) -> Vec<u32> {
        members(&self.dir)
    }

    /// Kills every member, waits until the group is empty, reads what it counted and
    /// removes it.
    pub fn finish(self) -> Result<Report, CgroupError> {
        kill(&self.dir)?;
        let report = Report::read(&self.dir);
        remove(&self.dir)?;
        Ok(report)
    }
}

/// `cmd`'s child writes itself into `procs` (a group's `cgroup.procs`) before it execs.
fn place_in(procs: &CString, cmd: &mut std::process::Command) {
    let procs = procs.clone();
    // SAFETY: only open, write and close between fork and exec (async-signal-safe); the path
    // was allocated before the fork.
    unsafe {
        cmd.pre_exec(move || {
            use rustix::fs::{Mode, OFlags};
            let fd = rustix::fs::open(&procs, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
            // "0" is the writing process itself.
            match rustix::io::write(&fd, b"0")? {
                1 => Ok(()),
                _ => Err(std::io::ErrorKind::WriteZero.into()),
            }
        });
    }
}
