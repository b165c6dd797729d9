//! The Anthropic Messages API's answers (Claude Code's dialect): a whole message, or its
//! stream of `message_start`, `content_block_*`, `message_delta` and `message_stop` events.

use serde_json::{json, Value};

use super::script::Turn;
use super::sse::frame;

fn usage() -> Value {
    json!({"input_tokens": 1, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0})
}

fn stop_reason(turn: &Turn) -> &'static str {
    match turn {
        Turn::Tool { .. } => "tool_use",
        Turn::Text(_) => "end_turn",
    }
}

fn block(turn: &Turn) -> Value {
    match turn {
        Turn::Tool { id, name, input } => {
            json!({"type": "tool_use", "id": id, "name": name, "input": input})
        }
        Turn::Text(text) => json!({"type": "text", "text": text}),
    }
}

/// The whole answer, for a request that asks for no stream.
pub(super) fn message(id: &str, model: &str, turn: &Turn) -> Value {
    json!({
        "id": id, "type": "message", "role": "assistant", "model": model,
        "content": [block(turn)],
        "stop_reason": stop_reason(turn), "stop_sequence": null,
        "usage": usage(),
    })
}

/// The answer as the event stream Claude Code asks for.
pub(super) fn events(id: &str, model: &str, turn: &Turn) -> String {
    let mut out = String::new();
    let mut event = |v: Value| {
        let kind = v["type"].as_str().unwrap_or_default().to_string();
        out.push_str(&frame(Some(&kind), &v.to_string()));
    };
    event(json!({"type": "message_start", "message": {
        "id": id, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": null, "stop_sequence": null, "usage": usage(),
    }}));
    let (start, delta) = match turn {
        Turn::Tool { id, name, input } => (
            json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
            json!({"type": "input_json_delta", "partial_json": input.to_string()}),
        ),
        Turn::Text(text) => (
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": text}),
        ),
    };
    event(json!({"type": "content_block_start", "index": 0, "content_block": start}));
    event(json!({"type": "content_block_delta", "index": 0, "delta": delta}));
    event(json!({"type": "content_block_stop", "index": 0}));
    event(json!({"type": "message_delta",
        "delta": {"stop_reason": stop_reason(turn), "stop_sequence": null},
        "usage": {"output_tokens": 1}}));
    event(json!({"type": "message_stop"}));
    out
}
