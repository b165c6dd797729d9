use std::process::ExitCode;

fn main() -> ExitCode {
    quest_runner::cli::main()
}
