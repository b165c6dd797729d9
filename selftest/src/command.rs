//! `quest-runner selftest`: runs this crate's proofs on this host and reports them —
//! the devShell cache on the bundled sample, the boundary suite per agent (and its mutation
//! checks), or the real-registry reads.

use std::path::Path;
use std::sync::Arc;

use crate::boundary;
use crate::{fixture_git, registries, static_bash};
use quest_runner::cli::extension::{
    block_on_interruptible, out, print_shell, runtime, shell_json, Context, Failure, Format,
    SelftestOptions,
};
use quest_runner::devshell::{self, DevShells};
use quest_runner::exit::Exit;
use quest_runner::job::{AgentKind, Trust};

const SAMPLE_FLAKE: &str = include_str!("sample-flake.nix");

/// Runs `selftest` as its options say (the handler the binary gives the CLI).
pub fn run(ctx: &Context, opts: &SelftestOptions) -> Result<(), Failure> {
    let runtime = runtime(Some(2))?;
    if opts.registries {
        return registries_check(&runtime, &opts.agents);
    }
    preflight(opts)?;
    devshell_check(ctx)?;
    let mut failures = Vec::new();
    for agent in &opts.agents {
        failures.extend(boundary_check(&runtime, *agent, opts)?);
        if opts.mutations {
            failures.extend(mutation_checks(&runtime, *agent, opts)?);
        }
    }
    if failures.is_empty() {
        out("\nselftest: the boundary holds")?;
        Ok(())
    } else {
        Err(Failure::new(
            Exit::Failed,
            format!(
                "the boundary is not proven on this host: {}",
                failures.join(", ")
            ),
        ))
    }
}

/// The boundary suite for `agent` on a trusted revision (and an untrusted one), printed line
/// by line; what did not hold.
fn boundary_check(
    runtime: &tokio::runtime::Runtime,
    agent: AgentKind,
    opts: &SelftestOptions,
) -> Result<Vec<String>, Failure> {
    let job_timeout = opts.job_timeout;
    let mut trusts = vec![Trust::Trusted];
    if opts.untrusted {
        trusts.push(Trust::Untrusted);
    }
    let mut failures = Vec::new();
    for trust in trusts {
        out(format_args!(
            "\n== boundary suite: {} ({trust:?}, {})",
            agent.name(),
            opts.isolation.name()
        ))?;
        let cfg = boundary::SuiteConfig {
            agent,
            trust,
            mutation: None,
            controls: true,
            agent_rules_off: false,
            job_timeout,
            isolation: opts.isolation,
        };
        let report = runtime.block_on(boundary::run(&cfg)).map_err(|e| {
            Failure::new(
                Exit::Failed,
                format!("the boundary suite could not run: {e}"),
            )
        })?;
        for line in report.lines() {
            out(&line)?;
        }
        out(report.summary())?;
        if !report.holds() {
            failures.push(format!("{} ({trust:?})", agent.name()));
        }
    }
    Ok(failures)
}

/// The mutation checks for `agent`: each weakens one rule, and the attempt it must free has
/// to escape; the mutations that were missed.
fn mutation_checks(
    runtime: &tokio::runtime::Runtime,
    agent: AgentKind,
    opts: &SelftestOptions,
) -> Result<Vec<String>, Failure> {
    out(format_args!("\n== mutation checks: {}", agent.name()))?;
    let mut failures = Vec::new();
    let mut caught = 0;
    let mutations = boundary::Mutation::here_for(opts.isolation);
    for m in mutations.iter().copied() {
        let cfg = boundary::SuiteConfig {
            agent,
            trust: Trust::Trusted,
            mutation: Some(m),
            controls: false,
            agent_rules_off: false,
            job_timeout: opts.job_timeout,
            isolation: opts.isolation,
        };
        let report = runtime.block_on(boundary::run(&cfg)).map_err(|e| {
            Failure::new(Exit::Failed, format!("a mutation check could not run: {e}"))
        })?;
        let hit = report.caught(m);
        caught += usize::from(hit);
        out(format_args!(
            "{:<8} {:<22} must free {}",
            if hit { "caught" } else { "MISSED" },
            m.name(),
            m.caught_by().join(", ")
        ))?;
        if !hit {
            failures.push(format!("{} mutation {}", agent.name(), m.name()));
        }
    }
    out(format_args!(
        "{}: {caught}/{} mutations caught",
        agent.name(),
        mutations.len()
    ))?;
    Ok(failures)
}

