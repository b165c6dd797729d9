//! What a dead runner left running outside any cgroup: the runner side of its jobs' network
//! bridges (`--quest-agent-net outside`, root's under a root runner). A runner now takes
//! them along when it dies (their parent-death signal), but one from before that, or one
//! killed in the instant before its helper set the signal, left them under pid 1 for ever.

use crate::state::StateDir;

/// Ends every bridge of a job under `state` whose runner is gone (its parent is no longer a
/// quest-runner: pid 1, or whoever adopted it); returns how many. A live runner's bridge, a
/// `run`'s or another `serve`'s, is its child and is left alone.
pub(super) fn end_orphan_bridges(state: &StateDir) -> usize {
    let jobs = state.root().join("jobs");
    let orphans: Vec<u32> = crate::procfs::pids()
        .into_iter()
        .filter(|pid| {
            let Some(dir) = crate::agentnet::outside_dir(*pid) else {
                return false;
            };
            let of_a_job = dir
                .strip_prefix(&jobs)
                .ok()
                .and_then(|rest| rest.to_str())
                .and_then(|rest| rest.strip_suffix("/runner/net"))
                .is_some_and(|id| crate::job::check_id(id).is_ok());
            of_a_job && !crate::procfs::parent(*pid).is_some_and(is_runner)
        })
        .collect();
    for pid in &orphans {
        tracing::warn!(pid, "ended a network bridge a dead runner left");
        if let Some(p) = rustix::process::Pid::from_raw(*pid as i32) {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
        }
    }
    orphans.len()
}

/// Whether `pid` runs the runner's binary (any version: its file may have been replaced).
fn is_runner(pid: u32) -> bool {
    std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| {
        exe.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("quest-runner"))
    })
}
