//! What a job ended as: the one result type that `run` fills, `serve` adds its limits report
//! to, `result.json` holds and every [`crate::serve::JobSource`] records.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::devshell;
use crate::exit::Exit;
use crate::job::{AgentKind, Job, Trust};

/// How a job ended. Saved as its name alone (`"cancelled"`, not which signal): the signal is in
/// the result's `message`, and the exit code (see [`Outcome::exit`]) tells the two apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The agent exited 0.
    Succeeded,
    /// The agent exited non-zero or was killed by a signal.
    Failed,
    TimedOut,
    /// A signal asked the runner to stop the job.
    Cancelled(Cancel),
    /// The runner refused the job (untrusted revision, host not ready, bad account).
    Refused,
    /// The runner could not prepare or run it (fetch, devShell, I/O).
    Error,
}

/// Why a job was cancelled, so the exit code can name the signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancel {
    Interrupt,
    Terminate,
}

/// A job's result, as `<state>/jobs/<id>/result.json` holds it. The fields `serve` alone
/// fills (its cgroups' report) are left out of the file when empty, so a job run by
/// `quest-runner run` saves exactly the fields it always did. Read back, a result saved
/// before a field existed has it empty (`None`, an empty list).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobResult {
    pub job_id: String,
    pub outcome: Outcome,
    pub agent: AgentKind,
    pub rev: String,
    /// The agent's exit code, when it exited.
    pub exit_status: Option<i32>,
    /// The signal that killed the agent, when one did.
    pub signal: Option<i32>,
    pub duration_ms: u64,
    /// The worktree's HEAD when the agent stopped, and the commits it made (oldest first).
    pub head: Option<String>,
    #[serde(default)]
    pub commits: Vec<String>,
    /// Paths the agent left in the worktree without committing them (untracked and ignored
    /// included), as `git status --porcelain --ignored` lists them. Removed with the worktree.
    #[serde(default)]
    pub uncommitted: Vec<String>,
    /// The agent's event stream (Claude Code's stream-json, opencode's JSON events).
    pub transcript: Option<PathBuf>,
    pub devshell: Option<DevShellSummary>,
    /// Milliseconds from the job's start until the agent was started: the runner's own work
    /// (workspace, devShell, policy, files).
    pub agent_started_ms: Option<u64>,
    /// Why the job did not succeed, in one line.
    pub message: Option<String>,
    /// Requests the runner's proxy allowed and refused, and the job's network log (trusted
    /// jobs; untrusted ones reach no host).
    pub network: Option<crate::netproxy::NetworkSummary>,
    /// The limit that stopped the job (`disk` and `tokens` here; `serve` adds those its
    /// cgroups report).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_fired: Option<String>,
    /// The most the job had on disk at one of the disk watchdog's measurements, in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_used: Option<u64>,
    /// The job's model use as the runner's gateway metered it: requests, tokens per model,
    /// time waiting on the model (absent when the agent reached no model through it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::gateway::Usage>,
    /// How long the job's cgroup's cpu.max held it back, in milliseconds (`serve`, when it
    /// did at all).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_throttled_ms: Option<u64>,
    /// The limits `serve` had in force, for a job that did not succeed: what an operator
    /// reading a failure needs to know.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<String>,
    /// The repository and trust of the job, which `quest-runner push` and `export` find its
    /// work by (absent in results saved before they were recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust: Option<Trust>,
    /// Where the job's commits were pushed, or why not (config `push`; absent when its
    /// repository has no push settings or it made no commits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push: Option<crate::deliver::PushRecord>,
    /// How long the runner's steps before the agent took, in milliseconds: where
    /// `agent_started_ms` went (the metrics' phase histograms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phases: Option<Phases>,
    /// What the revision's locks gave the job: the artifacts in its set, how many were
    /// fetched now, refused, and served to it (absent when it has no locks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deps: Option<crate::deps::DepsSummary>,
}

