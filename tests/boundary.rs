//! The boundary suite for both agents, and its mutation checks. Needs root (network
//! namespaces) and the pinned agents (`scripts/setup`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use quest_runner::job::{AgentKind, Trust};
use quest_runner::selftest::boundary::{self, Mutation, SuiteConfig, SuiteReport};

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
    let _one_at_a_time = SERIAL.lock().await;
    // The suite runs the runner in this process; opencode's commands go through the runner's
    // binary (its shell and executor modes), which this test binary is not.
    std::env::set_var(
        quest_runner::jobshell::SELF_VAR,
        env!("CARGO_BIN_EXE_quest-runner"),
    );
    let cfg = SuiteConfig {
        agent,
        trust,
        mutation,
        controls: mutation.is_none(),
    };
    boundary::run(&cfg).await.expect("the suite runs")
}

async fn holds(agent: AgentKind, trust: Trust) {
    let report = suite(agent, trust, None).await;
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
    for m in Mutation::here() {
        let report = suite(agent, Trust::Trusted, Some(m)).await;
        let catching = report.attempts.iter().find(|a| a.id == m.caught_by());
        let caught = catching.is_some_and(|a| a.escaped);
        figure(&format!(
            "{} mutation {:<22} -> {:<18} {} ({})",
            agent.name(),
            m.name(),
            m.caught_by(),
            if caught { "caught" } else { "MISSED" },
            catching.map_or("", |a| tail(&a.evidence, 400)),
        ));
        if !caught {
            print(&report);
            missed.push(m.name());
        }
    }
    figure(&format!(
        "{}: {}/{} mutations caught",
        agent.name(),
        Mutation::here().len() - missed.len(),
        Mutation::here().len()
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
