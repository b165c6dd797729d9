//! Reading the repository's instruction files (`AGENTS.md`, `CLAUDE.md`) on the host.
//!
//! The agents no longer load project files themselves (that would load project hooks too),
//! so the runner reads them and puts them into the prompt. It runs outside the sandbox, so it
//! reads only regular files: a committed `AGENTS.md -> ~/.ssh/id_ed25519` would otherwise put
//! the operator's key into the prompt. Files are opened with `O_NOFOLLOW` and checked on the
//! open descriptor, so a file swapped for a link between check and read is refused too.

use std::io::Read;
use std::path::{Path, PathBuf};

pub const NAMES: &[&str] = &["AGENTS.md", "CLAUDE.md"];
/// The root files together are cut here: a prompt is not the place for a book.
pub const MAX_BYTES: u64 = 64 * 1024;
/// How deep and how many nested files are listed.
const MAX_DEPTH: usize = 8;
const MAX_NESTED: usize = 100;

#[derive(Debug, Clone, PartialEq)]
pub struct Instructions {
    /// (name, content) of the root files that are regular files.
    pub root: Vec<(String, String)>,
    /// Root files with the same text as one in `root` (a copy or a hard link of it, as
    /// repositories keep `CLAUDE.md` beside `AGENTS.md`), and which: sent once.
    pub same_as: Vec<(String, String)>,
    /// Root files that were refused, with the reason.
    pub refused: Vec<(String, String)>,
    /// Nested instruction files (relative paths), regular files only.
    pub nested: Vec<PathBuf>,
}

pub fn read(checkout: &Path) -> Instructions {
    let mut out = Instructions {
        root: Vec::new(),
        same_as: Vec::new(),
        refused: Vec::new(),
        nested: Vec::new(),
    };
    let mut budget = MAX_BYTES;
    for name in NAMES {
        if budget == 0 {
            let why = format!("the instruction files' limit of {MAX_BYTES} bytes is used up");
            out.refused.push((name.to_string(), why));
            continue;
        }
        match read_regular(&checkout.join(name), budget) {
            Ok(Some(read)) => match out.root.iter().find(|(_, t)| read.whole && *t == read.text) {
                Some((first, _)) => out.same_as.push((name.to_string(), first.clone())),
                None => {
                    budget = budget.saturating_sub(read.text.len() as u64);
                    out.root.push((name.to_string(), read.text));
                }
            },
            Ok(None) => {}
            Err(why) => {
                tracing::warn!(file = name, "instruction file refused: {why}");
                out.refused.push((name.to_string(), why));
            }
        }
    }
    collect_nested(checkout, checkout, 0, &mut out.nested);
    out.nested.sort();
    out
}

/// What [`read_regular`] read.
#[derive(Debug)]
pub struct FileText {
    pub text: String,
    /// The text is the whole file (not cut at the limit).
    pub whole: bool,
}

/// The file's text, at most `limit` bytes of it, if it is a regular file; `Ok(None)` if it
/// does not exist.
pub fn read_regular(path: &Path, limit: u64) -> Result<Option<FileText>, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(
            rustix::fs::OFlags::NOFOLLOW.bits() as i32 | rustix::fs::OFlags::NONBLOCK.bits() as i32,
        )
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
            return Err("it is a symbolic link".to_string())
        }
        Err(e) => return Err(e.to_string()),
    };
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("it is not a regular file".to_string());
    }
    let mut bytes = Vec::new();
    file.take(limit)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    let whole = meta.len() <= limit;
    if !whole {
        text.push_str(&format!(
            "\n[... cut at {limit} bytes: the instruction files together are limited to {MAX_BYTES} ...]\n"
        ));
    }
    Ok(Some(FileText { text, whole }))
}

fn collect_nested(root: &Path, dir: &Path, depth: usize, found: &mut Vec<PathBuf>) {
    if depth >= MAX_DEPTH || found.len() >= MAX_NESTED {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let name = entry.file_name();
        if kind.is_dir() && name != ".git" && name != "node_modules" {
            collect_nested(root, &entry.path(), depth + 1, found);
        } else if kind.is_file()
            && depth > 0
            && NAMES.iter().any(|n| name == *n)
            && found.len() < MAX_NESTED
        {
            if let Ok(rel) = entry.path().strip_prefix(root) {
                found.push(rel.to_path_buf());
            }
        }
    }
}