/// `--registries`: the real-registry reads for each agent, or one line saying why not here.
fn registries_check(
    runtime: &tokio::runtime::Runtime,
    agents: &[quest_runner::job::AgentKind],
) -> Result<(), Failure> {
    let env: Vec<(String, String)> = std::env::vars().collect();
    let reachable = match registries::no_route(&env) {
        Ok(r) => r,
        Err(reason) => {
            println!("selftest --registries: skipped: {reason}");
            return Ok(());
        }
    };
    let mut failed = Vec::new();
    for agent in agents {
        println!(
            "\n== real registries through the decider: {} (trusted job)",
            agent.name()
        );
        let report = runtime
            .block_on(registries::run(*agent, &reachable))
            .map_err(|e| {
                Failure::new(
                    Exit::Failed,
                    format!("the registries check could not run: {e}"),
                )
            })?;
        for line in &report.lines {
            println!("{line}");
        }
        println!("network log ({} lines):", report.network_log.len());
        for line in &report.network_log {
            println!("  {line}");
        }
        for p in &report.problems {
            println!("PROBLEM {p}");
        }
        let net = report
            .job
            .network
            .as_ref()
            .map(|n| format!("{} allowed, {} refused", n.allowed, n.refused))
            .unwrap_or_else(|| "no network summary".into());
        println!(
            "{}: {} ({net}; {:.1}s)",
            agent.name(),
            if report.passed() { "passed" } else { "FAILED" },
            report.seconds
        );
        if !report.passed() {
            failed.push(agent.name());
        }
    }
    if failed.is_empty() {
        println!("\nselftest --registries: every read went through the decider");
        Ok(())
    } else {
        Err(Failure::new(
            Exit::Failed,
            format!("the registries check failed for {}", failed.join(", ")),
        ))
    }
}

/// Refuses to start, with `doctor`'s message for the first thing to fix, when the host cannot
/// build the sample's devShell (the Nix setup, the static bash) or run an agent's job: a
/// failure half-way would say less.
fn preflight(opts: &SelftestOptions) -> Result<(), Failure> {
    let mut checks = quest_runner::nix_setup::checks(&quest_runner::nix_setup::Facts::gather());
    checks.push(quest_runner::nix_setup::bash_static_check());
    for agent in &opts.agents {
        checks.extend(quest_runner::preflight::checks_for(*agent, true));
    }
    match quest_runner::preflight::refusal(&checks) {
        Some(why) => Err(Failure::new(
            Exit::HostNotReady,
            format!("this host cannot run the selftest: {why}"),
        )),
        None => Ok(()),
    }
}

/// The devShell cache on the bundled sample: built (or found), then served from the cache.
fn devshell_check(ctx: &Context) -> Result<(), Failure> {
    let work = tempfile::Builder::new()
        .prefix("quest-selftest-")
        .tempdir()
        .map_err(|e| {
            Failure::new(
                Exit::HostNotReady,
                format!("creating a temporary directory: {e}"),
            )
        })?;
    let system = devshell::nix_version::current_system();
    let bash_dir = ctx.state.ensure_dir(Path::new("selftest"))?.join("bash");
    let bash = static_bash::BuilderInput::install(&bash_dir)
        .map_err(|e| Failure::new(Exit::HostNotReady, e))?;
    let flake = SAMPLE_FLAKE.replace("@SYSTEM@", &system);
    let bare = make_sample_repo(work.path(), &flake, &bash)?;
    let rev = git_stdout(&bare, &["rev-parse", "HEAD"])?;
    out(format_args!(
        "sample repository: {} at {rev}",
        bare.display()
    ))?;

    let shells = Arc::new(DevShells::new(&ctx.state, &ctx.config));
    let req = devshell::Request {
        repo: bare,
        rev,
        git_ref: None,
        attr: None,
    };
    for attempt in ["first", "second"] {
        let started = std::time::Instant::now();
        let shell =
            block_on_interruptible(async { shells.get(&req).await.map_err(Failure::from) })?;
        let cache = match shell.cache {
            devshell::CacheStatus::Hit => "hit",
            devshell::CacheStatus::Miss => "miss",
        };
        out(format_args!(
            "{attempt} request: cache {cache} in {:.1?}",
            started.elapsed()
        ))?;
        if attempt == "second" {
            out(shell_json(&shell))?;
            out("--- cached env script ---")?;
            print_shell(&shell, Format::Script)?;
        }
    }
    Ok(())
}

fn make_sample_repo(
    dir: &Path,
    flake: &str,
    bash: &static_bash::BuilderInput,
) -> Result<std::path::PathBuf, Failure> {
    let src = dir.join("sample");
    std::fs::create_dir_all(&src).map_err(|e| Failure::new(Exit::Failed, e))?;
    bash.copy_into(&src)
        .map_err(|e| Failure::new(Exit::HostNotReady, e))?;
    let lock = bash.lock_file();
    std::fs::write(src.join("flake.nix"), flake).map_err(|e| Failure::new(Exit::Failed, e))?;
    std::fs::write(src.join("flake.lock"), lock).map_err(|e| Failure::new(Exit::Failed, e))?;
    std::fs::write(
        src.join("AGENTS.md"),
        "# Sample\nA repository for quest-runner selftest.\n",
    )
    .map_err(|e| Failure::new(Exit::Failed, e))?;
    git_stdout(&src, &["init", "-q", "-b", "main"])?;
    git_stdout(
        &src,
        &[
            "add",
            "flake.nix",
            "flake.lock",
            "AGENTS.md",
            static_bash::DIR,
        ],
    )?;
    git_stdout(
        &src,
        &["commit", "-q", "-m", "quest-runner selftest sample"],
    )?;
    let bare = dir.join("sample.git");
    git_stdout(dir, &["clone", "-q", "--bare", "sample", "sample.git"])?;
    Ok(bare)
}

fn git_stdout(dir: &Path, args: &[&str]) -> Result<String, Failure> {
    fixture_git(dir, args).map_err(|e| Failure::new(Exit::Failed, e))
}
