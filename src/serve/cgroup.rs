//! Per-job cgroups (cgroup v2): every process of a job in one group the runner owns, with
//! the memory, process-count and CPU limits the host's delegated controllers allow.
//!
//! First a pure [`plan`] from what the kernel shows (`/proc/self/cgroup`,
//! `/proc/self/mountinfo`, the runner's own group's `cgroup.controllers` and
//! `cgroup.subtree_control`, and whether that group is writable): which group the jobs live
//! under, which controllers are enabled there, and for each limit whether a cgroup file or
//! an rlimit enforces it, or why nothing does. Then [`setup`] carries it out once per
//! `serve`, and [`JobCgroup`] does each job's part.
//!
//! Layout, with `<own>` the runner's group when it starts (under systemd with `Delegate=`,
//! the unit's group, which the runner then owns):
//!
//! ```text
//! <own>/runner/                     the runner itself, moved out of <own> only when it must
//!                                   enable controllers in <own> (no internal processes)
//! <own>/quest-runner.<key>/         one per state dir (<key> hashes its path), so runners
//!                                   of other state dirs in the same group never meet
//! <own>/quest-runner.<key>/job-<id> one job's agent and everything it starts
//! ```
//!
//! Placement happens in the agent's child between fork and exec: it writes `0` (itself)
//! into its job's `cgroup.procs` with plain `open`/`write`/`close`, the async-signal-safe
//! calls allowed there. The agent therefore starts inside the group, and so does everything
//! it ever forks: no process of the job can be outside it, however it detaches (setsid,
//! double fork, a cleared environment). `clone3(CLONE_INTO_CGROUP)` would do the same
//! without the write, but the standard library's `Command` cannot issue it, and the write
//! costs one syscall in a process that is about to exec anyway.
//!
//! At the job's end the group is the process-tree kill that cannot miss: `cgroup.kill`
//! SIGKILLs every member atomically (after the runner's marker-based stop, which lets srt
//! clean up on SIGTERM first). Its event counters then say which limit fired
//! (`memory.events` `oom_kill`, `pids.events` `max`, `cpu.stat` `nr_throttled`), and it is
//! removed. A runner that died leaves groups behind; the next `serve` kills and removes those
//! of [`job_groups`] whose job no live runner holds, and removes the empty state-dir groups
//! ([`remove_empty_bases`]) that runners of other state dirs left — a runner killed outright
//! and never started again would otherwise leave its `quest-runner.<key>` for good. That
//! includes an idle live runner's empty group: [`JobCgroup::create`] makes it again.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::limits::Limits;

/// The standard place of the unified hierarchy; `plan` finds the real one in mountinfo.
pub const DEFAULT_MOUNT: &str = "/sys/fs/cgroup";
/// The name of each job's group under the state dir's group.
pub const JOB_PREFIX: &str = "job-";
/// The name of each state dir's group in the runner's group, before the key ([`base_name`]).
pub const BASE_PREFIX: &str = "quest-runner.";
/// Files of [`CgroupPlan::job_files`] an older kernel or its configuration may lack
/// (`memory.swap.max` without swap accounting, `memory.oom.group` before Linux 4.19): a job
/// runs without them rather than not at all.
const OPTIONAL_FILES: &[&str] = &["memory.swap.max", "memory.oom.group"];
/// How long a killed group may take to empty before the runner gives up on removing it.
const EMPTY_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("cgroup: {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cgroup: writing {value:?} to {path}: {source}")]
    Write {
        path: PathBuf,
        value: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cgroup: {0} is not a usable path (it holds a NUL byte)")]
    BadPath(PathBuf),
    #[error("cgroup: no group for job {0:?}: {1}")]
    BadId(String, String),
    #[error("cgroup: {path} still has processes {waited:?} after cgroup.kill")]
    NotEmptied { path: PathBuf, waited: Duration },
}

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> CgroupError + 'a {
    move |source| CgroupError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// A cgroup v2 controller the runner uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Controller {
    Memory,
    Pids,
    Cpu,
}

impl Controller {
    pub fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Pids => "pids",
            Controller::Cpu => "cpu",
        }
    }
}

