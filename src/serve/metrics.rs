//! What `serve` counts for an operator's Prometheus (`metrics.listen`): recorded from each
//! job's result when it ends, and from the source's queue while serving. Labels are bounded
//! sets only (agent, outcome, limit kind, decision): a job id as a label would grow the
//! series without end.

use std::sync::atomic::{AtomicI64, AtomicU64};
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::run::JobResult;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AgentLabel {
    agent: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndLabels {
    agent: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AccountLabel {
    account: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabel {
    decision: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabel {
    phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CacheLabel {
    cache: &'static str,
}

/// Jobs take seconds to hours: 1 s to about 4.5 h in doublings.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 15))
}

/// The steps before the agent take milliseconds (a cached devShell) to minutes (a first
/// clone, a devShell build): 10 ms to about 2.7 min in doublings.
fn phase_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 15))
}

/// The queue as the source last reported it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct QueueDepth {
    pub queued: u64,
    /// Seconds since the oldest queued job was submitted (0 when none is).
    pub oldest_age_seconds: f64,
}

/// Every metric `serve` exports, and why it is not ready when it is not.
pub struct Metrics {
    registry: Registry,
    started: Family<AgentLabel, Counter>,
    ended: Family<EndLabels, Counter>,
    duration: Family<AgentLabel, Histogram, fn() -> Histogram>,
    phases: Family<PhaseLabel, Histogram, fn() -> Histogram>,
    devshell: Family<CacheLabel, Counter>,
    running: Gauge<i64, AtomicI64>,
    queued: Gauge<i64, AtomicI64>,
    oldest: Gauge<f64, AtomicU64>,
    limits: Family<KindLabel, Counter>,
    model_requests: Counter,
    tokens: Family<KindLabel, Counter>,
    network: Family<DecisionLabel, Counter>,
    /// Jobs' locked artifacts: fetched for the job, found in the cache, refused.
    deps: Family<KindLabel, Counter>,
    rss: Gauge<i64, AtomicI64>,
    events_failed: Family<KindLabel, Counter>,
    running_memory: Gauge<i64, AtomicI64>,
    running_cpu: Gauge<f64, AtomicU64>,
    /// The jobs running now, and the state dir their processes are found by (`live`): read at
    /// each scrape, so the figures are the processes' own, not a sampler's last look.
    running_jobs: Mutex<std::collections::BTreeSet<String>>,
    state: Option<crate::state::StateDir>,
    budget_left: Family<AccountLabel, Gauge>,
    /// The accounts with a daily token budget, and that budget (the config's when `serve`
    /// started); what is left is read from the budget files at each scrape.
    budgets: Vec<(String, u64)>,
    /// Why `serve` takes no job now, by check; empty when it takes jobs.
    not_ready: Mutex<Vec<(&'static str, String)>>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let m = Metrics {
            registry: Registry::default(),
            started: Family::default(),
            ended: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
            phases: Family::new_with_constructor(phase_histogram),
            devshell: Family::default(),
            running: Gauge::default(),
            queued: Gauge::default(),
            oldest: Gauge::default(),
            limits: Family::default(),
            model_requests: Counter::default(),
            tokens: Family::default(),
            network: Family::default(),
            deps: Family::default(),
            rss: Gauge::default(),
            events_failed: Family::default(),
            running_memory: Gauge::default(),
            running_cpu: Gauge::default(),
            running_jobs: Mutex::default(),
            state: None,
            budget_left: Family::default(),
            budgets: Vec::new(),
            // Until the serve loop has recovered the past and made its checks.
            not_ready: Mutex::new(vec![("serve", "starting".to_string())]),
        };
        m.register()
    }

    /// Metrics of a `serve` on `state`, whose running jobs' memory and CPU are read from
    /// their processes at each scrape, as what is left of `budgets` (account, tokens a day)
    /// is from the gateway's budget files.
    pub fn for_state(state: crate::state::StateDir, budgets: Vec<(String, u64)>) -> Metrics {
        Metrics {
            state: Some(state),
            budgets,
            ..Metrics::new()
        }
    }

    fn register(mut self) -> Metrics {
        let r = &mut self.registry;
        let p = "quest_runner_";
        r.register(
            format!("{p}jobs_started"),
            "Jobs started",
            self.started.clone(),
        );
        r.register(
            format!("{p}jobs_ended"),
            "Jobs ended, by outcome",
            self.ended.clone(),
        );
        r.register(
            format!("{p}job_duration_seconds"),
            "Job durations, start to end",
            self.duration.clone(),
        );
        r.register(
            format!("{p}job_phase_seconds"),
            "The runner's steps before the agent: workspace (fetch, worktree), devshell (cache \
             or build), agent_start (all of them, to the agent's start)",
            self.phases.clone(),
        );
        r.register(
            format!("{p}devshell_lookups"),
            "Jobs' devShell lookups, by whether the cache answered (hit) or nix ran (miss)",
            self.devshell.clone(),
        );
        r.register(
            format!("{p}jobs_running"),
            "Jobs running now",
            self.running.clone(),
        );
        r.register(
            format!("{p}queue_depth"),
            "Jobs queued",
            self.queued.clone(),
        );
        r.register(
            format!("{p}queue_oldest_age_seconds"),
            "Age of the oldest queued job",
            self.oldest.clone(),
        );
        self.register_resources()
    }

    /// What the jobs used and met: limits, the model, the network, memory and CPU; the
    /// runner's own memory and its undelivered events.
    fn register_resources(mut self) -> Metrics {
        let r = &mut self.registry;
        let p = "quest_runner_";
        r.register(
            format!("{p}limits_fired"),
            "Limits that stopped a job, by kind",
            self.limits.clone(),
        );
        r.register(
            format!("{p}model_requests"),
            "Requests forwarded to the model by the runner's gateway",
            self.model_requests.clone(),
        );
        r.register(
            format!("{p}model_tokens"),
            "Model tokens used, by kind",
            self.tokens.clone(),
        );
        r.register(
            format!("{p}network_requests"),
            "Requests of jobs' proxies, by the decider's decision",
            self.network.clone(),
        );
        r.register(
            format!("{p}dependency_artifacts"),
            "Jobs' locked artifacts, by what the runner did: fetched, cached (found in the cache), refused",
            self.deps.clone(),
        );
        r.register(
            format!("{p}process_resident_memory_bytes"),
            "The runner's own resident memory",
            self.rss.clone(),
        );
        r.register(
            format!("{p}running_jobs_memory_bytes"),
            "Resident memory of the running jobs' processes, summed",
            self.running_memory.clone(),
        );
        r.register(
            format!("{p}running_jobs_cpu_seconds"),
            "CPU time the running jobs' processes have used so far, summed",
            self.running_cpu.clone(),
        );
        r.register(
            format!("{p}model_budget_remaining_tokens"),
            "Tokens left of an account's daily budget (UTC day), for accounts that have one",
            self.budget_left.clone(),
        );
        r.register(
            format!("{p}events_failed"),
            "Job events not delivered, by kind: webhook (after its tries), command, dropped",
            self.events_failed.clone(),
        );
        self
    }

    pub fn job_started(&self, agent: &str, id: &str) {
        self.running_jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_string());
        let agent = agent.to_string();
        self.started.get_or_create(&AgentLabel { agent }).inc();
        self.running.inc();
    }

    /// Counts what `result` says the job did; called once per run, whatever its end.
    pub fn job_ended(&self, result: &JobResult) {
        let agent = result.agent.name().to_string();
        self.running_jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&result.job_id);
        self.running.dec();
        let outcome = result.outcome.as_str().to_string();
        self.ended
            .get_or_create(&EndLabels {
                agent: agent.clone(),
                outcome,
            })
            .inc();
        self.duration
            .get_or_create(&AgentLabel { agent })
            .observe(result.duration_ms as f64 / 1000.0);
        self.observe_phases(result);
        self.observe_deps(result);
        if let Some(kind) = &result.limit_fired {
            let kind = kind.clone();
            self.limits.get_or_create(&KindLabel { kind }).inc();
        }
        if let Some(usage) = &result.usage {
            self.model_requests.inc_by(usage.requests);
            for (kind, n) in [
                ("input", usage.input_tokens),
                ("output", usage.output_tokens),
                ("cache_read", usage.cache_read_tokens),
                ("cache_write", usage.cache_write_tokens),
            ] {
                let kind = kind.to_string();
                self.tokens.get_or_create(&KindLabel { kind }).inc_by(n);
            }
        }
        if let Some(net) = &result.network {
            for (decision, n) in [
                ("allowed", net.allowed),
                ("refused", net.refused),
                ("served", net.served),
            ] {
                let decision = decision.to_string();
                self.network
                    .get_or_create(&DecisionLabel { decision })
                    .inc_by(n);
            }
        }
    }

    /// What a job's locks came to.
    fn observe_deps(&self, result: &JobResult) {
        let Some(deps) = &result.deps else { return };
        for (kind, n) in [
            ("fetched", deps.fetched),
            ("cached", deps.artifacts.saturating_sub(deps.fetched)),
            ("refused", deps.refused),
        ] {
            let kind = kind.to_string();
            self.deps.get_or_create(&KindLabel { kind }).inc_by(n);
        }
    }

    /// The steps before the agent that the job reached, and its devShell lookup.
    fn observe_phases(&self, result: &JobResult) {
        let phases = result.phases.clone().unwrap_or_default();
        for (phase, ms) in [
            ("workspace", phases.workspace_ms),
            ("devshell", phases.devshell_ms),
            ("agent_start", result.agent_started_ms),
        ] {
            if let Some(ms) = ms {
                self.phases
                    .get_or_create(&PhaseLabel { phase })
                    .observe(ms as f64 / 1000.0);
            }
        }
        if let Some(shell) = &result.devshell {
            let cache = match shell.cache {
                crate::devshell::CacheStatus::Hit => "hit",
                crate::devshell::CacheStatus::Miss => "miss",
            };
            self.devshell.get_or_create(&CacheLabel { cache }).inc();
        }
    }

    /// A job event that did not reach a receiver (`kind`: webhook, command, dropped).
    pub fn event_failed(&self, kind: &str) {
        let kind = kind.to_string();
        self.events_failed.get_or_create(&KindLabel { kind }).inc();
    }

    pub fn set_queue(&self, depth: QueueDepth) {
        self.queued
            .set(i64::try_from(depth.queued).unwrap_or(i64::MAX));
        self.oldest.set(depth.oldest_age_seconds);
    }

    /// Records whether check `name` passes now (`Err` says why not).
    pub fn set_check(&self, name: &'static str, state: Result<(), String>) {
        let mut not_ready = self.not_ready.lock().unwrap_or_else(|e| e.into_inner());
        not_ready.retain(|(n, _)| *n != name);
        if let Err(why) = state {
            not_ready.push((name, why));
        }
    }

    /// Why `serve` takes no job now, one line per failing check; `None` when it does.
    pub fn not_ready(&self) -> Option<String> {
        let not_ready = self.not_ready.lock().unwrap_or_else(|e| e.into_inner());
        let lines: Vec<String> = not_ready.iter().map(|(n, w)| format!("{n}: {w}")).collect();
        (!lines.is_empty()).then(|| lines.join("\n"))
    }

    /// What is left of each account's budget today.
    fn read_budgets(&self, state: &crate::state::StateDir) {
        for (account, limit) in &self.budgets {
            let budget = crate::gateway::budget::Budget::new(state.root(), account, *limit);
            // An unreadable file is the gateway's to report; the series keeps its value.
            if let Ok(spent) = budget.spent() {
                let left = i64::try_from(limit.saturating_sub(spent)).unwrap_or(i64::MAX);
                let account = account.clone();
                self.budget_left
                    .get_or_create(&AccountLabel { account })
                    .set(left);
            }
        }
    }

    /// The Prometheus text format of every metric, the runner's RSS read now.
    pub fn render(&self) -> String {
        if let Some(rss) = resident_bytes() {
            self.rss.set(i64::try_from(rss).unwrap_or(i64::MAX));
        }
        if let Some(state) = &self.state {
            let ids = self
                .running_jobs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            let (mut memory, mut cpu_ms) = (0u64, 0u64);
            for id in &ids {
                let live = super::live::processes(state, id);
                memory += live.memory_bytes;
                cpu_ms += live.cpu_ms;
            }
            self.running_memory
                .set(i64::try_from(memory).unwrap_or(i64::MAX));
            self.running_cpu.set(cpu_ms as f64 / 1000.0);
            self.read_budgets(state);
        }
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// The runner's resident set, from /proc/self/statm (in pages).
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * rustix::param::page_size() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A running job's processes — found by their environment, as `live` finds them — count in
    /// the running jobs' memory and CPU at the scrape, and no longer once the job has ended.
    #[test]
    fn running_jobs_memory_and_cpu_are_their_processes_read_at_the_scrape() {
        let dir = tempfile::tempdir().unwrap();
        let state = crate::state::StateDir::at(dir.path());
        let home = crate::workspace::job_root(&state, "j1").join("home");
        std::fs::create_dir_all(&home).unwrap();
        // Busy for a moment (CPU time to count), then idle until killed.
        let mut child = std::process::Command::new("sh")
            .args([
                "-c",
                "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; exec sleep 30",
            ])
            .env("HOME", &home)
            .spawn()
            .unwrap();
        let metrics = Metrics::for_state(state, Vec::new());
        metrics.job_started("claude", "j1");
        let value = |scrape: &str, series: &str| -> f64 {
            let line = scrape
                .lines()
                .find(|l| l.starts_with(&format!("{series} ")));
            line.and_then(|l| l.split(' ').nth(1)?.parse().ok())
                .unwrap_or(-1.0)
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let scrape = loop {
            let scrape = metrics.render();
            let cpu = value(&scrape, "quest_runner_running_jobs_cpu_seconds");
            if cpu > 0.0 || std::time::Instant::now() > deadline {
                break scrape;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        };
        assert!(
            value(&scrape, "quest_runner_running_jobs_cpu_seconds") > 0.0,
            "{scrape}"
        );
        assert!(value(&scrape, "quest_runner_running_jobs_memory_bytes") > 100_000.0);
        let _ = child.kill();
        let _ = child.wait();
        metrics.job_ended(&JobResult::new(&crate::run::result::tests::job()));
        let scrape = metrics.render();
        assert_eq!(
            value(&scrape, "quest_runner_running_jobs_memory_bytes"),
            0.0
        );
    }
}
