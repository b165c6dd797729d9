//! The secret search: while the job runs, the suite looks for the account's secret in the
//! agent's processes from outside.

use crate::boundary::attempts;
use crate::boundary::fixture::Fixture;
use crate::boundary::report::AttemptReport;
use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

/// Searches the job's agent for each of `secrets` until `stop` (a finding per secret): the environment,
/// arguments and open files of every process of the job (those whose environment names the
/// job's directory or a directory its agent was given), and the directories the agent was
/// given (see [`crate::boundary::secret_search`]).
pub(super) fn watch_agent(
    secrets: &[String],
    job_root: &std::path::Path,
    stop: &std::sync::atomic::AtomicBool,
) -> (Vec<crate::boundary::secret_search::Findings>, usize) {
    use crate::boundary::secret_search::{
        is_agent, own_dirs, search_process, search_tree, Findings,
    };
    let mut findings = vec![Findings::default(); secrets.len()];
    let mut agents = BTreeSet::new();
    let mut markers = vec![job_root.to_string_lossy().into_owned()];
    let mut last_tree = None::<Instant>;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        let pids: Vec<u32> = quest_runner::procfs::pids()
            .into_iter()
            .filter(|p| quest_runner::procfs::environ_mentions(*p, &markers))
            .collect();
        let mut dirs = BTreeSet::new();
        for pid in &pids {
            for (secret, f) in secrets.iter().zip(findings.iter_mut()) {
                search_process(*pid, secret, f);
            }
            if is_agent(*pid) {
                agents.insert(*pid);
                dirs.extend(own_dirs(*pid));
            }
        }
        for dir in &dirs {
            let dir = dir.to_string_lossy().into_owned();
            if !markers.contains(&dir) {
                markers.push(dir);
            }
        }
        let due = match last_tree {
            Some(t) => t.elapsed() > Duration::from_secs(2),
            None => true,
        };
        if !agents.is_empty() && due {
            dirs.insert(job_root.join("runner"));
            for dir in &dirs {
                for (secret, f) in secrets.iter().zip(findings.iter_mut()) {
                    search_tree(dir, secret, f);
                }
            }
            last_tree = Some(Instant::now());
        }
    }
    (findings, agents.len())
}

/// The secret search as an attempt: found anywhere is an escape. Its control runs the same
/// search on what the agents held before the gateway — a process with the key in its
/// environment, and a private config dir with a link to the account's file — and must find it.
pub(super) fn secret_search_report(
    (findings, agents): &(crate::boundary::secret_search::Findings, usize),
    fixture: &Fixture,
    controls: bool,
) -> AttemptReport {
    use crate::boundary::secret_search::{search_process, search_tree, Findings};
    let control_escaped = controls.then(|| {
        let mut f = Findings::default();
        let tree = fixture.path().join("secret-search-control");
        let _ = std::fs::create_dir_all(tree.join("claude"));
        let _ = std::os::unix::fs::symlink(
            &fixture.account_file,
            tree.join("claude/.credentials.json"),
        );
        search_tree(&tree, &fixture.secrets.account, &mut f);
        let in_tree = !f.found.is_empty();
        let _ = std::fs::remove_dir_all(&tree);
        let mut f = Findings::default();
        if let Ok(mut child) = Command::new("sleep")
            .arg("30")
            .env("ANTHROPIC_API_KEY", &fixture.secrets.account)
            .spawn()
        {
            crate::boundary::secret_search::wait_for_exec(child.id());
            search_process(child.id(), &fixture.secrets.account, &mut f);
            let _ = child.kill();
            let _ = child.wait();
        }
        let in_env = !f.found.is_empty();
        if !(in_tree && in_env) {
            tracing::warn!(
                in_tree,
                in_env,
                "the secret search's control missed the secret"
            );
        }
        in_tree && in_env
    });
    AttemptReport {
        id: "agent-holds-secret",
        what: "find the account's secret in the agent's environment (/proc/<agent>/environ), arguments, open files and private dirs, from outside".into(),
        rule: attempts::Rule::Gateway,
        control_escaped,
        ran: *agents > 0,
        escaped: !findings.found.is_empty(),
        refused_by_runner: None,
        evidence: if findings.found.is_empty() {
            format!(
                "not found: {} agent process(es), {} processes and {} files searched",
                agents, findings.processes, findings.files
            )
        } else {
            format!("found in {}", findings.found.join(", "))
        },
        network: None,
    }
}
