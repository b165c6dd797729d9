//! The hostile-repository boundary suite.
//!
//! One real runner job — real agent, real sandbox, real devShell — on a repository that
//! attacks its runner, with a scripted model that makes the attacks one tool call at a time.
//! No refusal can pass vacuously:
//! - every shell attempt first runs unconfined, with the same paths, and must escape there;
//! - a permitted command must write the checkout and `$TMPDIR` inside the same sandbox;
//! - every attempt prints a marker after it runs, and the marker must come back;
//! - the agent must offer every tool the script calls, and file-tool refusals must come from
//!   the runner's rules;
//! - the checkout's own hooks and plugins are shown to fire when an agent loads them plainly;
//! - after the job: nothing uncommitted in the checkout, no temp dir, no process.
//!
//! Mutation checks ([`mutation::Mutation`]) weaken one rule each and require its escape.
//!
//! Beside the main job, [`disk`] runs a job that fills its disk next to a normal one.

pub mod attempts;
pub mod disk;
pub mod fixture;
pub mod host_config;
pub mod mutation;
pub mod report;
pub mod secret_search;
pub mod suite;

pub use mutation::{Mutation, FILE_TOOL_ATTEMPTS};
pub use suite::{run, SuiteConfig, SuiteReport, JOB_TIMEOUT};
