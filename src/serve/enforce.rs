//! How `serve` enforces its limits on each job: the plan for this host (cgroups where it has
//! them, rlimits for the rest), the enclosure each agent runs in (its rlimits, its job's
//! cgroup and the report that group leaves), and on start the sweep of the groups a dead
//! runner left.

use super::limits::{self, Limits};
use super::{cgroup, JobSource};
use crate::run::{AgentEnclosure, CommandHook, Runner};

/// How `serve` enforces limits on this host.
pub(super) struct Enforcement {
    pub plan: cgroup::Plan,
}

impl Enforcement {
    /// Plans for `limits` and sets up the cgroup part; if that fails, jobs run without
    /// groups (rlimits only) and the log says why.
    pub fn start(runner: &Runner, limits: &Limits) -> Enforcement {
        let mut plan = cgroup::probe(limits, runner.state().root());
        if let Some(group) = &plan.cgroup {
            if let Err(e) = cgroup::setup(group) {
                tracing::warn!("per-job cgroups unavailable: {e}");
                let why = format!("setting up the runner's cgroup failed: {e}");
                plan = cgroup::plan(Err(&why), None, limits, "");
            }
        }
        tracing::info!(plan = %plan.summary(), "per-job limits");
        Enforcement { plan }
    }
}

/// Each job's processes (its devShell's nix and builds, its agent) run with the plan's rlimits
/// and parent-death signal, in the job's cgroup where the host has them; the report is what
/// that group counted (or why it could not be read), `None` without a group.
impl AgentEnclosure for Enforcement {
    type Guard = Option<JobGroupGuard>;
    type Report = Option<Result<cgroup::Report, cgroup::CgroupError>>;
    type Error = cgroup::CgroupError;

    fn adjust(&self) -> Option<CommandHook> {
        Some(limits::agent_hook(self.plan.rlimits))
    }

    fn enter(&self, job_id: &str) -> Result<(Self::Guard, Option<CommandHook>), Self::Error> {
        let Some(plan) = &self.plan.cgroup else {
            return Ok((None, None));
        };
        let group = cgroup::JobCgroup::create(plan, job_id)?;
        let place = group.placing();
        Ok((
            Some(JobGroupGuard {
                id: job_id.to_string(),
                group: Some(group),
            }),
            Some(place),
        ))
    }

    fn finish(&self, guard: Self::Guard) -> Self::Report {
        guard.map(JobGroupGuard::finish)
    }
}

/// Kills and removes the job groups a dead runner left under `group.base`: those of jobs no
/// live runner holds (the source's guard keeps any from starting meanwhile). Before
/// recovery, so that no process of a job survives into its requeued run. Then removes the
/// empty groups of other state dirs beside it: a runner killed outright and never started
/// again leaves one, and nothing else would ever remove it.
pub(super) async fn sweep_leftovers<S: JobSource>(source: &S, group: &cgroup::CgroupPlan) {
    sweep_job_groups(source, group).await;
    let swept = cgroup::remove_empty_bases(&group.own, &group.base);
    for dir in &swept.removed {
        tracing::info!(group = %dir.display(), "removed an empty state-dir cgroup");
    }
    for e in &swept.failed {
        tracing::warn!("sweeping empty state-dir cgroups: {e}");
    }
}

async fn sweep_job_groups<S: JobSource>(source: &S, group: &cgroup::CgroupPlan) {
    for dir in cgroup::stray_groups(&group.base) {
        match cgroup::kill_and_remove(&dir) {
            Ok(had) => tracing::warn!(group = %dir.display(), had_processes = had,
                                      "removed a cgroup that is no job's"),
            Err(e) => tracing::error!("removing a cgroup that is no job's: {e}"),
        }
    }
    for (id, dir) in cgroup::job_groups(&group.base) {
        let Some(guard) = source.hold_idle(&id).await else {
            continue; // a live runner's job
        };
        match cgroup::kill_and_remove(&dir) {
            Ok(had) => {
                tracing::warn!(job = %id, had_processes = had, "removed the cgroup a dead runner left")
            }
            Err(e) => tracing::error!(job = %id, "removing the cgroup a dead runner left: {e}"),
        }
        drop(guard);
    }
}

/// Kept while a job's processes run: its group, which [`JobGroupGuard::finish`] ends once
/// they are stopped (kills whatever is left in it, reads what it counted, removes it).
/// Dropped instead (a cancelled job), it kills and removes the group all the same.
pub(super) struct JobGroupGuard {
    id: String,
    group: Option<cgroup::JobCgroup>,
}

impl JobGroupGuard {
    fn finish(mut self) -> Result<cgroup::Report, cgroup::CgroupError> {
        // Always there: only finish and drop take it.
        let group = self.group.take();
        group.map_or(Ok(cgroup::Report::default()), |g| self.end(g))
    }

    fn end(&self, group: cgroup::JobCgroup) -> Result<cgroup::Report, cgroup::CgroupError> {
        group.finish().inspect_err(|e| {
            tracing::error!(job = %self.id, "{e} (the next start removes it)");
        })
    }
}

impl Drop for JobGroupGuard {
    fn drop(&mut self) {
        if let Some(group) = self.group.take() {
            let _ = self.end(group);
        }
    }
}
