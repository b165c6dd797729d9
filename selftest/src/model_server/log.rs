//! What the server received, as tests read it: every exchange, the tool results agents sent
//! back (in either dialect), and a one-line-per-request summary for failure messages.

use serde_json::Value;

use super::{lock, Exchange, ModelServer, ToolResult};

impl ModelServer {
    /// Every request body received, in order (side requests and probes included).
    pub fn requests(&self) -> Vec<Value> {
        self.exchanges().into_iter().map(|e| e.body).collect()
    }

    /// Every request received, in order, with what it was answered with.
    pub fn exchanges(&self) -> Vec<Exchange> {
        lock(&self.state).log.clone()
    }

    /// The tool results the agent sent back, in both dialects, each once (by id), with the
    /// first request that carried it.
    pub fn tool_results(&self) -> Vec<ToolResult> {
        self.tool_results_since(0)
    }

    /// [`Self::tool_results`] of the requests from the `first`-th on: those of a script set
    /// after that (whose step ids start again at 0).
    pub fn tool_results_since(&self, first: usize) -> Vec<ToolResult> {
        let mut found: Vec<ToolResult> = Vec::new();
        for (i, e) in self.exchanges().iter().enumerate().skip(first) {
            let Some(messages) = e.body.get("messages").and_then(Value::as_array) else {
                continue;
            };
            for m in messages {
                // OpenAI: {"role": "tool", "tool_call_id": …, "content": …}
                if m.get("role").and_then(Value::as_str) == Some("tool") {
                    let id = str_field(m, "tool_call_id");
                    push_result(&mut found, i, id, content_text(m.get("content")));
                }
                // Anthropic: {"role": "user", "content": [{"type": "tool_result", …}]}
                if let Some(blocks) = m.get("content").and_then(Value::as_array) {
                    for b in blocks {
                        if b.get("type").and_then(Value::as_str) == Some("tool_result") {
                            let id = str_field(b, "tool_use_id");
                            push_result(&mut found, i, id, content_text(b.get("content")));
                        }
                    }
                }
            }
        }
        found
    }

    /// One line per request: method, path, what was served, model, tool and message counts,
    /// and the last message (shortened). For failure messages.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        for (i, e) in self.exchanges().iter().enumerate() {
            let b = &e.body;
            let tools = b.get("tools").and_then(Value::as_array).map_or(0, Vec::len);
            let messages = b.get("messages").and_then(Value::as_array);
            let last = messages
                .and_then(|m| m.last())
                .map(|m| shorten(&m.to_string(), 300))
                .unwrap_or_default();
            out.push_str(&format!(
                "#{i} {} {} -> {:?} model={} tools={tools} messages={} last={last}\n",
                e.method,
                e.path,
                e.served,
                b.get("model").unwrap_or(&Value::Null),
                messages.map_or(0, Vec::len),
            ));
        }
        out
    }
}

fn str_field(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn push_result(found: &mut Vec<ToolResult>, request: usize, id: String, text: String) {
    if !found.iter().any(|r| r.id == id) {
        found.push(ToolResult { request, id, text });
    }
}

/// A message content: a string, or an array of parts whose `text`s are joined.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

fn shorten(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}
