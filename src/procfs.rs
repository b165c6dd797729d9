//! The few facts about other processes the runner reads from `/proc`: which exist, their
//! parents, and their environment; and the one way the runner stops a set of them. Finding
//! a job's leftovers (by the markers in their environment), an agent's orphans (by
//! parentage) and a killed nix's builders all read the same files the same way, and stopping
//! an agent's orphans and a dead runner's leftovers is the same loop ([`stop`]).

use std::time::{Duration, Instant};

use rustix::process::{kill_process, waitpid, Pid, Signal, WaitOptions};

/// Every process's pid, as `/proc` lists it now (empty if it cannot be read).
pub fn pids() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// The parent of `pid`, from `/proc/<pid>/stat`: "pid (comm) state ppid ...", where comm may
/// hold spaces and parentheses, so the fields are counted after the last ')'.
pub fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Whether an entry (`NAME=value`) of `pid`'s environment satisfies `test`; false when it
/// cannot be read (gone, or not ours to read).
pub fn environ_any(pid: u32, test: impl Fn(&[u8]) -> bool) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|environ| environ.split(|b| *b == 0).any(test))
}

/// Whether process `pid`'s environment has a value starting with one of `markers`.
pub fn environ_mentions(pid: u32, markers: &[String]) -> bool {
    environ_any(pid, |entry| {
        let value = match entry.iter().position(|b| *b == b'=') {
            Some(i) => &entry[i + 1..],
            None => return false,
        };
        markers.iter().any(|m| value.starts_with(m.as_bytes()))
    })
}

/// Whether `pid` is a process that has not exited (a zombie has: it holds no file or lock).
pub fn alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // `pid (comm) state ...`: the name may hold spaces and parentheses; the state follows
    // the last `)`.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    !matches!(state, Some("Z") | Some("X") | None)
}

/// The processes whose parent chain leads to `root` (not `root` itself), from `/proc` as it is
/// now: a process that starts meanwhile may be missed, so callers that stop a tree look again.
pub fn descendants(root: u32) -> Vec<u32> {
    let parent_of: Vec<(u32, u32)> = pids()
        .into_iter()
        .filter_map(|pid| Some((pid, parent(pid)?)))
        .collect();
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        for (pid, ppid) in &parent_of {
            if *ppid == p && !found.contains(pid) {
                found.push(*pid);
            }
        }
        i += 1;
    }
    found.remove(0);
    found
}

/// The pids of `pids` whose environment has a value starting with one of `markers`; all of
/// them when there is no marker.
pub fn marked(pids: Vec<u32>, markers: &[String]) -> Vec<u32> {
    if markers.is_empty() {
        return pids;
    }
    pids.into_iter()
        .filter(|p| environ_mentions(*p, markers))
        .collect()
}

/// How [`stop`] goes about it.
#[derive(Debug, Clone, Copy)]
pub struct Stopping {
    /// SIGTERM first and this long for the processes to go, before any SIGKILL: srt removes
    /// the mount points it made in a checkout on SIGTERM. `None`: SIGKILL at once.
    pub term_grace: Option<Duration>,
    /// SIGKILL rounds at most, each to what is found then (a process may fork meanwhile) ...
    pub kill_rounds: usize,
    /// ... and no new round after this long (`None`: the rounds alone bound it).
    pub kill_for: Option<Duration>,
    /// The pause between rounds, for the signalled to die.
    pub pause: Duration,
}

/// Stops the processes `find` lists, finding them again after every round until it lists
/// none (or `how` gives up). Each found process is reaped when it is the caller's child (the
/// runner is the subreaper of its agents' orphans), so a zombie is not found again; for any
/// other the wait fails harmlessly. Returns how many signals were delivered.
pub fn stop(find: impl Fn() -> Vec<u32>, how: &Stopping) -> usize {
    let mut sent = 0;
    if let Some(grace) = how.term_grace {
        let mut pids = find();
        sent += signal_each(&pids, Signal::TERM);
        let deadline = Instant::now() + grace;
        while !pids.is_empty() && Instant::now() < deadline {
            std::thread::sleep(how.pause);
            reap(&pids);
            pids = find();
        }
    }
    let deadline = how.kill_for.and_then(|d| Instant::now().checked_add(d));
    for _ in 0..how.kill_rounds {
        let pids = find();
        if pids.is_empty() || deadline.is_some_and(|d| Instant::now() > d) {
            break;
        }
        sent += signal_each(&pids, Signal::KILL);
        std::thread::sleep(how.pause);
        reap(&pids);
    }
    sent
}

/// Sends `signal` to each of `pids`; returns to how many it was delivered.
fn signal_each(pids: &[u32], signal: Signal) -> usize {
    pids.iter()
        .filter_map(|p| Pid::from_raw(*p as i32))
        .filter(|p| kill_process(*p, signal).is_ok())
        .count()
}

/// Reaps those of `pids` that are the caller's children and have exited, without waiting.
fn reap(pids: &[u32]) {
    for p in pids.iter().filter_map(|p| Pid::from_raw(*p as i32)) {
        let _ = waitpid(Some(p), WaitOptions::NOHANG);
    }
}

#[cfg(test)]
#[path = "procfs_tests.rs"]
mod tests;
