//! Bounding what a job writes to disk (`limits.disk`), and keeping room for the next job
//! (`limits.disk_reserve`).
//!
//! A job writes its checkout, its private temp dirs, its own files (the agent's state and
//! transcript) and git data (the worktree's admin dir, objects and refs). Without a bound,
//! one job filling `/tmp` or the state dir's file system made a concurrent job fail at
//! `worktree add` with ENOSPC.
//!
//! How, and why this way. The kernel's per-directory bounds each need what the service user
//! does not have: a size-limited file system per job needs a loop mount (CAP_SYS_ADMIN in
//! the host's namespaces) or a tmpfs (RAM: a 10 GiB disk limit would be 10 GiB of memory,
//! charged to the job's memory.max); project quotas need a file system mounted with
//! `prjquota` and CAP_SYS_ADMIN to set a limit (`quotactl`). The systemd unit runs with no
//! capability at all, and a root-only mechanism would be tested by CI (root) but not used by
//! the service. So one path, for root and for the service user alike:
//! - the kernel bounds each file: RLIMIT_FSIZE at the limit on the agent and all it starts
//!   (EFBIG/SIGXFSZ) — one `fallocate -l 100G` or runaway log cannot take the disk at once;
//! - a watchdog ([`watch`]) measures the job's trees ([`usage`]) and stops the job with
//!   `limit_fired: "disk"` when they hold more than the limit. It walks when the job's file
//!   systems lose more than half the job's remaining headroom (checked every 50 ms, so a
//!   fast writer is caught within a tick or two and killed at once: SIGKILL, no grace), and
//!   otherwise every 5–120 s (100× the walk: at most 1% of a core);
//! - a reserve ([`Reserve`]): no job starts while a file system jobs write has less free,
//!   and while one is below it, the runner stops its job that has the most on it.
//!
//! What this does not do: be instantaneous. Between two ticks a job can write what the disk
//! takes in 50 ms (and more while a large tree is walked), or preallocate several files just
//! under the limit each; the reserve is the margin for that, and is why the default keeps
//! 1 GiB.

pub mod space;
pub mod usage;
pub mod watch;

use std::path::Path;

/// `limits.disk` when the config names none.
pub const DEFAULT_LIMIT: u64 = 10 << 30;
/// The default reserve: this much, or [`DEFAULT_RESERVE_PERCENT`] of the file system if that
/// is less (a small `/tmp` is not refused for good).
pub const DEFAULT_RESERVE: u64 = 1 << 30;
pub const DEFAULT_RESERVE_PERCENT: u64 = 5;

/// How much free space the runner keeps on a file system jobs write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserve {
    Off,
    /// [`DEFAULT_RESERVE`] or [`DEFAULT_RESERVE_PERCENT`] of the file system, the smaller.
    Default,
    Bytes(u64),
}

impl Reserve {
    /// The reserve on a file system of `size` bytes.
    pub fn bytes(self, size: u64) -> u64 {
        match self {
            Reserve::Off => 0,
            Reserve::Default => DEFAULT_RESERVE.min(size / 100 * DEFAULT_RESERVE_PERCENT),
            Reserve::Bytes(b) => b,
        }
    }

    fn describe(self) -> String {
        match self {
            Reserve::Off => "no reserve".into(),
            Reserve::Default => format!(
                "a reserve of {} or {DEFAULT_RESERVE_PERCENT}% of each file system, the smaller",
                human(DEFAULT_RESERVE)
            ),
            Reserve::Bytes(b) => format!("a reserve of {}", human(b)),
        }
    }
}

/// The disk limits of every job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskLimits {
    /// The most a job may have on disk at once; `None`: no limit.
    pub limit: Option<u64>,
    pub reserve: Reserve,
}

impl Default for DiskLimits {
    fn default() -> DiskLimits {
        DiskLimits {
            limit: Some(DEFAULT_LIMIT),
            reserve: Reserve::Default,
        }
    }
}

impl DiskLimits {
    /// Whether there is nothing to watch.
    pub fn is_off(&self) -> bool {
        self.limit.is_none() && self.reserve == Reserve::Off
    }

    /// One line for the log and `doctor`.
    pub fn summary(&self) -> String {
        let limit = match self.limit {
            Some(b) => format!(
                "limits.disk {} per job (a watchdog; RLIMIT_FSIZE {} per file)",
                human(b),
                human(b)
            ),
            None => "no per-job disk limit (limits.disk off)".into(),
        };
        format!("{limit}; {}", self.reserve.describe())
    }
}

/// Refuses to start a job while the file system of one of `dirs` has less than the reserve
/// free: the message names it, what is free and the reserve.
pub fn room_to_start(dirs: &[&Path], reserve: Reserve) -> Result<(), String> {
    if reserve == Reserve::Off {
        return Ok(());
    }
    let mut seen = Vec::new();
    for dir in dirs {
        let Ok(room) = space::space(dir) else {
            continue; // not there yet: the job's own steps say what is wrong
        };
        if seen.contains(&room.dev) {
            continue;
        }
        seen.push(room.dev);
        let keep = reserve.bytes(room.size);
        if room.free < keep {
            return Err(format!(
                "not enough disk space to start a job: the file system of {} has {} free, \
                 below the runner's reserve of {} (limits.disk_reserve); free some space or \
                 lower the reserve",
                dir.display(),
                human(room.free),
                human(keep)
            ));
        }
    }
    Ok(())
}

/// Limits every file the command and its descendants write to `bytes` (RLIMIT_FSIZE; never
/// above the runner's own hard limit, which only CAP_SYS_RESOURCE could raise).
pub fn limit_file_size(cmd: &mut std::process::Command, bytes: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: only getrlimit and setrlimit between fork and exec (async-signal-safe).
    unsafe {
        cmd.pre_exec(move || {
            crate::util::rlimit::set_capped(crate::util::rlimit::Resource::Fsize, bytes, bytes)
        });
    }
}

/// A size for people: `10 GiB`, `1.5 GiB`, `812 MiB`, `4 KiB`, `12 B`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 || value >= 100.0 || value.fract() < 0.05 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