/// Where the runner's own cgroup v2 group is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// The cgroup2 mount point.
    pub mount: PathBuf,
    /// The runner's group as a directory.
    pub own: PathBuf,
    /// Whether that group is the hierarchy's root (as on a host without systemd): the root
    /// is exempt from the no-internal-processes rule, and its processes are not ours.
    pub is_root: bool,
}

/// Finds the runner's group from `/proc/self/cgroup` (its `0::<path>` line) and
/// `/proc/self/mountinfo` (the cgroup2 mount holding that path). The error says why there
/// is none.
pub fn locate(self_cgroup: &str, mountinfo: &str) -> Result<Located, String> {
    let own = self_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::trim)
        .ok_or("this process is in no cgroup v2 group (no 0:: line in /proc/self/cgroup)")?;
    if !own.starts_with('/') || own.ends_with(" (deleted)") {
        return Err(format!(
            "this process's cgroup v2 path {own:?} is not usable"
        ));
    }
    let mut mounts: Vec<(PathBuf, String)> = Vec::new();
    for line in mountinfo.lines() {
        let Some((before, after)) = line.split_once(" - ") else {
            continue;
        };
        if after.split_whitespace().next() != Some("cgroup2") {
            continue;
        }
        let fields: Vec<&str> = before.split_whitespace().collect();
        if let (Some(root), Some(point)) = (fields.get(3), fields.get(4)) {
            mounts.push((PathBuf::from(unescape(point)), unescape(root)));
        }
    }
    if mounts.is_empty() {
        return Err("no cgroup v2 hierarchy is mounted".into());
    }
    // The standard mount first: a second cgroup2 mount (a container's bind) shows the same
    // groups.
    mounts.sort_by_key(|(point, _)| point != Path::new(DEFAULT_MOUNT));
    for (mount, root) in mounts {
        let rel = if root == "/" {
            Some(own.trim_start_matches('/'))
        } else {
            own.strip_prefix(root.as_str())
                .filter(|r| r.is_empty() || r.starts_with('/'))
                .map(|r| r.trim_start_matches('/'))
        };
        if let Some(rel) = rel {
            let own = if rel.is_empty() {
                mount.clone()
            } else {
                mount.join(rel)
            };
            return Ok(Located {
                is_root: rel.is_empty() && root == "/",
                mount,
                own,
            });
        }
    }
    Err(format!(
        "this process's group {own} is not under any mounted cgroup v2 hierarchy"
    ))
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let digits = std::str::from_utf8(&bytes[i + 1..i + 4]).unwrap_or("");
            if let Ok(v) = u8::from_str_radix(digits, 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What the runner's own group offers, read from its files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnState {
    /// `cgroup.controllers`: what may be enabled for the group's children.
    pub controllers: Vec<String>,
    /// `cgroup.subtree_control`: what is enabled for them now.
    pub subtree_control: Vec<String>,
    /// Whether the runner may create groups in it and write its `cgroup.subtree_control`
    /// (delegated to the runner's user, or the runner is root).
    pub writable: bool,
}

impl OwnState {
    pub fn read(own: &Path) -> OwnState {
        let words = |name: &str| -> Vec<String> {
            std::fs::read_to_string(own.join(name))
                .unwrap_or_default()
                .split_whitespace()
                .map(String::from)
                .collect()
        };
        let w = rustix::fs::Access::WRITE_OK;
        OwnState {
            controllers: words("cgroup.controllers"),
            subtree_control: words("cgroup.subtree_control"),
            writable: rustix::fs::access(own, w).is_ok()
                && rustix::fs::access(own.join("cgroup.procs"), w).is_ok(),
        }
    }
}

/// How one limit is enforced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum How {
    /// A file of each job's group, e.g. `memory.max` = `4294967296`.
    Cgroup { file: &'static str, value: String },
    /// An rlimit set on the agent (inherited by what it starts).
    Rlimit { name: &'static str, value: String },
    /// Not enforced, and why.
    Not { why: String },
}

/// One requested limit and how this host enforces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// `memory`, `pids`, `cpus` (cgroup-first), or `nproc`, `address_space`, `cpu_time`
    /// (rlimits asked for by name).
    pub limit: &'static str,
    pub how: How,
}

