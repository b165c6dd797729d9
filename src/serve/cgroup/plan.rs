//! The pure plan: for each configured limit, whether a cgroup file or an rlimit enforces it
//! on this host, or why nothing does. Nothing here writes; [`super::setup()`] carries it out.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::locate::{locate, Located, OwnState};
use super::{Controller, BASE_PREFIX, DEFAULT_MOUNT};
use crate::serve::limits::Limits;

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
pub(super) fn is_base_name(name: &str) -> bool {
    name.strip_prefix(BASE_PREFIX)
        .is_some_and(|key| key.len() == 16 && key.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The most `pids.max` takes (PID_MAX_LIMIT on 64-bit Linux). A larger number cannot be
/// written (EINVAL, and every job would fail to start) and means no limit anyway: no more
/// processes than that can exist.
pub(super) const PIDS_MAX: u64 = 4 * 1024 * 1024;

pub(super) fn pids_max(n: u64) -> String {
    if n > PIDS_MAX {
        "max".into()
    } else {
        n.to_string()
    }
}

/// `cpu.max` for `milli` thousandths of a CPU: a quota per 100 ms period, or per 1 s period
/// below a hundredth of a CPU, since the kernel refuses (EINVAL) a quota under 1 ms and
/// every job would fail to start.
pub(super) fn cpu_max(milli: u64) -> String {
    let milli = milli.max(1);
    let period: u64 = if milli < 10 { 1_000_000 } else { 100_000 };
    format!("{} {period}", milli.saturating_mul(period / 1000))
}

/// One cgroup limit asked for: its controller, the name the result gives it, and the file
/// and value of each job's group that would enforce it.
struct Wanted {
    controller: Controller,
    limit: &'static str,
    file: &'static str,
    value: String,
}

/// The cgroup limits of `limits`, in the order they are planned and reported.
fn wanted(limits: &Limits) -> Vec<Wanted> {
    [
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
    .map(|(controller, limit, file, value)| Wanted {
        controller,
        limit,
        file,
        value,
    })
    .collect()
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
    let wanted = wanted(limits);
    let (cgroup, why) = match (located, state) {
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
            let (cgroup, why) = cgroup_plan(loc, state, &wanted, base_name);
            (Some(cgroup), why)
        }
    };
    let mut applied = Vec::new();
    for w in wanted {
        let in_cgroup = cgroup
            .as_ref()
            .is_some_and(|p| p.enable.contains(&w.controller));
        let how = if in_cgroup {
            How::Cgroup {
                file: w.file,
                value: w.value,
            }
        } else {
            fallback(w.controller, &w.value, limits, &mut rlimits)
        };
        applied.push(Applied {
            limit: w.limit,
            how,
        });
    }
    applied.extend(named_rlimits(limits));
    let why = match (&cgroup, why) {
        (None, None) => Some("no per-job cgroup".into()),
        (_, why) => why,
    };
    Plan {
        cgroup,
        why,
        rlimits,
        applied,
    }
}

/// The per-job groups under a writable `loc`: the controllers of `wanted` that `state`
/// offers are enabled, and the rest are named in the reason returned beside the plan.
fn cgroup_plan(
    loc: &Located,
    state: &OwnState,
    wanted: &[Wanted],
    base_name: &str,
) -> (CgroupPlan, Option<String>) {
    let has = |c: Controller| state.controllers.iter().any(|a| a == c.name());
    let mut enable = Vec::new();
    let mut missing = Vec::new();
    let mut job_files = Vec::new();
    for w in wanted {
        if !has(w.controller) {
            missing.push(w.controller);
            continue;
        }
        enable.push(w.controller);
        job_files.push((w.file, w.value.clone()));
        if w.controller == Controller::Memory {
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
    }
    let why = missing_why(loc, &missing);
    // Processes in `own` would forbid enabling controllers for its children; the
    // root group is exempt (and its processes are the whole host's, not ours).
    let runner_leaf = (!enable.is_empty() && !loc.is_root).then(|| loc.own.join("runner"));
    let plan = CgroupPlan {
        own: loc.own.clone(),
        base: loc.own.join(base_name),
        runner_leaf,
        enable,
        missing,
        job_files,
    };
    (plan, why)
}

/// Why the `missing` controllers are not there, or `None` when none is.
fn missing_why(loc: &Located, missing: &[Controller]) -> Option<String> {
    (!missing.is_empty()).then(|| {
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
    })
}

/// How a cgroup limit the host cannot enforce applies instead: a process count falls back
/// to RLIMIT_NPROC (set in `rlimits`) unless one was asked for by name; the others have no
/// rlimit that means the same, and say why.
fn fallback(c: Controller, value: &str, limits: &Limits, rlimits: &mut Limits) -> How {
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
            why: "no cpu controller; no rlimit throttles (--limit-cpu caps CPU time instead)"
                .into(),
        },
    }
}

/// The rlimits asked for by name, as the result reports them.
fn named_rlimits(limits: &Limits) -> Vec<Applied> {
    [
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
    ]
    .into_iter()
    .filter_map(|(limit, name, value)| {
        Some(Applied {
            limit,
            how: How::Rlimit {
                name,
                value: value?,
            },
        })
    })
    .collect()
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

/// Which per-job limits this host enforces and how, for `doctor`: the plan `serve` would
/// make for the memory, pids and cpu limits (the values are examples; `serve` uses its
/// configured ones). The first field says whether jobs get cgroup limits.
pub fn host_support() -> (bool, String) {
    let example = Limits {
        memory: Some(4 << 30),
        pids: Some(1024),
        cpus_milli: Some(1000),
        ..Limits::default()
    };
    // doctor does not know which state dir serve will use: the group's name is shown
    // as its pattern.
    let plan = probe_named(&example, "quest-runner.<state dir hash>");
    let limits = plan.cgroup.as_ref().is_some_and(|c| !c.enable.is_empty());
    let line = format!(
        "{} (shown for limits.memory 4G, pids 1024, cpus 1)",
        plan.summary()
    );
    (limits, line)
}

#[cfg(test)]
mod host_support_tests {
    use super::*;

    #[test]
    fn the_host_support_line_names_cgroups_or_rlimits() {
        let (cgroups, line) = host_support();
        assert!(
            line.starts_with("cgroup v2") || (!cgroups && line.starts_with("rlimits only")),
            "{line}"
        );
    }
}
