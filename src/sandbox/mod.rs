//! The sandbox of a job's commands: one policy, rendered per agent.

pub mod boundary;
mod env;
mod files;
pub mod gvisor;
mod inputs;
mod network;
pub mod policy;
pub mod private;
pub mod programs;
pub mod store;

/// The CA variables a trusted job gets, which docs/security.md lists (tests/suite/docs.rs).
pub use network::TRUST_VARS;
pub use policy::{plan, Platform, PolicyInputs, SandboxPolicy};
pub use private::{HiddenFile, PrivateKind};
