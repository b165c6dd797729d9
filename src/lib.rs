//! quest-runner: runs AI coding-agent jobs on a pinned revision of a repository, inside an
//! OS sandbox, with that revision's own Nix devShell.
//!
//! Data flows one way: job → workspace → devShell → sandbox policy → agent adapter → result.
//! This crate grows along that line; each stage is one module.

pub mod activity;
pub mod agent;
pub mod agent_id;
pub mod agentnet;
pub mod binaries;
pub mod cli;
pub mod config;
pub mod deliver;
pub mod deploy;
pub mod deps;
pub mod devshell;
pub mod disk;
pub mod exit;
pub mod gateway;
pub mod git;
pub mod git_objects;
pub mod instructions;
pub mod job;
pub mod jobshell;
pub mod lockfile;
pub mod nar;
pub mod netproxy;
pub mod nix_setup;
pub mod preflight;
pub mod process;
pub mod procfs;
pub mod remove;
pub mod run;
pub mod sandbox;
pub mod serve;
pub mod state;
pub mod store_path;
pub mod users;
pub mod util;
pub mod workspace;