/// The runner's steps before the agent, each as long as it took (absent: not reached).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Phases {
    /// The shared clone fetched, the job's worktree and temp dirs made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_ms: Option<u64>,
    /// The devShell found in the cache or built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devshell_ms: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DevShellSummary {
    pub cache: devshell::CacheStatus,
    pub key: String,
    pub present: bool,
}

impl JobResult {
    /// The result of `job` before anything has happened: an error until a step says
    /// otherwise, so that a job that stops halfway never reads as a success.
    pub fn new(job: &Job) -> JobResult {
        JobResult {
            job_id: job.id.clone(),
            outcome: Outcome::Error,
            agent: job.agent,
            rev: job.rev.clone(),
            exit_status: None,
            signal: None,
            duration_ms: 0,
            head: None,
            commits: Vec::new(),
            uncommitted: Vec::new(),
            transcript: None,
            devshell: None,
            agent_started_ms: None,
            message: None,
            network: None,
            limit_fired: None,
            disk_used: None,
            usage: None,
            cpu_throttled_ms: None,
            limits: None,
            repo: Some(job.repo.clone()),
            trust: Some(job.trust),
            push: None,
            phases: None,
            deps: None,
        }
    }

    /// Ends the result as `outcome`, saying why.
    pub fn end(&mut self, outcome: Outcome, message: String) {
        self.outcome = outcome;
        self.message = Some(message);
    }

    /// Adds `notes` to the message, after what it says already.
    pub fn add_to_message(&mut self, notes: &str) {
        self.message = Some(match self.message.take() {
            Some(m) => format!("{m}; {notes}"),
            None => notes.to_string(),
        });
    }
}

impl Outcome {
    /// A job cancelled because someone asked (`quest-runner cancel`): `serve` stops it with
    /// SIGTERM. A saved `"cancelled"` reads back as this, since the name keeps no signal.
    pub const CANCELLED_ON_REQUEST: Outcome = Outcome::Cancelled(Cancel::Terminate);

    /// The process exit code `quest-runner run` ends with.
    pub fn exit(self) -> Exit {
        match self {
            Outcome::Succeeded => Exit::Success,
            Outcome::Failed | Outcome::Error => Exit::Failed,
            Outcome::Refused => Exit::Refused,
            Outcome::TimedOut => Exit::TimedOut,
            Outcome::Cancelled(Cancel::Interrupt) => Exit::Interrupted,
            Outcome::Cancelled(Cancel::Terminate) => Exit::Terminated,
        }
    }

    /// The name `result.json` and `serve` record.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::TimedOut => "timed_out",
            Outcome::Cancelled(_) => "cancelled",
            Outcome::Refused => "refused",
            Outcome::Error => "error",
        }
    }
}

impl Serialize for Outcome {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// A saved `"cancelled"` does not say which signal stopped the job: it reads back as
/// [`Outcome::CANCELLED_ON_REQUEST`]. Only [`Outcome::exit`] tells the signals apart, and
/// `run` takes that from the result it made, never from a saved one.
impl<'de> Deserialize<'de> for Outcome {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        const NAMES: &[&str] = &[
            "succeeded",
            "failed",
            "timed_out",
            "cancelled",
            "refused",
            "error",
        ];
        let name = String::deserialize(deserializer)?;
        Ok(match name.as_str() {
            "succeeded" => Outcome::Succeeded,
            "failed" => Outcome::Failed,
            "timed_out" => Outcome::TimedOut,
            "cancelled" => Outcome::CANCELLED_ON_REQUEST,
            "refused" => Outcome::Refused,
            "error" => Outcome::Error,
            other => return Err(serde::de::Error::unknown_variant(other, NAMES)),
        })
    }
}

impl Cancel {
    /// The signal's name, as messages give it.
    pub fn signal_name(self) -> &'static str {
        match self {
            Cancel::Interrupt => "SIGINT",
            Cancel::Terminate => "SIGTERM",
        }
    }
}

#[cfg(test)]
#[path = "result_tests.rs"]
pub(crate) mod tests;
