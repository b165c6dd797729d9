//! Looking for the account's secret where the agent process holds things, from outside it:
//! its environment and arguments (`/proc/<pid>/environ`, `cmdline`), the files it has open
//! (`/proc/<pid>/fd`), and the directories the runner gives it (its private config and data
//! dirs, HOME, TMPDIR, the XDG dirs its environment names), links followed. With the model
//! gateway none of them may hold it: the agent gets a job token instead.
//!
//! Not searched: the rest of the host's files, which the agent process — outside the sandbox,
//! with the runner's uid — can open like the runner can (docs/security.md says
//! so), and the checkout, whose content and links are the attacker's (the sandbox attempts
//! cover reading through them).

use std::path::{Path, PathBuf};

/// Files larger than this are not read (the agent's own binary, caches).
const MAX_FILE: u64 = 16 * 1024 * 1024;
/// At most this many files per search, so a huge HOME cannot stall the suite.
const MAX_FILES: usize = 20_000;

#[derive(Debug, Default, Clone)]
pub struct Findings {
    /// Where the secret was found.
    pub found: Vec<String>,
    /// Processes and files looked at.
    pub processes: usize,
    pub files: usize,
}

impl Findings {
    fn hit(&mut self, what: String) {
        if !self.found.contains(&what) {
            self.found.push(what);
        }
    }
}

fn holds(data: &[u8], secret: &[u8]) -> bool {
    !secret.is_empty() && data.windows(secret.len()).any(|w| w == secret)
}

/// Waits (at most two seconds) until a process just spawned has its own environment: until
/// its exec is done, `/proc/<pid>/environ` is empty.
pub fn wait_for_exec(pid: u32) {
    let environ = format!("/proc/{pid}/environ");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while std::fs::read(&environ).is_ok_and(|e| e.is_empty())
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The process's environment, arguments and open regular files.
pub fn search_process(pid: u32, secret: &str, f: &mut Findings) {
    f.processes += 1;
    for what in ["environ", "cmdline"] {
        if let Ok(data) = std::fs::read(format!("/proc/{pid}/{what}")) {
            if holds(&data, secret.as_bytes()) {
                f.hit(format!("/proc/{pid}/{what}"));
            }
        }
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return;
    };
    for fd in fds.flatten() {
        let path = fd.path();
        if std::fs::metadata(&path).is_ok_and(|m| m.is_file() && m.len() <= MAX_FILE) {
            search_file(&path, secret, f, &format!("{} (open)", path.display()));
        }
    }
}

fn search_file(path: &Path, secret: &str, f: &mut Findings, name: &str) {
    if let Ok(data) = std::fs::read(path) {
        search_data(&data, secret, f, name);
    } else {
        f.files += 1;
    }
}

/// `data`, read from `name`, counted as one file.
pub fn search_data(data: &[u8], secret: &str, f: &mut Findings, name: &str) {
    f.files += 1;
    if holds(data, secret.as_bytes()) {
        f.hit(name.to_string());
    }
}

/// Every file under `root`, links to files followed (a link to the account's file is the
/// agent holding it); linked directories are not entered.
pub fn search_tree(root: &Path, secret: &str, f: &mut Findings) {
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            if f.files >= MAX_FILES {
                return;
            }
            let path = e.path();
            let Ok(kind) = e.file_type() else { continue };
            if kind.is_dir() {
                stack.push(path);
            } else if std::fs::metadata(&path).is_ok_and(|m| m.is_file() && m.len() <= MAX_FILE) {
                search_file(&path, secret, f, &path.display().to_string());
            }
        }
    }
}

/// The directories the process's environment names as its own: HOME, TMPDIR, the XDG dirs,
/// Claude Code's config dir.
pub fn own_dirs(pid: u32) -> Vec<PathBuf> {
    let Ok(data) = std::fs::read(format!("/proc/{pid}/environ")) else {
        return Vec::new();
    };
    let wanted = [
        "HOME",
        "TMPDIR",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "XDG_STATE_HOME",
        "XDG_CACHE_HOME",
        "CLAUDE_CONFIG_DIR",
        "CLAUDE_CODE_TMPDIR",
    ];
    data.split(|b| *b == 0)
        .filter_map(|entry| {
            let text = std::str::from_utf8(entry).ok()?;
            let (k, v) = text.split_once('=')?;
            (wanted.contains(&k) && v.starts_with('/') && v.len() > 1).then(|| PathBuf::from(v))
        })
        .collect()
}

/// Whether `pid` is an agent (Claude Code or opencode), by its executable's name.
pub fn is_agent(pid: u32) -> bool {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
    let name = exe
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // The npm packages install `claude.exe` and `opencode.exe`; others run them under Node.
    name.starts_with("claude")
        || name.starts_with("opencode")
        || (name == "node" || name == "bun") && cmdline_names(pid)
}

fn cmdline_names(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
        let c = String::from_utf8_lossy(&c);
        c.contains("claude") || c.contains("opencode")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_secret_through_links_in_environments_and_open_files() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("key");
        std::fs::write(&key, "xx SECRET-123 yy").unwrap();
        let tree = dir.path().join("tree");
        std::fs::create_dir_all(tree.join("claude")).unwrap();
        std::os::unix::fs::symlink(&key, tree.join("claude/.credentials.json")).unwrap();
        let mut f = Findings::default();
        search_tree(&tree, "SECRET-123", &mut f);
        assert_eq!(f.found.len(), 1, "{f:?}");
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env("ANTHROPIC_API_KEY", "SECRET-123")
            .spawn()
            .unwrap();
        wait_for_exec(child.id());
        let mut f = Findings::default();
        search_process(child.id(), "SECRET-123", &mut f);
        let _ = child.kill();
        let _ = child.wait();
        assert!(f.found.iter().any(|w| w.ends_with("/environ")), "{f:?}");
        let mut f = Findings::default();
        search_tree(&tree, "NOT-THERE", &mut f);
        assert!(f.found.is_empty() && f.files == 1);
    }
}