/// The cgroup part of a [`Plan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupPlan {
    pub own: PathBuf,
    /// The state dir's group; jobs are `job-<id>` below it.
    pub base: PathBuf,
    /// Where the runner moves itself before enabling controllers in `own`.
    pub runner_leaf: Option<PathBuf>,
    /// Controllers to enable in `own` and `base` for the jobs' groups.
    pub enable: Vec<Controller>,
    /// Controllers a requested limit needs that `own` does not offer.
    pub missing: Vec<Controller>,
    /// Files written in each job's group, in order.
    pub job_files: Vec<(&'static str, String)>,
}

/// Everything `serve` does about per-job limits on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Per-job groups (placement, kill, the limits of `enable`), or `None`.
    pub cgroup: Option<CgroupPlan>,
    /// Why there are no per-job groups, or why some controllers are missing.
    pub why: Option<String>,
    /// The rlimits the agent gets: those asked for by name, plus the fallbacks of cgroup
    /// limits the host cannot enforce.
    pub rlimits: Limits,
    pub applied: Vec<Applied>,
}

/// The name of the state dir's group: a stable hash of its path, so that a restarted
/// runner finds what its predecessor left and other state dirs never collide.
pub fn base_name(state_root: &Path) -> String {
    // FNV-1a: stable across builds and platforms, unlike std's hasher.
    let mut h: u64 = 0xcbf29ce484222325;
    for b in state_root.as_os_str().as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("{BASE_PREFIX}{h:016x}")
}

