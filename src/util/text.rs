//! Text from outside (a program's output, a file a job wrote) made fit for one line of a
//! message: whitespace flattened, length bounded.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// `s` on one line, at most `max` characters (an ellipsis marks the cut).
pub fn clip(s: &str, max: usize) -> String {
    let flat = s.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &flat[..i]),
        None => flat,
    }
}

/// The last non-empty line of the file at `path`, read from its last 8 KiB only (a log can be
/// large) and with control characters dropped; `None` when there is none or it cannot be read.
pub fn last_line(path: &Path) -> Option<String> {
    const TAIL: u64 = 8192;
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(TAIL))).ok()?;
    let mut bytes = Vec::new();
    file.take(TAIL).read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let line = text.lines().rev().find(|l| !l.trim().is_empty())?;
    Some(line.chars().filter(|c| !c.is_control()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_flattens_and_bounds() {
        assert_eq!(clip("a\n  b\tc", 10), "a b c");
        assert_eq!(clip("abcdef", 3), "abc…");
    }

    #[test]
    fn last_line_skips_blank_lines_and_control_characters() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("agent.log");
        std::fs::write(&log, "first\nError: \x1b[31mno model\x1b[0m\n\n  \n").unwrap();
        assert_eq!(last_line(&log).as_deref(), Some("Error: [31mno model[0m"));
        std::fs::write(&log, "").unwrap();
        assert_eq!(last_line(&log), None);
        assert_eq!(last_line(&dir.path().join("none")), None);
    }
}
