//! OpenAI-compatible Chat Completions' answers (opencode's dialect): a whole completion, or
//! its stream of `chat.completion.chunk` events, a usage chunk and `data: [DONE]`.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use super::script::Turn;
use super::sse::frame;

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn usage() -> Value {
    json!({"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2})
}

fn finish_reason(turn: &Turn) -> &'static str {
    match turn {
        Turn::Tool { .. } => "tool_calls",
        Turn::Text(_) => "stop",
    }
}

/// The whole answer, for a request that asks for no stream.
pub(super) fn completion(id: &str, model: &str, turn: &Turn) -> Value {
    let message = match turn {
        Turn::Tool { id, name, input } => json!({"role": "assistant", "content": null,
            "tool_calls": [{"id": id, "type": "function",
                "function": {"name": name, "arguments": input.to_string()}}]}),
        Turn::Text(text) => json!({"role": "assistant", "content": text}),
    };
    json!({
        "id": id, "object": "chat.completion", "created": now(), "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason(turn)}],
        "usage": usage(),
    })
}

/// The answer as the chunk stream opencode asks for, ended by `data: [DONE]`.
pub(super) fn events(id: &str, model: &str, turn: &Turn) -> String {
    let created = now();
    let mut out = String::new();
    let mut chunk = |choices: Value, usage: Option<Value>| {
        let mut v = json!({"id": id, "object": "chat.completion.chunk", "created": created,
            "model": model, "choices": choices});
        if let Some(u) = usage {
            v["usage"] = u;
        }
        out.push_str(&frame(None, &v.to_string()));
    };
    match turn {
        Turn::Tool { id, name, input } => {
            chunk(
                json!([{"index": 0, "finish_reason": null, "delta": {"role": "assistant", "content": null,
                "tool_calls": [{"index": 0, "id": id, "type": "function",
                    "function": {"name": name, "arguments": ""}}]}}]),
                None,
            );
            chunk(
                json!([{"index": 0, "finish_reason": null, "delta": {
                "tool_calls": [{"index": 0, "function": {"arguments": input.to_string()}}]}}]),
                None,
            );
        }
        Turn::Text(text) => {
            chunk(
                json!([{"index": 0, "finish_reason": null,
                "delta": {"role": "assistant", "content": text}}]),
                None,
            );
        }
    }
    chunk(
        json!([{"index": 0, "delta": {}, "finish_reason": finish_reason(turn)}]),
        None,
    );
    chunk(json!([]), Some(usage()));
    out.push_str(&frame(None, "[DONE]"));
    out
}
