//! The command line: parsing, logging, exit codes, and one function per subcommand.
//!
//! Data goes to stdout, the log to stderr. A cache hit of `env` is answered before any async
//! runtime starts, so it costs little more than reading the cached file.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

use crate::config::Config;
use crate::devshell::DevShellError;
use crate::exit::Exit;
use crate::state::StateDir;

mod deliver;
mod deploy;
mod doctor;
mod env;
mod events;
pub mod extension;
mod logs;
mod policy;
mod queue;
mod ran;
mod run;
mod runtime;
mod shell_files;

const EXIT_CODES: &str = "\
Exit codes:
  0    success (for run: the agent exited 0)
  1    the work failed (a Nix error; for run: the agent failed or the job could not run)
  2    bad input: usage, a bad argument or job field, a path that is not a repository, a
       config file that is missing (when named), unreadable, empty or invalid, an account
       whose file is missing, unreadable, empty or not what it should hold (doctor too)
  3    the host is not ready: a missing binary, an unusable state directory, a failed
       doctor check
  4    run: the job was refused (untrusted revision, unknown account, a secret the sandbox
       cannot hide, no room on disk)
  5    run: the job timed out
  130  interrupted by SIGINT
  143  terminated by SIGTERM";

/// `--help`'s first line and man's NAME: the binary's description; bare `about` takes the core's.
const ABOUT: &str =
    "Runs AI coding-agent jobs on a pinned revision, in an OS sandbox, with that revision's Nix devShell";

#[derive(Debug, Parser)]
#[command(name = "quest-runner", version, about = ABOUT, after_help = EXIT_CODES)]
pub struct Cli {
    #[command(flatten)]
    globals: Globals,
    #[command(subcommand)]
    command: Command,
}

/// `quest-runner env` alone. A cache hit of `env` costs little more than reading the cached
/// file, and defining every subcommand is a good part of that cost (measured by
/// `scripts/release-cargo bench --bench devshell`), so an `env` invocation is parsed with just
/// its own definition; anything it does not accept is parsed again by [`Cli`], for the same
/// errors and help.
#[derive(Debug, Parser)]
#[command(name = "quest-runner")]
struct EnvOnlyCli {
    #[command(flatten)]
    globals: Globals,
    #[command(subcommand)]
    command: EnvOnly,
}

#[derive(Debug, Subcommand)]
enum EnvOnly {
    Env(EnvArgs),
}

/// Options every subcommand takes.
#[derive(Debug, clap::Args)]
struct Globals {
    /// Where caches and roots are kept [default: $XDG_STATE_HOME/quest-runner or
    /// ~/.local/state/quest-runner].
    #[arg(
        long,
        global = true,
        env = "QUEST_RUNNER_STATE_DIR",
        value_name = "DIR"
    )]
    state_dir: Option<PathBuf>,
    /// The runner's JSON configuration [default: <state dir>/config.json].
    #[arg(long, global = true, env = "QUEST_RUNNER_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// How log lines on stderr are written (filter them with RUST_LOG).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Colour in log lines: `auto` only when stderr is a terminal and NO_COLOR is unset (never
    /// in a file, a pipe or the journal).
    #[arg(long, global = true, value_enum, default_value_t = Color::Auto, value_name = "WHEN")]
    color: Color,
    /// More log lines: -v debug, -vv trace (RUST_LOG, when set, decides instead).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Fewer log lines: -q warnings and errors only, -qq errors only.
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "verbose")]
    quiet: u8,
}

impl Globals {
    /// The log level -v and -q ask for, from the default `info`.
    fn level(&self) -> &'static str {
        match (self.verbose, self.quiet) {
            (0, 0) => "info",
            (1, _) => "debug",
            (v, _) if v > 1 => "trace",
            (_, 1) => "warn",
            _ => "error",
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq)]
enum Color {
    Auto,
    Always,
    Never,
}

