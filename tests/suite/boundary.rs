//! The boundary suite for both agents, and its mutation checks. Needs root (network
//! namespaces) and the pinned agents (`scripts/setup`).

use crate::support;
use quest_runner::job::{AgentKind, Trust};
use quest_runner::sandbox::gvisor::Isolation;
use quest_runner_selftest::boundary::{self, Mutation, SuiteConfig, SuiteReport};

fn print(report: &SuiteReport) {
    for line in report.lines() {
        eprintln!("  {line}");
    }
    figure(&report.summary());
}

/// The suite's figures go to the real stderr, past the test harness's capture, so every CI
/// log shows them (the per-attempt lines show only for a failing test).
fn figure(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "boundary: {line}");
}

/// The end of an attempt's evidence, where its own output is (a devShell's noise comes first).
fn tail(s: &str, max: usize) -> &str {
    match s.char_indices().rev().nth(max) {
        Some((i, _)) => &s[i..],
        None => s,
    }
}

/// One run at a time: each checks that it left no temp dir in the shared /tmp, and two
/// agents at once would only slow each other down on two cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn suite(agent: AgentKind, trust: Trust, mutation: Option<Mutation>) -> SuiteReport {
    suite_with(agent, trust, mutation, false, Isolation::Namespace).await
}

async fn suite_with(
    agent: AgentKind,
    trust: Trust,
    mutation: Option<Mutation>,
    agent_rules_off: bool,
    isolation: Isolation,
) -> SuiteReport {
    let _one_at_a_time = SERIAL.lock().await;
    // The suite runs the runner in this process; opencode's commands go through the runner's
    // binary (its shell and executor modes), which this test binary is not.
    support::runner_runs_jobshell();
    let cfg = SuiteConfig {
        agent,
        trust,
        mutation,
        controls: mutation.is_none() && !agent_rules_off,
        agent_rules_off,
        job_timeout: quest_runner_selftest::boundary::JOB_TIMEOUT,
        isolation,
    };
    boundary::run(&cfg).await.expect("the suite runs")
}

async fn holds(agent: AgentKind, trust: Trust) {
    holds_on(agent, trust, Isolation::Namespace).await;
}

