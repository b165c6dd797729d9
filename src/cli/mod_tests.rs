use super::*;

fn level(args: &[&str]) -> &'static str {
    let cli =
        Cli::try_parse_from(std::iter::once("quest-runner").chain(args.iter().copied())).unwrap();
    cli.globals.level()
}

#[test]
fn verbose_and_quiet_move_the_log_level_from_info() {
    assert_eq!(level(&["jobs"]), "info");
    assert_eq!(level(&["-v", "jobs"]), "debug");
    assert_eq!(level(&["jobs", "-vv"]), "trace");
    assert_eq!(level(&["-q", "jobs"]), "warn");
    assert_eq!(level(&["--quiet", "--quiet", "jobs"]), "error");
    assert!(Cli::try_parse_from(["quest-runner", "-v", "-q", "jobs"]).is_err());
}

#[test]
fn the_subcommand_is_found_past_global_options() {
    let args: Vec<std::ffi::OsString> = ["quest-runner", "-v", "--color", "never", "env", "x"]
        .iter()
        .map(Into::into)
        .collect();
    assert_eq!(subcommand_of(&args), Some("env"));
}