impl Color {
    /// Whether log lines get ANSI escapes (<https://no-color.org>: any non-empty NO_COLOR).
    fn ansi(self) -> bool {
        use std::io::IsTerminal;
        match self {
            Color::Always => true,
            Color::Never => false,
            Color::Auto => {
                std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                    && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
                    && std::io::stderr().is_terminal()
            }
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the env script of a revision's devShell, building and caching it if needed.
    Env(EnvArgs),
    /// Inspect or trim the devShell and dependency caches.
    Cache {
        #[command(subcommand)]
        command: CacheCommand,
    },
    /// Run one job: an agent on a pinned revision, in the sandbox, with its devShell.
    Run(JobArgs),
    /// Print the sandbox policy a job would run under, and its rendering for the agent.
    Policy(JobArgs),
    /// Check what jobs need from this host, with the fix for each failure.
    Doctor(doctor::DoctorArgs),
    /// Print the systemd system unit that runs `quest-runner serve`, with the same settings
    /// as the NixOS module (for hosts without NixOS).
    SystemdUnit(deploy::SystemdUnitArgs),
    /// Print the AppArmor profile that lets this installation's bwrap create user namespaces
    /// where AppArmor restricts them (Ubuntu 24.04+).
    ApparmorProfile,
    /// Print the completion script for a shell (bash, zsh, fish, elvish, powershell).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), e.g. `quest-runner man | man -l -`.
    Man,
    /// Prove on this host that jobs work and that the sandbox boundary holds: the devShell
    /// cache on a bundled sample, then the hostile-repository suite against the real agents
    /// with a built-in scripted model. Exits non-zero on any escape.
    Selftest(extension::SelftestArgs),
    /// Run queued jobs, `concurrency` at a time, until SIGTERM or SIGINT (SIGHUP reloads
    /// the config).
    Serve(queue::ServeArgs),
    /// Queue a job for `serve`; prints its id.
    Submit(queue::SubmitArgs),
    /// List queued, running and finished jobs.
    Jobs(queue::JobsArgs),
    /// Print a job's state, attempts and result.
    Show(queue::IdArgs),
    /// Print what a job's agent did (text, tool calls, the end), or its raw logs; `-f` follows.
    Logs(logs::LogsArgs),
    /// Cancel a queued or running job.
    Cancel(queue::IdArgs),
    /// Remove finished jobs' files older than a given age.
    Gc(queue::GcArgs),
    /// Write a finished job's commits as a git bundle or as patches.
    Export(deliver::ExportArgs),
    /// Push a finished job's commits as its repository's `push` settings say (again).
    Push(queue::IdArgs),
    /// (Internal: `submit`'s helper) deliver the job event on stdin to the config's receivers.
    #[command(hide = true)]
    DeliverEvent,
}

/// A job, from a file and/or flags (flags override the file's fields).
#[derive(Debug, clap::Args)]
struct JobArgs {
    /// A job file (JSON; see docs/jobs.md for its fields).
    #[arg(long, value_name = "FILE")]
    job: Option<PathBuf>,
    #[arg(long)]
    id: Option<String>,
    /// The repository to fetch from: a URL or a path.
    #[arg(long)]
    repo: Option<String>,
    #[arg(long, value_name = "SHA")]
    rev: Option<String>,
    #[arg(long = "ref", value_name = "NAME")]
    git_ref: Option<String>,
    /// trusted or untrusted.
    #[arg(long)]
    trust: Option<String>,
    /// claude or opencode.
    #[arg(long)]
    agent: Option<String>,
    #[arg(long)]
    account: Option<String>,
    #[arg(long)]
    prompt: Option<String>,
    /// e.g. 30m.
    #[arg(long)]
    timeout: Option<String>,
}

#[derive(Debug, clap::Args)]
struct EnvArgs {
    /// The repository (a bare clone) holding the revision.
    #[arg(long, value_name = "PATH")]
    repo: PathBuf,
    /// The revision: a full 40-hex-digit commit id.
    #[arg(long, value_name = "SHA")]
    rev: String,
    /// The branch or tag that holds the revision [default: one that contains it].
    #[arg(long = "ref", value_name = "NAME")]
    git_ref: Option<String>,
    /// The flake attribute of the devShell [default: devShells.<system>.default].
    #[arg(long, value_name = "ATTR")]
    attr: Option<String>,
    #[arg(long, value_enum, default_value_t = Format::Script)]
    format: Format,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq)]
pub enum Format {
    /// The bash script itself.
    Script,
    /// One JSON object: cache, key, script, gcroot, store_path, ...
    Json,
}

#[derive(Debug, Subcommand)]
enum CacheCommand {
    /// List cached devShells, newest first (JSON lines).
    Ls,
    /// Remove cached devShells and GC roots; trim the dependency cache (least recently used).
    Gc {
        /// Keep at most N entries, the newest.
        #[arg(long, value_name = "N")]
        max_entries: Option<usize>,
        /// Remove entries older than this (e.g. 7d, 12h).
        #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
        older_than: Option<Duration>,
        /// The dependency cache's size to trim to [default: deps.cache_size] (5G; 0 empties it).
        #[arg(long, value_name = "SIZE", value_parser = crate::util::units::parse_size_or_zero)]
        deps_size: Option<u64>,
    },
}

/// A failure with the exit code it maps to.
#[derive(Debug)]
pub struct Failure {
    pub code: Exit,
    pub message: String,
}

impl Failure {
    pub fn new(code: Exit, message: impl std::fmt::Display) -> Failure {
        Failure {
            code,
            message: message.to_string(),
        }
    }

