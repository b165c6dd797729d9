//! Text from outside (a program's output, a file a job wrote) made fit for one line of a
//! message: whitespace flattened, length bounded.

use std::io::{Read, Seek, SeekFrom, Write};
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

/// Whether `c` may steer a terminal or hide what text says when printed as it is: C0 controls
/// (but newline and tab), DEL and C1 (an 8-bit CSI or OSC), the bidi overrides, embeddings and
/// isolates and the marks that reorder text, and the zero-width characters that hide inside
/// it. Text a job controls shows each of them escaped, so a command shown is the one that ran.
pub fn is_unsafe(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{8}' | '\u{b}'..='\u{1f}' | '\u{7f}'..='\u{9f}'
        | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}'
        | '\u{061c}' | '\u{200b}'..='\u{200d}' | '\u{2060}' | '\u{feff}')
}

/// `s` as a person may be shown it: every [`is_unsafe`] character written as `\u{…}`, and
/// newlines and tabs kept. The one rule for job-controlled text on a terminal (`logs`, `jobs`,
/// a result's message, an error).
pub fn shown(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match is_unsafe(c) {
            true => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            false => out.push(c),
        }
    }
    out
}

/// [`shown`] for one line of a table or message: newlines and tabs escaped too.
pub fn shown_line(s: &str) -> String {
    shown(s).replace('\n', "\\n").replace('\t', "\\t")
}

/// JSON text (serde_json's) with every [`is_unsafe`] character it left as it is written as a
/// JSON escape (`\u202e`): the same data for a machine, nothing that steers a terminal or
/// reorders what a person reads. Such a character can only be inside a string, where the
/// escape means the same.
pub fn json_shown(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match is_unsafe(c) {
            true => out.push_str(&format!("\\u{:04x}", c as u32)),
            false => out.push(c),
        }
    }
    out
}

/// A writer that passes whole lines of any bytes on as [`shown`] (invalid UTF-8 as U+FFFD),
/// for a raw log printed on a terminal; a line cut mid-way waits for its end, and the last,
/// unfinished one is written when the writer is dropped.
pub struct ShownLines<W: Write> {
    out: W,
    partial: Vec<u8>,
}

impl<W: Write> ShownLines<W> {
    pub fn new(out: W) -> ShownLines<W> {
        ShownLines {
            out,
            partial: Vec::new(),
        }
    }
}

impl<W: Write> Write for ShownLines<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.partial.extend_from_slice(buf);
        if let Some(end) = self.partial.iter().rposition(|b| *b == b'\n') {
            let lines: Vec<u8> = self.partial.drain(..=end).collect();
            self.out
                .write_all(shown(&String::from_utf8_lossy(&lines)).as_bytes())?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

impl<W: Write> Drop for ShownLines<W> {
    fn drop(&mut self) {
        if !self.partial.is_empty() {
            let rest = shown(&String::from_utf8_lossy(&self.partial));
            let _ = self.out.write_all(rest.as_bytes());
            let _ = self.out.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsafe_characters_are_shown_escaped() {
        let text =
            "ok\u{9d}8;;x\u{9c} \u{7f}\u{202e}txt.exe\u{2067}\u{200b}\u{feff}\u{1b}[2J\tend\n";
        assert_eq!(
            shown(text),
            "ok\\u{9d}8;;x\\u{9c} \\u{7f}\\u{202e}txt.exe\\u{2067}\\u{200b}\\u{feff}\\u{1b}[2J\tend\n"
        );
        assert_eq!(shown_line("a\tb\nc"), "a\\tb\\nc");
        assert_eq!(shown("plain é ü 中"), "plain é ü 中");
        let json = serde_json::to_string(&serde_json::json!({"t": text})).unwrap();
        let safe = json_shown(&json);
        assert!(!safe.chars().any(is_unsafe), "{safe}");
        assert!(
            safe.contains("\\u202e") && safe.contains("\\u009d"),
            "{safe}"
        );
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back["t"], text);
    }

    #[test]
    fn shown_lines_escape_across_cut_writes() {
        let mut got = Vec::new();
        {
            let mut w = ShownLines::new(&mut got);
            let bytes = "a\u{202e}b\nc\u{9d}".as_bytes();
            // Cut inside the two-byte U+009D and inside the three-byte U+202E.
            for chunk in [&bytes[..2], &bytes[2..5], &bytes[5..8], &bytes[8..]] {
                w.write_all(chunk).unwrap();
            }
        }
        assert_eq!(String::from_utf8(got).unwrap(), "a\\u{202e}b\nc\\u{9d}");
    }

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
