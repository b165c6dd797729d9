//! How `serve` enforces its limits on each job: the plan for this host (cgroups where it has
//! them, rlimits for the rest), the per-job cgroup each agent starts in and the report it
//! leaves, and on start the sweep of the groups a dead runner left.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::limits::{self, Limits};
use super::{cgroup, JobSource};
use crate::run::{JobAgentHook, Runner};

/// How `serve` enforces limits on this host, and what each job's group counted.
pub(super) struct Enforcement {
    pub plan: cgroup::Plan,
    /// Each finished job's group's counters (or why they could not be had), by job id,
    /// until its result is written.
    pub(super) reports: Mutex<HashMap<String, Result<cgroup::Report, String>>>,
}

impl Enforcement {
    /// Plans for `limits` and sets up the cgroup part; if that fails, jobs run without
    /// groups (rlimits only) and the log says why.
    pub fn start(runner: &Runner, limits: &Limits) -> Enforcement {
        let mut plan = cgroup::probe(limits, runner.state.root());
        if let Some(group) = &plan.cgroup {
            if let Err(e) = cgroup::setup(group) {
                tracing::warn!("per-job cgroups unavailable: {e}");
                let why = format!("setting up the runner's cgroup failed: {e}");
                plan = cgroup::plan(Err(&why), None, limits, "");
            }
        }
        tracing::info!(plan = %plan.summary(), "per-job limits");
        Enforcement {
            plan,
            reports: Mutex::new(HashMap::new()),
        }
    }

    pub fn take_report(&self, id: &str) -> Option<Result<cgroup::Report, String>> {
        self.reports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id)
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

/// Kept while a job's agent runs; dropped once its tree is stopped: kills whatever is left
/// in the job's group, records what the group counted, removes it.
struct JobGroupGuard {
    id: String,
    group: Option<cgroup::JobCgroup>,
    limits: Arc<Enforcement>,
}

impl Drop for JobGroupGuard {
    fn drop(&mut self) {
        let Some(group) = self.group.take() else {
            return;
        };
        let report = group.finish().map_err(|e| {
            tracing::error!(job = %self.id, "{e} (the next start removes it)");
            e.to_string()
        });
        self.limits
            .reports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(self.id.clone(), report);
    }
}

/// The per-job hook: a group for the job, the agent placed in it before it execs.
pub(super) fn job_group_hook(limits: Arc<Enforcement>) -> JobAgentHook {
    Arc::new(move |id: &str, cmds: &mut [&mut std::process::Command]| {
        let Some(plan) = &limits.plan.cgroup else {
            return Ok(Box::new(()) as Box<dyn std::any::Any + Send>);
        };
        let group = cgroup::JobCgroup::create(plan, id).map_err(|e| e.to_string())?;
        for cmd in cmds.iter_mut() {
            group.place(cmd);
        }
        Ok(Box::new(JobGroupGuard {
            id: id.to_string(),
            group: Some(group),
            limits: limits.clone(),
        }))
    })
}

/// The serve-wide agent hook (parent-death signal, rlimits), kept around any hook the
/// caller set, and the per-job cgroup hook where the host has them.
pub(super) fn with_agent_hook(mut runner: Runner, limits: &Arc<Enforcement>) -> Runner {
    runner.hooks.agent_command = Some(limits::agent_hook(
        limits.plan.rlimits,
        runner.hooks.agent_command,
    ));
    if limits.plan.cgroup.is_some() {
        runner.job_agent = Some(job_group_hook(limits.clone()));
    }
    runner
}
