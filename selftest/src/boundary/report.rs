//! What a run of the suite reports: each attempt's verdict, each control, and the lines
//! and summary the tests and `selftest` print.

use crate::boundary::attempts::Rule;
use crate::boundary::mutation::Mutation;
use quest_runner::job::{AgentKind, Trust};
use quest_runner::run::JobResult;
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct AttemptReport {
    pub id: &'static str,
    pub what: String,
    pub rule: Rule,
    /// The same command escaped when run unconfined (`None`: no unconfined form).
    pub control_escaped: Option<bool>,
    /// The attempt reached the sandbox (its marker, or a tool result, came back).
    pub ran: bool,
    pub escaped: bool,
    /// For file tools: the refusal came from the runner's rules or its namespace.
    pub refused_by_runner: Option<bool>,
    pub evidence: String,
    /// For network attempts: the requests the runner's decider allowed and refused, from
    /// the job's network log (none: the request never reached the decider).
    pub network: Option<(usize, usize)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ControlReport {
    pub name: String,
    pub passed: bool,
    pub detail: String,
}

impl ControlReport {
    pub(in crate::boundary) fn new(name: &str, passed: bool, detail: String) -> ControlReport {
        ControlReport {
            name: name.into(),
            passed,
            detail,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SuiteReport {
    pub agent: AgentKind,
    pub trust: Trust,
    pub mutation: Option<Mutation>,
    pub attempts: Vec<AttemptReport>,
    pub controls: Vec<ControlReport>,
    pub job: Option<JobResult>,
    /// `METHOD path` of every request the scripted model's server received.
    pub requests: Vec<String>,
    pub seconds: f64,
}

/// The control that says every attempt of the run ran: without it a refusal is no verdict.
pub const ATTEMPTS_RAN: &str = "every attempt ran (its marker came back)";

impl SuiteReport {
    /// Whether every attempt of the run ran (its marker came back): a run whose agent died
    /// before its attempts (an agent's crash at start) judged nothing, refused or escaped.
    pub fn attempts_ran(&self) -> bool {
        self.controls
            .iter()
            .any(|c| c.name == ATTEMPTS_RAN && c.passed)
    }

    pub fn escaped(&self) -> Vec<&AttemptReport> {
        self.attempts.iter().filter(|a| a.escaped).collect()
    }

    pub fn failed_controls(&self) -> Vec<&ControlReport> {
        self.controls.iter().filter(|c| !c.passed).collect()
    }

    /// Whether the run under `mutation` shows the escapes the weakened rule must free: every
    /// such attempt of the run escaped (an agent without a tool has no attempt with it), and
    /// there was at least one.
    pub fn caught(&self, mutation: Mutation) -> bool {
        let freed: Vec<&AttemptReport> = self
            .attempts
            .iter()
            .filter(|a| mutation.caught_by().contains(&a.id))
            .collect();
        !freed.is_empty() && freed.iter().all(|a| a.escaped)
    }

    /// The boundary held and the run proves it: nothing escaped and every control passed.
    pub fn holds(&self) -> bool {
        self.escaped().is_empty() && self.failed_controls().is_empty()
    }

    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for a in &self.attempts {
            let verdict = if a.escaped { "ESCAPED" } else { "refused" };
            let net = match a.network {
                Some((allowed, refused)) => {
                    format!(" [decider: {allowed} allowed, {refused} refused]")
                }
                None => String::new(),
            };
            // The suite's own search says how far it looked.
            let searched = match a.id {
                "agent-holds-secret" | "push-credential-held" => format!(" [{}]", a.evidence),
                // What the agent's tool answered: the runner's rule, the namespace, or the
                // file itself.
                _ if a.rule == Rule::FileTools => {
                    let said: String = a.evidence.chars().take(140).collect();
                    format!(" [{}]", said.replace('\n', " "))
                }
                _ => String::new(),
            };
            out.push(format!(
                "{verdict:<8} {:<24} {}{net}{searched}",
                a.id, a.what
            ));
        }
        for c in &self.controls {
            let verdict = if c.passed { "ok" } else { "FAILED" };
            out.push(format!("control {verdict:<6} {:<32} {}", c.name, c.detail));
        }
        out
    }

    pub fn summary(&self) -> String {
        format!(
            "{} ({:?}): {} attempts, {} refused, {} escaped; {}/{} controls passed; {:.1}s",
            self.agent.name(),
            self.trust,
            self.attempts.len(),
            self.attempts.iter().filter(|a| !a.escaped).count(),
            self.escaped().len(),
            self.controls.iter().filter(|c| c.passed).count(),
            self.controls.len(),
            self.seconds,
        )
    }
}
