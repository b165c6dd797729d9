//! What a job left, handed to every control judged after it ([`super::after_job`] and the
//! gateway's, push's and company's controls it calls).

use super::SuiteConfig;
use crate::boundary::fixture::Fixture;
use crate::model_server::ModelServer;
use quest_runner::run::JobResult;

/// What the job left, which the controls after it judge: its result, the output of each of
/// the script's tool calls (by step) and its network log, with the run's fixture and servers.
#[derive(Clone, Copy)]
pub(super) struct JobEvidence<'a> {
    pub(super) fixture: &'a Fixture,
    pub(super) server: &'a ModelServer,
    pub(super) cfg: &'a SuiteConfig,
    pub(super) result: &'a JobResult,
    pub(super) outputs: &'a std::collections::BTreeMap<usize, String>,
    pub(super) net_log: &'a [String],
}
