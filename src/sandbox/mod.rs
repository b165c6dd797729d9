//! The sandbox of a job's commands: one policy, rendered per agent.

pub mod policy;

pub use policy::{plan, Platform, PolicyInputs, SandboxPolicy, WorkspacePaths};
