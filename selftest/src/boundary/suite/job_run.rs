//! The job itself, run through the runner while the suite searches its agent for the
//! account's secret from outside; then the verdict of every attempt from what it left.

use super::verdicts::{clip, decided, detect, network_log, refused_by_runner, tool_outputs, Seen};
use super::watch::{secret_search_report, watch_agent};
use super::SuiteRun;
use crate::boundary::attempts::Rule;
use crate::boundary::report::{AttemptReport, ControlReport};
use crate::boundary::secret_search::Findings;
use crate::model_server::Exchange;
use quest_runner::run::{Cancel, JobResult};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What the job left, as the verdicts and the controls after it read it.
pub(super) struct JobRun {
    pub(super) result: JobResult,
    /// The secret search's findings for the account's secret, and how many agent processes
    /// it searched.
    pub(super) findings: (Findings, usize),
    /// What the same search found of the push credential in the agent's processes and dirs.
    pub(super) push_findings: Findings,
    /// Store paths that appeared while the job ran (searched for the push credential).
    pub(super) new_store_paths: Vec<PathBuf>,
    /// What the scripted model served while the job ran.
    pub(super) exchanges: Vec<Exchange>,
    /// `METHOD path` of what the stand-in registry got while the job ran.
    pub(super) registry_seen: Vec<String>,
    pub(super) net_log: Vec<String>,
    /// The output of each of the script's tool calls, by step.
    pub(super) outputs: BTreeMap<usize, String>,
    pub(super) job_root: PathBuf,
}

impl SuiteRun<'_> {
    /// Runs the job, with the secret search on a thread of its own while it runs.
    pub(super) async fn run_job(&self) -> Result<JobRun, String> {
        let (fixture, server) = (&self.harness.fixture, &self.harness.server);
        let registry = self.harness.registry.as_ref();
        let served_before = server.exchanges().len();
        let registry_before = registry.map_or(0, |r| r.requests().len());
        let job_root = quest_runner::workspace::job_root(self.state, &self.job.id);
        let stop = Arc::new(AtomicBool::new(false));
        let watcher = {
            let secrets = vec![
                fixture.secrets.account.clone(),
                fixture.secrets.push.clone(),
            ];
            let (root, stop) = (job_root.clone(), stop.clone());
            tokio::task::spawn_blocking(move || watch_agent(&secrets, &root, &stop))
        };
        let store_before = super::store_paths::store_names();
        let result = self
            .runner
            .run(self.job, std::future::pending::<Cancel>())
            .await;
        stop.store(true, Ordering::Relaxed);
        let (mut findings, agents) = watcher.await.unwrap_or_default();
        let push_findings = findings.pop().unwrap_or_default();
        let findings = (findings.pop().unwrap_or_default(), agents);
        let new_store_paths = super::store_paths::new_store_paths(&store_before);
        // The job's `rotate-secrets` replaced the account's key: what follows (the secret
        // search's control links the account's file and looks for the key) needs the one the
        // fixture names.
        fixture
            .restore_account()
            .map_err(|e| format!("restoring the account's key after the job: {e}"))?;
        let mut exchanges = server.exchanges();
        let exchanges = exchanges.split_off(served_before.min(exchanges.len()));
        let registry_seen: Vec<String> = registry
            .map(|r| r.requests().split_off(registry_before))
            .unwrap_or_default();
        let net_log = network_log(&result);
        Ok(JobRun {
            outputs: tool_outputs(server),
            result,
            findings,
            push_findings,
            new_store_paths,
            exchanges,
            registry_seen,
            net_log,
            job_root,
        })
    }

    /// Each attempt's verdict: its last step's tool result, and what the servers got.
    pub(super) fn attempt_reports(
        &self,
        ran: &JobRun,
        control_results: &[Option<bool>],
    ) -> Vec<AttemptReport> {
        let seen = Seen {
            exchanges: &ran.exchanges,
            registry: &ran.registry_seen,
        };
        let attempts = self.plan.attempts.iter().enumerate();
        let mut reports = Vec::new();
        for (i, a) in attempts {
            let output = ran.outputs.get(&self.plan.last_step[i]).cloned();
            let ran_marker = match (&a.ran_marker, &output) {
                (Some(marker), Some(out)) => out.contains(marker.as_str()),
                (None, Some(_)) => true,
                (_, None) => false,
            };
            let text = output.clone().unwrap_or_default();
            let escaped = detect(&a.detect, &text, seen, &self.harness.fixture);
            let refused_by_runner =
                (a.rule == Rule::FileTools).then(|| refused_by_runner(self.cfg.agent, &text));
            reports.push(AttemptReport {
                id: a.id,
                what: a.what.clone(),
                rule: a.rule,
                control_escaped: control_results[i],
                ran: ran_marker,
                escaped,
                refused_by_runner,
                evidence: clip(&text, 600),
                network: a.net_tag.as_deref().map(|tag| decided(&ran.net_log, tag)),
            });
        }
        reports
    }

    /// The secret search as an attempt, and its control when the run has controls.
    pub(super) fn secret_search(
        &self,
        ran: &JobRun,
        reports: &mut Vec<AttemptReport>,
        controls: &mut Vec<ControlReport>,
    ) {
        let report = secret_search_report(&ran.findings, &self.harness.fixture, self.cfg.controls);
        if let Some(found) = report.control_escaped {
            controls.push(ControlReport::new(
                "the secret search finds a key held the pre-gateway way",
                found,
                "a process with it in its environment, a private dir linking the account's file"
                    .into(),
            ));
        }
        reports.push(report);
    }
}