    /// Stops the command with exit 0 and nothing said: stdout's reader went away.
    pub(crate) fn quiet() -> Failure {
        Failure::new(Exit::Success, "")
    }
}

/// A bad job (its file, its id): the operator fixes the input.
impl From<crate::job::JobError> for Failure {
    fn from(e: crate::job::JobError) -> Failure {
        Failure::new(Exit::BadInput, e)
    }
}

/// Any bad config is bad input, like a bad job: the operator fixes the file.
impl From<crate::config::ConfigError> for Failure {
    fn from(e: crate::config::ConfigError) -> Failure {
        Failure::new(Exit::BadInput, e)
    }
}

/// A state directory the runner cannot use (its owner, its permissions, no home to put it
/// in): the host is not ready.
impl From<crate::state::StateError> for Failure {
    fn from(e: crate::state::StateError) -> Failure {
        Failure::new(Exit::HostNotReady, e)
    }
}

/// A private file the job's sandbox could not hide: the config names it where it cannot be.
impl From<crate::sandbox::private::PlacementError> for Failure {
    fn from(e: crate::sandbox::private::PlacementError) -> Failure {
        Failure::new(Exit::BadInput, e)
    }
}

impl From<DevShellError> for Failure {
    fn from(e: DevShellError) -> Failure {
        let code = match &e {
            e if e.is_bad_input() => Exit::BadInput,
            DevShellError::Binary(_) | DevShellError::State(_) => Exit::HostNotReady,
            _ => Exit::Failed,
        };
        Failure::new(code, e)
    }
}

/// Runs the command line. `selftest` is answered by `selftest`, the handler of the crate
/// that holds the boundary suite (see [`extension`]).
pub fn main(selftest: extension::Selftest) -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if subcommand_of(&args) == Some("env") {
        if let Ok(EnvOnlyCli {
            globals,
            command: EnvOnly::Env(env_args),
        }) = EnvOnlyCli::try_parse_from(&args)
        {
            init_logging(&globals);
            return exit(context(&globals, true).and_then(|ctx| env::env(&ctx, env_args)));
        }
    }
    let cli = Cli::parse_from(args);
    init_logging(&cli.globals);
    exit(run(cli, selftest))
}

/// The first word of `args` that is not a global option or its value.
fn subcommand_of(args: &[std::ffi::OsString]) -> Option<&str> {
    let mut words = args.iter().skip(1).filter_map(|a| a.to_str());
    while let Some(word) = words.next() {
        match word {
            "--state-dir" | "--config" | "--log-format" | "--color" => {
                words.next();
            }
            w if w.starts_with('-') => {}
            w => return Some(w),
        }
    }
    None
}

/// `value` as the commands print JSON: pretty, with what could steer a terminal or reorder
/// what it shows (a job's text: its messages, its model's name) as JSON escapes.
pub(crate) fn json(value: &impl serde::Serialize) -> String {
    crate::util::text::json_shown(&serde_json::to_string_pretty(value).unwrap_or_default())
}

/// Writes `text` and a newline to stdout. Every command's data goes through here, not
/// `println!`, which panics when stdout cannot be written (a full disk, a closed pipe).
pub fn out(text: impl std::fmt::Display) -> Result<(), Failure> {
    out_raw(format_args!("{text}\n"))
}

/// [`out`] without the newline.
pub(crate) fn out_raw(text: impl std::fmt::Display) -> Result<(), Failure> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    write!(stdout, "{text}")
        .and_then(|()| stdout.flush())
        .map_err(stdout_failure)
}

/// A failed write to stdout. A closed pipe is no failure: the reader has what it wanted
/// (`jobs --json | head -1`), so the command stops, quietly.
pub(crate) fn stdout_failure(e: std::io::Error) -> Failure {
    match e.kind() {
        std::io::ErrorKind::BrokenPipe => Failure::quiet(),
        _ => Failure::new(Exit::Failed, format!("writing to stdout: {e}")),
    }
}

fn exit(result: Result<(), Failure>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            if !f.message.is_empty() {
                // Not eprintln!, which panics when stderr cannot be written either.
                use std::io::Write;
                // A message may carry a job's text (what its git said, its agent's last line).
                let message = crate::util::text::shown(&f.message);
                let _ = writeln!(std::io::stderr(), "quest-runner: {message}");
            }
            f.code.into()
        }
    }
}

