//! The `quest-runner` binary: the runner's core (`quest_runner`, src/lib.rs, its own package
//! in core/) and the boundary suite `selftest` runs (`quest_runner_selftest`, selftest/),
//! linked into one executable.

use std::process::ExitCode;

fn main() -> ExitCode {
    // the agents' shell and the sandbox's executor are modes of this binary (src/jobshell).
    if let Some(code) = quest_runner::jobshell::dispatch() {
        return code;
    }
    // The bridges of the job's network namespace (src/agentnet.rs).
    if let Some(code) = quest_runner::agentnet::dispatch() {
        return code;
    }
    quest_runner::cli::main(quest_runner_selftest::command::run)
}
