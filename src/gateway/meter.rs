//! Reading a model response's token usage as it streams past, without holding the response.
//!
//! Two dialects: Anthropic's Messages API (`message_start` carries the input side and a first
//! output count, `message_delta` the running output count, and newer servers repeat the input
//! side there too) and OpenAI-compatible Chat Completions / Responses (a final chunk or the
//! body's `usage`). A streamed response is scanned event by event: only the `data:` lines of
//! events that can carry usage are parsed, and a partial line waits for its end. A plain JSON
//! response is buffered up to [`MAX_JSON`] for its `usage`; past that it is not metered (and
//! the model log says so) rather than held.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The largest non-streamed response body kept to read its usage.
pub const MAX_JSON: usize = 8 * 1024 * 1024;
/// The longest SSE line kept while waiting for its end (a `data:` line of one event).
const MAX_LINE: usize = 4 * 1024 * 1024;

/// The tokens of one response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

impl Tokens {
    /// What caps count: every token the provider bills, cached reads and writes included.
    pub fn total(&self) -> u64 {
        self.input + self.output + self.cache_read + self.cache_write
    }

    pub fn add(&mut self, other: &Tokens) {
        self.input += other.input;
        self.output += other.output;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
    }
}

/// What a response said about itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metered {
    pub model: Option<String>,
    pub tokens: Tokens,
    /// Whether any usage was found at all.
    pub seen: bool,
}

/// Follows one response body.
#[derive(Debug)]
pub struct Meter {
    kind: BodyKind,
    /// The partial line (SSE) or the whole body so far (JSON).
    buf: Vec<u8>,
    overflow: bool,
    pub found: Metered,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyKind {
    Sse,
    Json,
    Other,
}

impl Meter {
    /// A meter for a body of this `content-type`.
    pub fn new(content_type: &str) -> Meter {
        let ct = content_type.to_ascii_lowercase();
        let kind = if ct.starts_with("text/event-stream") {
            BodyKind::Sse
        } else if ct.starts_with("application/json") {
            BodyKind::Json
        } else {
            BodyKind::Other
        };
        Meter {
            kind,
            buf: Vec::new(),
            overflow: false,
            found: Metered::default(),
        }
    }

    /// Feeds the next piece of the body.
    pub fn feed(&mut self, mut chunk: &[u8]) {
        match self.kind {
            BodyKind::Other => {}
            BodyKind::Json => {
                if self.buf.len() + chunk.len() > MAX_JSON {
                    self.overflow = true;
                    self.buf = Vec::new();
                    self.kind = BodyKind::Other;
                } else {
                    self.buf.extend_from_slice(chunk);
                }
            }
            BodyKind::Sse => {
                while let Some(i) = chunk.iter().position(|b| *b == b'\n') {
                    let line = if self.buf.is_empty() {
                        &chunk[..i]
                    } else {
                        self.buf.extend_from_slice(&chunk[..i]);
                        &self.buf[..]
                    };
                    let taken = std::mem::take(&mut self.found);
                    self.found = scan_line(line, taken);
                    self.buf.clear();
                    chunk = &chunk[i + 1..];
                }
                if self.buf.len() + chunk.len() > MAX_LINE {
                    self.overflow = true;
                    self.buf.clear();
                } else {
                    self.buf.extend_from_slice(chunk);
                }
            }
        }
    }

