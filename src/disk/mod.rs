//! Bounding what a job writes to disk (`limits.disk`, `limits.disk_files`), and keeping room
//! for the next job (`limits.disk_reserve`, `limits.disk_reserve_files`).
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
//!   and while one is below it, the runner stops its job that grows fastest on it (never one
//!   at rest).
//!
//! Files count as well as bytes: empty files weigh nothing, yet a job creating them until
//! ENOSPC took the file system's last inode, and the next job could not even create its clone's
//! lock file. No rlimit bounds inodes (and quotas need what is said above), so the same walk
//! counts them (`limits.disk_files`, firing `limit_fired: "disk"` too) and the reserve keeps
//! free inodes as well as bytes (`limits.disk_reserve_files`; `statvfs`'s `f_favail`).
//!
//! What this does not do: be instantaneous. Between two ticks a job can write what the disk
//! takes in 50 ms (and more while a large tree is walked), or preallocate several files just
//! under the limit each; the reserve is the margin for that, and is why the default keeps
//! 1 GiB.

pub mod space;
pub mod usage;
pub mod watch;

use std::path::{Path, PathBuf};

/// `limits.disk` when the config names none.
pub const DEFAULT_LIMIT: u64 = 10 << 30;
/// `limits.disk_files` when the config names none: what a job may hold in files (inodes:
/// files, directories, links). A Chromium checkout is ~500,000, a large `node_modules` tree
/// 100,000–300,000; a million leaves room for both, and is 3% of a 500 GB ext4's inodes.
pub const DEFAULT_FILES: u64 = 1_000_000;
/// The default reserve: this much, or [`DEFAULT_RESERVE_PERCENT`] of the file system if that
/// is less (a small `/tmp` is not refused for good).
pub const DEFAULT_RESERVE: u64 = 1 << 30;
/// The default reserve of inodes: what [`DEFAULT_RESERVE`] holds at ext4's default of one
/// inode per 16 KiB, or [`DEFAULT_RESERVE_PERCENT`] of the file system's inodes, the smaller.
pub const DEFAULT_RESERVE_FILES: u64 = DEFAULT_RESERVE / (16 << 10);
pub const DEFAULT_RESERVE_PERCENT: u64 = 5;

/// How much the runner keeps free on a file system jobs write: bytes (`limits.disk_reserve`)
/// or inodes (`limits.disk_reserve_files`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserve {
    Off,
    /// The default amount or [`DEFAULT_RESERVE_PERCENT`] of the file system, the smaller.
    Default,
    Amount(u64),
}

impl Reserve {
    /// The reserve of bytes on a file system of `size` bytes.
    pub fn bytes(self, size: u64) -> u64 {
        self.of(size, DEFAULT_RESERVE)
    }

    /// The reserve of inodes on a file system of `inodes` inodes (0: one with no fixed
    /// number, such as btrfs, which never runs out of them on its own: no reserve).
    pub fn files(self, inodes: u64) -> u64 {
        match inodes {
            0 => 0,
            _ => self.of(inodes, DEFAULT_RESERVE_FILES),
        }
    }

    fn of(self, total: u64, default: u64) -> u64 {
        match self {
            Reserve::Off => 0,
            Reserve::Default => default.min(total / 100 * DEFAULT_RESERVE_PERCENT),
            Reserve::Amount(n) => n,
        }
    }

    fn describe(self, default: &str, unit: &str) -> String {
        match self {
            Reserve::Off => format!("no reserve of {unit}"),
            Reserve::Default => format!(
                "a reserve of {default} or {DEFAULT_RESERVE_PERCENT}% of each file system's {unit}, \
                 the smaller"
            ),
            Reserve::Amount(n) if unit == "bytes" => format!("a reserve of {}", human(n)),
            Reserve::Amount(n) => format!("a reserve of {} {unit}", count(n)),
        }
    }
}

/// The disk limits of every job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskLimits {
    /// The most a job may have on disk at once, in bytes; `None`: no limit.
    pub limit: Option<u64>,
    /// The most files (inodes) a job may have at once; `None`: no limit.
    pub files: Option<u64>,
    pub reserve: Reserve,
    pub reserve_files: Reserve,
}

impl Default for DiskLimits {
    fn default() -> DiskLimits {
        DiskLimits {
            limit: Some(DEFAULT_LIMIT),
            files: Some(DEFAULT_FILES),
            reserve: Reserve::Default,
            reserve_files: Reserve::Default,
        }
    }
}

