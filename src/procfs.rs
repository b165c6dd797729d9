//! The few facts about other processes the runner reads from `/proc`: which exist, their
//! parents, and their environment. Finding a job's leftovers (by the markers in their
//! environment), an agent's orphans (by parentage) and a killed nix's builders all read the
//! same files the same way.

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
