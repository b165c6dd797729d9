//! The integration tests, one module per part of the runner; `tests/all.rs` links them as one
//! binary (one link, one set of fixtures), so `cargo test --test all -- suite::<module>::` runs one.

mod agent_net;
mod agents_smoke;
mod boundary;
mod cli;
mod deliver;
mod deploy;
mod deps;
mod devshell;
mod devshell_confined;
mod devshell_inprocess;
mod docs;
mod events;
mod flake;
mod gvisor;
mod job_git;
mod jobshell;
mod layered;
mod metrics;
mod netproxy;
mod pg_queue;
mod queue_entries;
mod run_claude;
mod run_opencode;
mod serve;
mod serve_pg;
mod soak;
mod state_owner;
mod structure;
mod workspace;