async fn holds_on(agent: AgentKind, trust: Trust, isolation: Isolation) {
    let report = suite_with(agent, trust, None, false, isolation).await;
    print(&report);
    // What the sandboxed command saw of the private files before and after the host replaced
    // them, for the log.
    if let Some(a) = report.attempts.iter().find(|a| a.id == "rotate-secrets") {
        figure(&format!(
            "{} ({:?}) rotate-secrets: {}",
            agent.name(),
            trust,
            tail(&a.evidence, 400)
        ));
    }
    let escaped: Vec<_> = report.escaped().iter().map(|a| a.id).collect();
    let failed: Vec<_> = report
        .failed_controls()
        .iter()
        .map(|c| c.name.clone())
        .collect();
    assert!(escaped.is_empty(), "escaped: {escaped:?}");
    assert!(failed.is_empty(), "controls failed: {failed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_boundary_holds() {
    holds(AgentKind::Claude, Trust::Trusted).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_untrusted_holds() {
    holds(AgentKind::Claude, Trust::Untrusted).await;
}

async fn mutations_are_caught(agent: AgentKind) {
    let mut missed = Vec::new();
    // QUEST_RUNNER_TEST_MUTATIONS=name,name runs only those (a developer's loop; CI runs all).
    let only = std::env::var("QUEST_RUNNER_TEST_MUTATIONS").unwrap_or_default();
    let only: Vec<&str> = only.split(',').filter(|n| !n.is_empty()).collect();
    let chosen: Vec<Mutation> = Mutation::here()
        .into_iter()
        .filter(|m| only.is_empty() || only.contains(&m.name()))
        .collect();
    for m in chosen.iter().copied() {
        let mut report = suite(agent, Trust::Trusted, Some(m)).await;
        if !report.caught(m) && !report.attempts_ran() {
            // No verdict: the agent ended before its attempt ran (CI once saw opencode exit 1
            // at start). One more run; a second such run is MISSED like any other.
            figure(&format!(
                "{} mutation {:<22} no verdict (the attempt never ran: {}); once more",
                agent.name(),
                m.name(),
                report
                    .job
                    .as_ref()
                    .and_then(|j| j.message.clone())
                    .unwrap_or_default(),
            ));
            report = suite(agent, Trust::Trusted, Some(m)).await;
        }
        let caught = report.caught(m);
        for id in m.caught_by() {
            let catching = report.attempts.iter().find(|a| a.id == *id);
            let escaped = catching.is_some_and(|a| a.escaped);
            figure(&format!(
                "{} mutation {:<22} -> {:<18} {} ({})",
                agent.name(),
                m.name(),
                id,
                if escaped { "ESCAPED" } else { "refused" },
                catching.map_or("", |a| tail(&a.evidence, 400)),
            ));
        }
        figure(&format!(
            "{} mutation {:<22} {}",
            agent.name(),
            m.name(),
            if caught { "caught" } else { "MISSED" }
        ));
        if !caught {
            print(&report);
            missed.push(m.name());
        }
    }
    figure(&format!(
        "{}: {}/{} mutations caught",
        agent.name(),
        chosen.len() - missed.len(),
        chosen.len()
    ));
    assert!(missed.is_empty(), "mutations not caught: {missed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_mutations_are_caught() {
    mutations_are_caught(AgentKind::Claude).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_boundary_holds() {
    holds(AgentKind::Opencode, Trust::Trusted).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_untrusted_holds() {
    holds(AgentKind::Opencode, Trust::Untrusted).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_mutations_are_caught() {
    mutations_are_caught(AgentKind::Opencode).await;
}

/// The agents' own rules off (Claude Code allowing every file tool everywhere, opencode
/// without the runner's plugin): the namespace alone must refuse every file-tool attempt, and
/// the permitted steps still pass. `unconfined-agent` (a mutation above) shows each of these
/// attempts escaping once the namespace goes too.
async fn file_tools_held_by_the_namespace_alone(agent: AgentKind, trust: Trust) {
    let report = suite_with(agent, trust, None, true, Isolation::Namespace).await;
    print(&report);
    let tools: Vec<_> = report
        .attempts
        .iter()
        .filter(|a| boundary::FILE_TOOL_ATTEMPTS.contains(&a.id))
        .collect();
    figure(&format!(
        "{} ({trust:?}) agent rules off: {}/{} file-tool attempts refused by the namespace alone",
        agent.name(),
        tools.iter().filter(|a| !a.escaped).count(),
        tools.len()
    ));
    assert!(tools.len() >= 3, "the file-tool attempts ran");
    let escaped: Vec<_> = report.escaped().iter().map(|a| a.id).collect();
    let failed: Vec<_> = report
        .failed_controls()
        .iter()
        .map(|c| c.name.clone())
        .collect();
    assert!(escaped.is_empty(), "escaped: {escaped:?}");
    assert!(failed.is_empty(), "controls failed: {failed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_file_tools_held_by_the_namespace_alone() {
    file_tools_held_by_the_namespace_alone(AgentKind::Claude, Trust::Trusted).await;
    file_tools_held_by_the_namespace_alone(AgentKind::Claude, Trust::Untrusted).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_file_tools_held_by_the_namespace_alone() {
    file_tools_held_by_the_namespace_alone(AgentKind::Opencode, Trust::Trusted).await;
    file_tools_held_by_the_namespace_alone(AgentKind::Opencode, Trust::Untrusted).await;
}

/// The suite with the commands on gVisor's kernel (`isolation: gvisor`), on the untrusted
/// revisions it is for: every attempt, the kernel's among them, and every control. Skipped,
/// saying so, where runsc cannot run.
async fn holds_on_gvisor(agent: AgentKind) {
    let probe = quest_runner::sandbox::gvisor::probe().await;
    if let Some(why) = &probe.fails {
        figure(&format!("{} on gvisor: skipped: {why}", agent.name()));
        return;
    }
    holds_on(agent, Trust::Untrusted, Isolation::Gvisor).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_untrusted_holds_on_gvisor() {
    holds_on_gvisor(AgentKind::Claude).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_untrusted_holds_on_gvisor() {
    holds_on_gvisor(AgentKind::Opencode).await;
}

/// The commands run in the namespace while the config says gvisor: the kernel's attempts
/// escape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_on_the_hosts_kernel_under_a_gvisor_config_are_caught() {
    if !quest_runner::sandbox::gvisor::probe().await.works() {
        figure("host-kernel mutation: skipped: runsc does not run here");
        return;
    }
    let m = Mutation::HostKernel;
    let report = suite_with(
        AgentKind::Opencode,
        Trust::Trusted,
        Some(m),
        false,
        Isolation::Gvisor,
    )
    .await;
    if !report.caught(m) {
        print(&report);
    }
    assert!(report.caught(m), "the host-kernel mutation was not caught");
}