impl DiskLimits {
    /// Whether there is nothing to watch.
    pub fn is_off(&self) -> bool {
        self.limit.is_none()
            && self.files.is_none()
            && self.reserve == Reserve::Off
            && self.reserve_files == Reserve::Off
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
        let files = match self.files {
            Some(n) => format!("limits.disk_files {} files per job", count(n)),
            None => "no per-job file count limit (limits.disk_files off)".into(),
        };
        format!(
            "{limit}; {files}; {}; {}",
            self.reserve.describe(&human(DEFAULT_RESERVE), "bytes"),
            self.reserve_files
                .describe(&count(DEFAULT_RESERVE_FILES), "inodes")
        )
    }
}

/// A file system a job writes that has less free than the runner keeps in reserve: no job
/// starts until there is room again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoRoom {
    #[error(
        "not enough disk space to start a job: the file system of {} has {} free, below the \
         runner's reserve of {} (bytes, limits.disk_reserve); free some space or lower the \
         reserve",
        dir.display(), human(*free), human(*reserve)
    )]
    Bytes {
        dir: PathBuf,
        free: u64,
        reserve: u64,
    },
    #[error(
        "not enough disk space to start a job: the file system of {} has {} inodes free of \
         {}, below the runner's reserve of {} (inodes, limits.disk_reserve_files); remove \
         files there or lower the reserve",
        dir.display(), count(*free), count(*total), count(*reserve)
    )]
    Inodes {
        dir: PathBuf,
        free: u64,
        total: u64,
        reserve: u64,
    },
}

/// Refuses to start a job while the file system of one of `dirs` has less than the reserve
/// free, of bytes or of inodes: the message names it, the resource, what is free and the
/// reserve.
pub fn room_to_start(dirs: &[&Path], limits: &DiskLimits) -> Result<(), NoRoom> {
    if limits.reserve == Reserve::Off && limits.reserve_files == Reserve::Off {
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
        let keep = limits.reserve.bytes(room.size);
        if room.free < keep {
            return Err(NoRoom::Bytes {
                dir: dir.to_path_buf(),
                free: room.free,
                reserve: keep,
            });
        }
        let keep = limits.reserve_files.files(room.files);
        if room.files_free < keep {
            return Err(NoRoom::Inodes {
                dir: dir.to_path_buf(),
                free: room.files_free,
                total: room.files,
                reserve: keep,
            });
        }
    }
    Ok(())
}

/// The room on the file system of each of `dirs` (named by its label), for `doctor`:
/// `state dir /var/lib/x: 40 GiB free of 100 GiB, 6,123,456 inodes free of 6,553,600; temp
/// dirs /tmp: on the same file system as the state dir`.
pub fn rooms(dirs: &[(&str, &Path)]) -> String {
    let mut seen: Vec<(u64, &str)> = Vec::new();
    let mut parts = Vec::new();
    for (label, dir) in dirs {
        // A directory not made yet will be made on its nearest existing ancestor's.
        let on = dir.ancestors().find(|d| d.exists()).unwrap_or(dir);
        let room = match space::space(on) {
            Ok(room) => room,
            Err(e) => {
                parts.push(format!("{label} {}: {e}", dir.display()));
                continue;
            }
        };
        if let Some((_, first)) = seen.iter().find(|(dev, _)| *dev == room.dev) {
            parts.push(format!(
                "{label} {}: on the same file system as the {first}",
                dir.display()
            ));
            continue;
        }
        seen.push((room.dev, label));
        let inodes = match room.files {
            0 => "no fixed number of inodes".to_string(),
            n => format!("{} inodes free of {}", count(room.files_free), count(n)),
        };
        parts.push(format!(
            "{label} {}: {} free of {}, {inodes}",
            dir.display(),
            human(room.free),
            human(room.size)
        ));
    }
    parts.join("; ")
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

/// [`limit_file_size`] for a tree that runs gVisor (`isolation: gvisor`): the soft limit
/// only. runsc's Sentry keeps the commands' memory in a host file that grows past any small
/// disk limit (a container did not start under a 64 MiB one); the executor lifts its soft
/// limit for runsc and gives the commands the limit as both soft and hard inside the
/// container, where gVisor's kernel enforces it (`sandbox::gvisor`).
pub fn limit_file_size_soft(cmd: &mut std::process::Command, bytes: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: only getrlimit and setrlimit between fork and exec (async-signal-safe).
    unsafe {
        cmd.pre_exec(move || {
            crate::util::rlimit::set_capped(crate::util::rlimit::Resource::Fsize, bytes, u64::MAX)
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

/// A count for people: `1,000,000`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
