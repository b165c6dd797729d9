//! What a running job uses now — memory, CPU time, disk, model tokens — read from the host,
//! so that `show` and `jobs`, processes other than the `serve` that runs the job, can say it:
//! - its processes are found by their environment, as a dead runner's leftovers are
//!   ([`super::procs`]), and their memory (resident, summed: pages they share count once per
//!   process) and CPU time (theirs and their waited-for children's) read from `/proc`;
//! - its disk use is the disk watchdog's walk of its trees ([`crate::disk::usage`]);
//! - its tokens are the sum of its `model.log`, which the gateway writes per answer.
//!
//! A process the caller may not inspect (another user's, without root) is not counted.

use std::path::Path;

use serde::Serialize;

use crate::state::StateDir;

/// One sample of a running job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Live {
    pub processes: usize,
    pub memory_bytes: u64,
    pub cpu_ms: u64,
    pub disk_bytes: u64,
    pub disk_files: u64,
    pub model_requests: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl Live {
    /// One column for `jobs`: memory, CPU time, disk, tokens in/out.
    pub fn brief(&self) -> String {
        format!(
            "mem {} cpu {:.1}s disk {} tok {}/{}",
            crate::disk::human(self.memory_bytes),
            self.cpu_ms as f64 / 1000.0,
            crate::disk::human(self.disk_bytes),
            self.input_tokens,
            self.output_tokens
        )
    }
}

/// Samples job `id` of `state` now.
pub fn sample(state: &StateDir, id: &str) -> Live {
    let root = crate::workspace::job_root(state, id);
    let mut live = processes(state, id);
    let record = crate::workspace::WorkspaceRecord::read(&root)
        .ok()
        .flatten();
    let temp = record.map(|r| r.temp_dir);
    let trees: Vec<&Path> = std::iter::once(root.as_path())
        .chain(temp.as_deref())
        .collect();
    let mut seen = crate::disk::usage::Seen::with_roots(trees.iter().copied());
    for tree in &trees {
        let usage = crate::disk::usage::measure(tree, &mut seen);
        live.disk_bytes += usage.bytes;
        live.disk_files += usage.entries;
    }
    let log = std::fs::read_to_string(root.join("model.log")).unwrap_or_default();
    add_model_log(&mut live, &log);
    live
}

/// The processes of job `id` now, their memory and CPU time: [`sample`] without the walk of
/// the job's trees or its model log (what the metrics read at each scrape).
pub fn processes(state: &StateDir, id: &str) -> Live {
    let markers = super::procs::markers(state, id);
    let pids = super::procs::matching(&markers, std::process::id());
    let mut live = Live {
        processes: pids.len(),
        ..Live::default()
    };
    let ticks = rustix::param::clock_ticks_per_second().max(1);
    for pid in pids {
        live.memory_bytes += resident_bytes(pid).unwrap_or(0);
        live.cpu_ms += cpu_ticks(pid).unwrap_or(0) * 1000 / ticks;
    }
    live
}

/// `VmRSS` of `/proc/<pid>/status`, in bytes.
fn resident_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// `utime + stime + cutime + cstime` of `/proc/<pid>/stat`, in clock ticks. The fields
/// after the command's name, which may hold spaces and parentheses: split after its last `)`.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    cpu_ticks_of(&stat)
}

fn cpu_ticks_of(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3 of the whole line, utime 14 … cstime 17.
    let field = |n: usize| fields.get(n - 3)?.parse::<i64>().ok();
    let sum = field(14)? + field(15)? + field(16)? + field(17)?;
    u64::try_from(sum).ok()
}

/// Adds each answered request of a `model.log` (`… in=N out=N …`).
fn add_model_log(live: &mut Live, log: &str) {
    for line in log.lines() {
        let figure = |name: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(name))
                .and_then(|v| v.parse::<u64>().ok())
        };
        if let (Some(input), Some(output)) = (figure("in="), figure("out=")) {
            live.model_requests += 1;
            live.input_tokens += input;
            live.output_tokens += output;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_is_read_past_a_name_with_spaces_and_parentheses() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 2 1 20 0 1 0 5 0 0";
        assert_eq!(cpu_ticks_of(stat), Some(13));
    }

    #[test]
    fn tokens_are_summed_from_the_model_log() {
        let mut live = Live::default();
        let log = "t POST /v1/messages 200 model=m in=10 out=5 cache_read=0 cache_write=0 ms=1\n\
                   t GET /v1/models 200\n\
                   t POST /v1/messages 200 model=m in=3 out=2 cache_read=1 cache_write=0 ms=1\n";
        add_model_log(&mut live, log);
        assert_eq!(
            (live.model_requests, live.input_tokens, live.output_tokens),
            (2, 13, 7)
        );
    }

    #[test]
    fn this_process_is_sampled() {
        assert!(resident_bytes(std::process::id()).unwrap() > 0);
        assert!(cpu_ticks(std::process::id()).is_some());
    }
}