    /// The body has ended.
    pub fn finish(mut self) -> Metered {
        match self.kind {
            BodyKind::Json => {
                if let Ok(v) = serde_json::from_slice::<Value>(&self.buf) {
                    absorb(&v, &mut self.found);
                    if let Some(r) = v.get("response") {
                        // Responses API: {"response": {...}} wrappers.
                        absorb(r, &mut self.found);
                    }
                }
            }
            BodyKind::Sse if !self.buf.is_empty() => {
                let line = std::mem::take(&mut self.buf);
                let taken = std::mem::take(&mut self.found);
                self.found = scan_line(&line, taken);
            }
            _ => {}
        }
        self.found
    }
}

/// One SSE line: only `data:` lines that can carry a model or usage are parsed.
fn scan_line(line: &[u8], mut found: Metered) -> Metered {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let Some(data) = line.strip_prefix(b"data:") else {
        return found;
    };
    let cheap = |needle: &[u8]| data.windows(needle.len()).any(|w| w == needle);
    if !cheap(b"usage") && (found.model.is_some() || !cheap(b"model")) {
        return found;
    }
    if let Ok(v) = serde_json::from_slice::<Value>(data.trim_ascii()) {
        // Anthropic `message_start`: the message is nested.
        if let Some(m) = v.get("message") {
            absorb(m, &mut found);
        }
        // OpenAI Responses API `response.completed`: the response is nested.
        if let Some(r) = v.get("response") {
            absorb(r, &mut found);
        }
        absorb(&v, &mut found);
    }
    found
}

/// Takes `model` and `usage` of one JSON object. Counts are cumulative in both dialects (an
/// Anthropic `message_delta` repeats the running total), so a later figure replaces an
/// earlier one rather than adding to it.
fn absorb(v: &Value, found: &mut Metered) {
    if found.model.is_none() {
        if let Some(m) = v.get("model").and_then(Value::as_str) {
            if !m.is_empty() {
                found.model = Some(m.to_string());
            }
        }
    }
    let Some(u) = v.get("usage").filter(|u| u.is_object()) else {
        return;
    };
    let n = |key: &str| u.get(key).and_then(Value::as_u64);
    let t = &mut found.tokens;
    let mut any = false;
    // Anthropic.
    if let Some(x) = n("input_tokens") {
        // OpenAI Responses API counts cached input inside input_tokens.
        let cached = u
            .get("input_tokens_details")
            .and_then(|d| d.get("cached_tokens"))
            .and_then(Value::as_u64)
            .unwrap_or(0);
        t.input = x.saturating_sub(cached);
        if cached > 0 {
            t.cache_read = cached;
        }
        any = true;
    }
    if let Some(x) = n("output_tokens") {
        t.output = x;
        any = true;
    }
    if let Some(x) = n("cache_read_input_tokens") {
        t.cache_read = x;
        any = true;
    }
    if let Some(x) = n("cache_creation_input_tokens") {
        t.cache_write = x;
        any = true;
    }
    // OpenAI Chat Completions: prompt tokens include the cached ones.
    if let Some(x) = n("prompt_tokens") {
        let cached = u
            .get("prompt_tokens_details")
            .and_then(|d| d.get("cached_tokens"))
            .and_then(Value::as_u64)
            .unwrap_or(0);
        t.input = x.saturating_sub(cached);
        t.cache_read = cached;
        any = true;
    }
    if let Some(x) = n("completion_tokens") {
        t.output = x;
        any = true;
    }
    found.seen |= any;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_in_pieces(ct: &str, body: &str, piece: usize) -> Metered {
        let mut m = Meter::new(ct);
        for c in body.as_bytes().chunks(piece) {
            m.feed(c);
        }
        m.finish()
    }

    #[test]
    fn anthropic_stream_usage_from_start_and_delta() {
        let body = "event: message_start\n\
data: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"claude-x\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1,\"cache_creation_input_tokens\":3,\"cache_read_input_tokens\":7}}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"usage model\"}}\n\n\
event: message_delta\n\
data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":42}}\n\n";
        for piece in [1, 7, 64, 4096] {
            let m = feed_in_pieces("text/event-stream; charset=utf-8", body, piece);
            assert_eq!(m.model.as_deref(), Some("claude-x"));
            assert_eq!(
                m.tokens,
                Tokens {
                    input: 10,
                    output: 42,
                    cache_read: 7,
                    cache_write: 3
                },
                "piece {piece}"
            );
            assert!(m.seen);
        }
    }

    #[test]
    fn openai_stream_final_usage_chunk_with_cached_tokens() {
        let body = "data: {\"id\":\"c\",\"model\":\"gpt-x\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\r\n\r\n\
data: {\"id\":\"c\",\"model\":\"gpt-x\",\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":5,\"total_tokens\":105,\"prompt_tokens_details\":{\"cached_tokens\":60}}}\r\n\r\n\
data: [DONE]\r\n\r\n";
        let m = feed_in_pieces("text/event-stream", body, 5);
        assert_eq!(m.model.as_deref(), Some("gpt-x"));
        assert_eq!(
            m.tokens,
            Tokens {
                input: 40,
                output: 5,
                cache_read: 60,
                cache_write: 0
            }
        );
    }

    #[test]
    fn json_bodies_of_both_dialects() {
        let a = r#"{"id":"m","type":"message","model":"claude-y","usage":{"input_tokens":3,"output_tokens":4,"cache_read_input_tokens":0,"cache_creation_input_tokens":0}}"#;
        let m = feed_in_pieces("application/json", a, 3);
        assert_eq!(
            (m.model.as_deref(), m.tokens.total()),
            (Some("claude-y"), 7)
        );
        let o = r#"{"model":"gpt-y","usage":{"prompt_tokens":2,"completion_tokens":9}}"#;
        let m = feed_in_pieces("application/json", o, 100);
        assert_eq!((m.model.as_deref(), m.tokens.output), (Some("gpt-y"), 9));
        // A body without usage (a model list) is not metered.
        let m = feed_in_pieces("application/json", r#"{"data":[]}"#, 100);
        assert!(!m.seen);
        // Nor is anything else.
        let m = feed_in_pieces("text/plain", a, 100);
        assert!(!m.seen && m.model.is_none());
    }

    #[test]
    fn a_last_line_without_newline_still_counts() {
        let body =
            "data: {\"model\":\"m\",\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}";
        let m = feed_in_pieces("text/event-stream", body, 10);
        assert_eq!(m.tokens.total(), 3);
    }
}