impl Instructions {
    /// The section of the prompt that carries them.
    pub fn prompt_section(&self) -> String {
        let mut s = String::new();
        for (name, text) in &self.root {
            s.push_str(&format!(
                "\n## Repository instructions: {name}\n\n{}\n",
                text.trim_end()
            ));
        }
        for (name, first) in &self.same_as {
            s.push_str(&format!("\n({name} is the same as {first}.)\n"));
        }
        for (name, why) in &self.refused {
            s.push_str(&format!("\n({name} was not read: {why}.)\n"));
        }
        if !self.nested.is_empty() {
            s.push_str("\n## Nested instruction files\n\nRead these before working in their directories:\n");
            for p in &self.nested {
                s.push_str(&format!("- {}\n", p.display()));
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_are_read_links_and_fifos_refused() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("id_ed25519");
        std::fs::write(&secret, "PRIVATE KEY").unwrap();
        let checkout = dir.path().join("checkout");
        std::fs::create_dir_all(checkout.join("sub/deeper")).unwrap();
        std::os::unix::fs::symlink(&secret, checkout.join("AGENTS.md")).unwrap();
        std::fs::write(checkout.join("CLAUDE.md"), "be careful").unwrap();
        std::fs::write(checkout.join("sub/AGENTS.md"), "sub rules").unwrap();
        std::os::unix::fs::symlink(&secret, checkout.join("sub/deeper/CLAUDE.md")).unwrap();
        let found = read(&checkout);
        assert_eq!(
            found.root,
            vec![("CLAUDE.md".to_string(), "be careful".to_string())]
        );
        assert_eq!(found.refused.len(), 1);
        assert!(found.refused[0].1.contains("symbolic link"));
        assert_eq!(found.nested, vec![PathBuf::from("sub/AGENTS.md")]);
        let section = found.prompt_section();
        assert!(!section.contains("PRIVATE KEY"));
        assert!(section.contains("be careful") && section.contains("sub/AGENTS.md"));

        let fifo = checkout.join("fifo.md");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(read_regular(&fifo, MAX_BYTES)
            .unwrap_err()
            .contains("not a regular file"));
    }

    #[test]
    fn large_files_are_cut_to_one_budget() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("AGENTS.md"),
            "a".repeat(MAX_BYTES as usize - 1000),
        )
        .unwrap();
        std::fs::write(dir.path().join("CLAUDE.md"), "c".repeat(5000)).unwrap();
        let found = read(dir.path());
        assert_eq!(found.root.len(), 2);
        assert!(found.root[1].1.contains("cut at 1000 bytes"));
        let section = found.prompt_section();
        assert!(
            section.len() < MAX_BYTES as usize + 500,
            "{}",
            section.len()
        );
    }

    /// A `CLAUDE.md` that is a copy or a hard link of `AGENTS.md` (symbolic links are refused
    /// above) is sent once, and so is one that differs only past the cut.
    #[test]
    fn the_same_text_under_both_names_is_sent_once() {
        let dir = tempfile::tempdir().unwrap();
        let agents = dir.path().join("AGENTS.md");
        std::fs::write(&agents, "Use tabs. MARK-1\n").unwrap();
        std::fs::hard_link(&agents, dir.path().join("CLAUDE.md")).unwrap();
        let section = read(dir.path()).prompt_section();
        assert_eq!(section.matches("MARK-1").count(), 1, "{section}");
        assert!(
            section.contains("CLAUDE.md is the same as AGENTS.md"),
            "{section}"
        );

        std::fs::remove_file(dir.path().join("CLAUDE.md")).unwrap();
        let big = "b".repeat(2 * MAX_BYTES as usize);
        std::fs::write(&agents, &big).unwrap();
        std::fs::write(dir.path().join("CLAUDE.md"), &big).unwrap();
        let section = read(dir.path()).prompt_section();
        assert!(
            section.len() < MAX_BYTES as usize + 500,
            "{}",
            section.len()
        );
        assert!(section.contains("(CLAUDE.md was not read: the instruction files' limit"));
    }
}
