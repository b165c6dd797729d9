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