fn init_logging(globals: &Globals) {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(globals.level()));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(globals.color.ansi())
        .with_writer(std::io::stderr);
    match globals.log_format {
        LogFormat::Text => builder.with_target(true).init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// The state directory and configuration every subcommand starts from.
pub struct Context {
    pub state: StateDir,
    pub config: Config,
    /// The file the config came from (or would have): jobs must not read it.
    pub config_path: PathBuf,
}

/// With `check_owner`, a state directory of another user is refused (see
/// [`StateDir::check_owner`]).
fn context(cli: &Globals, check_owner: bool) -> Result<Context, Failure> {
    let root = match &cli.state_dir {
        Some(dir) => dir.clone(),
        None => StateDir::default_path()?,
    };
    let state = StateDir::at(root);
    if check_owner {
        state.check_owner()?;
    }
    let (config_path, required) = match &cli.config {
        Some(path) => (path.clone(), true),
        None => (state.config_file(), false),
    };
    let config = Config::load(&config_path, required)?;
    let config_path = std::path::absolute(&config_path).unwrap_or(config_path);
    Ok(Context {
        state,
        config,
        config_path,
    })
}

fn run(cli: Cli, selftest: extension::Selftest) -> Result<(), Failure> {
    let ctx = match &cli.command {
        // Deployment files need neither the state directory nor the configuration.
        Command::SystemdUnit(args) => return deploy::systemd_unit_command(args),
        Command::ApparmorProfile => return deploy::apparmor_profile_command(),
        Command::Completions { shell } => return shell_files::completions(*shell),
        Command::Man => return shell_files::man(),
        // A config that does not load is one of the things doctor reports, with the rest.
        Command::Doctor(args) => return doctor::doctor(&cli.globals, args),
        _ => context(&cli.globals, true)?,
    };
    match cli.command {
        Command::Env(args) => env::env(&ctx, args),
        Command::Cache { command } => env::cache(&ctx, command),
        Command::Selftest(args) => selftest(&ctx, &args.options()?),
        // Answered above: they need neither the state directory nor the configuration.
        Command::SystemdUnit(_)
        | Command::ApparmorProfile
        | Command::Completions { .. }
        | Command::Man => Ok(()),
        Command::Run(args) => run::run_job(ctx, args),
        Command::Policy(args) => policy::policy(ctx, args),
        Command::Doctor(_) => Ok(()), // answered above
        Command::Serve(args) => queue::serve(ctx, cli.globals.config.clone(), args),
        Command::Submit(args) => queue::submit(ctx, args),
        Command::Jobs(args) => queue::jobs(ctx, args),
        Command::Show(args) => queue::show(ctx, args),
        Command::Logs(args) => logs::logs(ctx, args),
        Command::Cancel(args) => queue::cancel(ctx, args),
        Command::Gc(args) => queue::gc(ctx, args),
        Command::Export(args) => deliver::export(ctx, args),
        Command::Push(args) => deliver::push(ctx, args.id),
        Command::DeliverEvent => events::deliver_event(&ctx),
    }
}

/// The files of the job's account, before anything of the job is done: a missing or empty key
/// is bad input (exit 2), named with its account and file. An account the config lacks is
/// left to the runner and the queue, which refuse it.
fn check_account(ctx: &Context, account: &str) -> Result<(), Failure> {
    match ctx.config.accounts.get(account) {
        Some(a) => crate::gateway::account_check::check(account, a)
            .map(drop)
            .map_err(|e| Failure::new(Exit::BadInput, e)),
        None => Ok(()),
    }
}

/// Builds the job from the file and the flags, and validates every field.
fn job_from(args: JobArgs, ctx: &Context) -> Result<crate::job::Job, Failure> {
    use crate::job::JobSpec;
    let mut value = match &args.job {
        Some(path) => serde_json::to_value(JobSpec::from_file(path)?)
            .map_err(|e| Failure::new(Exit::BadInput, e))?,
        None => serde_json::json!({}),
    };
    for (key, flag) in [
        ("id", args.id),
        ("repo", args.repo),
        ("rev", args.rev),
        ("ref", args.git_ref),
        ("trust", args.trust),
        ("agent", args.agent),
        ("account", args.account),
        ("prompt", args.prompt),
        ("timeout", args.timeout),
    ] {
        if let Some(v) = flag {
            value[key] = serde_json::Value::String(v);
        }
    }
    let spec = JobSpec::from_json(&value.to_string())?;
    Ok(spec.validate(ctx.config.default_timeout)?)
}

/// Runs `work` on a single-threaded runtime until it finishes or the process gets SIGINT or
/// SIGTERM. On a signal the work is dropped first — which stops its children and removes
/// its temporary files — and only then does the runner exit with 130 or 143.
pub fn block_on_interruptible<T>(
    work: impl std::future::Future<Output = Result<T, Failure>>,
) -> Result<T, Failure> {
    runtime::runtime(None)?.block_on(async {
        let stop = runtime::stop_signal()?;
        tokio::select! {
            result = work => result,
            stopped = stop => Err(match stopped {
                runtime::Stop::Interrupt => Failure::new(Exit::Interrupted, "interrupted; stopped cleanly"),
                runtime::Stop::Terminate => Failure::new(Exit::Terminated, "terminated; stopped cleanly"),
            }),
        }
    })
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
