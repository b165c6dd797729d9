//! Which field a serde_json error is about, from its line and column: serde's own message
//! says what was wrong ("invalid type: string \"20M\", expected u64") and where in the text,
//! but not in which field, which is what a person fixing a config needs.

/// A serde_json error as `(field path, message without position)`; the path is `None` for an
/// error outside any field (a syntax error, an empty file).
pub fn locate(text: &str, e: &serde_json::Error) -> (Option<String>, String) {
    let full = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    let message = full.strip_suffix(&suffix).unwrap_or(&full).to_string();
    if !matches!(e.classify(), serde_json::error::Category::Data) {
        return (None, full);
    }
    (path_at(text, e.line(), e.column()), message)
}

enum Frame {
    /// The key being read or whose value is being read.
    Object(Option<String>),
    Array(usize),
}

/// The dotted path (`accounts.work.budget`, `network.extra_hosts.0`) of the innermost field
/// open at 1-based `line` and `column` of `text`, as serde_json counts them (the column of
/// the character it stopped at or after).
pub fn path_at(text: &str, line: usize, column: usize) -> Option<String> {
    let mut stack: Vec<Frame> = Vec::new();
    let (mut l, mut c) = (1, 0);
    let mut chars = text.chars().peekable();
    // After a key, before its value's end: whether the string just read is a key.
    let mut expect_key = false;
    while let Some(ch) = chars.next() {
        if ch == '\n' {
            (l, c) = (l + 1, 0);
        } else {
            c += 1;
        }
        if (l, c) >= (line, column) {
            break;
        }
        match ch {
            '{' => {
                stack.push(Frame::Object(None));
                expect_key = true;
            }
            '[' => stack.push(Frame::Array(0)),
            '}' | ']' => {
                stack.pop();
                expect_key = false;
            }
            ',' => match stack.last_mut() {
                Some(Frame::Object(key)) => {
                    *key = None;
                    expect_key = true;
                }
                Some(Frame::Array(i)) => *i += 1,
                None => {}
            },
            '"' => {
                let mut s = String::new();
                while let Some(ch) = chars.next() {
                    c += 1;
                    match ch {
                        '"' => break,
                        '\\' => {
                            c += 1;
                            if let Some(escaped) = chars.next() {
                                s.push(escaped);
                            }
                        }
                        ch => s.push(ch),
                    }
                }
                if expect_key {
                    if let Some(Frame::Object(key)) = stack.last_mut() {
                        *key = Some(s);
                    }
                    expect_key = false;
                }
            }
            _ => {}
        }
    }
    let parts: Vec<String> = stack
        .iter()
        .filter_map(|f| match f {
            Frame::Object(key) => key.clone(),
            Frame::Array(i) => Some(i.to_string()),
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join("."))
}

#[cfg(test)]
#[path = "json_path_tests.rs"]
mod tests;