/// Whether `name` is one [`base_name`] makes: only those are ever swept, whatever else
/// shares the runner's group.
fn is_base_name(name: &str) -> bool {
    name.strip_prefix(BASE_PREFIX)
        .is_some_and(|key| key.len() == 16 && key.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The most `pids.max` takes (PID_MAX_LIMIT on 64-bit Linux). A larger number cannot be
/// written (EINVAL, and every job would fail to start) and means no limit anyway: no more
/// processes than that can exist.
const PIDS_MAX: u64 = 4 * 1024 * 1024;

fn pids_max(n: u64) -> String {
    if n > PIDS_MAX {
        "max".into()
    } else {
        n.to_string()
    }
}

/// `cpu.max` for `milli` thousandths of a CPU: a quota per 100 ms period, or per 1 s period
/// below a hundredth of a CPU, since the kernel refuses (EINVAL) a quota under 1 ms and
/// every job would fail to start.
fn cpu_max(milli: u64) -> String {
    let milli = milli.max(1);
    let period: u64 = if milli < 10 { 1_000_000 } else { 100_000 };
    format!("{} {period}", milli.saturating_mul(period / 1000))
}

/// The pure plan: where jobs' groups go and how each limit of `limits` is enforced, from
/// where the runner's group is (`located`) and what it offers (`state`, read only when
/// `located` is `Ok`).
pub fn plan(
    located: Result<&Located, &str>,
    state: Option<&OwnState>,
    limits: &Limits,
    base_name: &str,
) -> Plan {
    let mut rlimits = Limits {
        nproc: limits.nproc,
        address_space: limits.address_space,
        cpu_seconds: limits.cpu_seconds,
        ..Limits::default()
    };
    let wanted: Vec<(Controller, &'static str, &'static str, String)> = [
        limits
            .memory
            .map(|b| (Controller::Memory, "memory", "memory.max", b.to_string())),
        limits
            .pids
            .map(|n| (Controller::Pids, "pids", "pids.max", pids_max(n))),
        limits
            .cpus_milli
            .map(|m| (Controller::Cpu, "cpus", "cpu.max", cpu_max(m))),
    ]
    .into_iter()
    .flatten()
    .collect();

    let (cgroup, mut why) = match (located, state) {
        (Err(why), _) => (None, Some(why.to_string())),
        (Ok(_), None) => (None, Some("the runner's cgroup could not be read".into())),
        (Ok(loc), Some(state)) if !state.writable => (
            None,
            Some(format!(
                "the runner's cgroup {} is not writable: not delegated (the systemd unit's \
                 Delegate= does that)",
                loc.own.display()
            )),
        ),
        (Ok(loc), Some(state)) => {
            let has = |c: Controller| state.controllers.iter().any(|a| a == c.name());
            let mut enable = Vec::new();
            let mut missing = Vec::new();
            let mut job_files = Vec::new();
            for (c, _, file, value) in &wanted {
                if has(*c) {
                    enable.push(*c);
                    job_files.push((*file, value.clone()));
                    if *c == Controller::Memory {
                        // Without it the group could page out instead of hitting its
                        // limit; written only where swap is accounted (the file exists).
                        job_files.push(("memory.swap.max", "0".into()));
                        // At memory.max the OOM killer otherwise kills one process, the
                        // biggest: a compiler or test the agent started (the agent goes on
                        // with half a build and may retry it into the same wall), or the
                        // agent itself (what it started lives on until the job's end). The
                        // job is one unit: kill all of it at once, so it ends at once with
                        // `limit_fired` memory and nothing half-dead runs on. It applies to
                        // a host-wide OOM that picks a process of the job too.
                        job_files.push(("memory.oom.group", "1".into()));
                    }
                } else {
                    missing.push(*c);
                }
            }
            let why = (!missing.is_empty()).then(|| {
                let names: Vec<&str> = missing.iter().map(|c| c.name()).collect();
                let hybrid = loc.mount != Path::new(DEFAULT_MOUNT);
                format!(
                    "{} controller(s) not available in {}{}",
                    names.join(", "),
                    loc.own.display(),
                    if hybrid {
                        " (a hybrid host: the controllers are on cgroup v1)"
                    } else {
                        " (not delegated to the runner's cgroup)"
                    }
                )
            });
            // Processes in `own` would forbid enabling controllers for its children; the
            // root group is exempt (and its processes are the whole host's, not ours).
            let runner_leaf = (!enable.is_empty() && !loc.is_root).then(|| loc.own.join("runner"));
            let base = loc.own.join(base_name);
            (
                Some(CgroupPlan {
                    own: loc.own.clone(),
                    base,
                    runner_leaf,
                    enable,
                    missing,
                    job_files,
                }),
                why,
            )
        }
    };

    let mut applied = Vec::new();
    for (c, limit, file, value) in wanted {
        let in_cgroup = cgroup.as_ref().is_some_and(|p| p.enable.contains(&c));
        let how = if in_cgroup {
            How::Cgroup { file, value }
        } else {
            match c {
                Controller::Pids if rlimits.nproc.is_none() => {
                    rlimits.nproc = limits.pids;
                    How::Rlimit {
                        name: "RLIMIT_NPROC",
                        value: format!(
                            "{value} (processes of the runner's user, not per job; root is exempt)"
                        ),
                    }
                }
                Controller::Pids => How::Not {
                    why: "no pids controller; --limit-nproc's RLIMIT_NPROC applies instead".into(),
                },
                Controller::Memory => How::Not {
                    why: "no memory controller; RLIMIT_AS is no substitute (Node reserves \
                          gigabytes of address space it never uses): set --limit-address-space \
                          to use it anyway"
                        .into(),
                },
                Controller::Cpu => How::Not {
                    why:
                        "no cpu controller; no rlimit throttles (--limit-cpu caps CPU time instead)"
                            .into(),
                },
            }
        };
        applied.push(Applied { limit, how });
    }
    for (limit, name, value) in [
        ("nproc", "RLIMIT_NPROC", limits.nproc.map(|n| n.to_string())),
        (
            "address_space",
            "RLIMIT_AS",
            limits.address_space.map(|b| b.to_string()),
        ),
        (
            "cpu_time",
            "RLIMIT_CPU",
            limits.cpu_seconds.map(|s| format!("{s}s")),
        ),
    ] {
        if let Some(value) = value {
            applied.push(Applied {
                limit,
                how: How::Rlimit { name, value },
            });
        }
    }
    if cgroup.is_none() && why.is_none() {
        why = Some("no per-job cgroup".into());
    }
    Plan {
        cgroup,
        why,
        rlimits,
        applied,
    }
}

/// Reads the kernel's view and plans for `limits` under the state dir at `state_root`.
pub fn probe(limits: &Limits, state_root: &Path) -> Plan {
    probe_named(limits, &base_name(state_root))
}

/// [`probe`] with the state dir's group named `base_name`.
pub fn probe_named(limits: &Limits, base_name: &str) -> Plan {
    let self_cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let located = locate(&self_cgroup, &mountinfo);
    let state = located.as_ref().ok().map(|l| OwnState::read(&l.own));
    plan(
        located.as_ref().map_err(String::as_str),
        state.as_ref(),
        limits,
        base_name,
    )
}

impl Plan {
    /// One line for `doctor` and the runner's log: where jobs' groups are and how each
    /// limit applies.
    pub fn summary(&self) -> String {
        let mut out = match &self.cgroup {
            Some(c) => {
                let enabled: Vec<&str> = c.enable.iter().map(|c| c.name()).collect();
                format!(
                    "cgroup v2: each job in its own group under {} (placement and cgroup.kill{})",
                    c.base.display(),
                    if enabled.is_empty() {
                        String::new()
                    } else {
                        format!("; controllers {}", enabled.join(", "))
                    }
                )
            }
            None => "rlimits only: no per-job cgroup".into(),
        };
        if let Some(why) = &self.why {
            out.push_str(&format!(" — {why}"));
        }
        if self.applied.is_empty() {
            out.push_str("; no limits configured besides the timeout");
        }
        for a in &self.applied {
            let how = match &a.how {
                How::Cgroup { file, value } => format!("{file}={value}"),
                How::Rlimit { name, value } => format!("{name}={value}"),
                How::Not { why } => format!("not enforced: {why}"),
            };
            out.push_str(&format!("; {}: {how}", a.limit));
        }
        out
    }

    /// The limits in force, in one line (`memory.max=…, RLIMIT_NPROC=…`), or `None`.
    pub fn in_force(&self) -> Option<String> {
        let parts: Vec<String> = self
            .applied
            .iter()
            .filter_map(|a| match &a.how {
                How::Cgroup { file, value } => Some(format!("{file}={value}")),
                How::Rlimit { name, .. } => Some(match *name {
                    "RLIMIT_NPROC" => format!("RLIMIT_NPROC={}", self.rlimits.nproc?),
                    "RLIMIT_AS" => format!("RLIMIT_AS={}", self.rlimits.address_space?),
                    _ => format!("RLIMIT_CPU={}s", self.rlimits.cpu_seconds?),
                }),
                How::Not { .. } => None,
            })
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        (!parts.is_empty()).then(|| parts.join(", "))
    }
}

/// Writes `value` to the cgroup file `path`, which must exist: opened without `O_CREAT`,
/// which cgroupfs answers with EACCES for a file it does not have (a controller not
/// enabled, a kernel without `cgroup.kill`) where ENOENT says what is wrong.
fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
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

/// Whether `e` is a missing file's error, [`write`]'s or another.
fn not_found(e: &CgroupError) -> bool {
    match e {
        CgroupError::Io { source, .. } | CgroupError::Write { source, .. } => {
            source.kind() == std::io::ErrorKind::NotFound
        }
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
            let pids = std::fs::read_to_string(&procs).map_err(io("reading", &procs))?;
            if pids.trim().is_empty() {
                break;
            }
            for pid in pids.split_whitespace() {
                match write_raw(&leaf.join("cgroup.procs"), pid) {
                    Ok(()) => {}
                    // Exited meanwhile.
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                    Err(e) => return Err(io("moving the runner into", leaf)(e)),
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
const BASE_TRIES: usize = 3;

/// Makes the state dir's group, with the jobs' controllers enabled, unless it is there.
/// While it is empty another state dir's runner may remove it ([`remove_empty_bases`]):
/// vanishing midway is retried.
fn ensure_base(plan: &CgroupPlan) -> Result<(), CgroupError> {
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
        Err(e) => Err(io("creating", dir)(e)),
    }
}

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
                Err(e) => return Err(io("creating", dir)(e)),
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
        let procs = self.procs.clone();
        // SAFETY: only open, write and close between fork and exec (async-signal-safe);
        // the path was allocated before the fork.
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // "0" is the writing process itself.
                let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                let err = (n != 1).then(std::io::Error::last_os_error);
                libc::close(fd);
                match err {
                    Some(e) => Err(e),
                    None => Ok(()),
                }
            });
        }
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
        Err(e) => Err(io("removing", dir)(e)),
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

/// The job id a group's name stands for, if it is one [`JobCgroup::create`] makes.
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
            swept.failed.push(io("listing", own)(e));
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
            Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY | libc::ENOTEMPTY)) => {
                swept.in_use.push(dir)
            }
            Err(e) => swept.failed.push(io("removing", &dir)(e)),
        }
    }
    swept.removed.sort();
    swept.in_use.sort();
    swept
}

#[cfg(test)]
#[path = "cgroup_tests.rs"]
mod tests;
