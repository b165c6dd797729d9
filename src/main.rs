use std::process::ExitCode;

fn main() -> ExitCode {
    // opencode's shell and the sandbox's executor are modes of this binary (src/jobshell).
    if let Some(code) = quest_runner::jobshell::dispatch() {
        return code;
    }
    // The bridges of the job's network namespace (src/agentnet.rs).
    if let Some(code) = quest_runner::agentnet::dispatch() {
        return code;
    }
    quest_runner::cli::main()
}
