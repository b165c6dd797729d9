//! Which answer a request gets: the next step of the script for a main-loop model request
//! (one that offers tools), plain text for a side request, a harmless answer for anything
//! else; each request is logged with what it was served.

use std::sync::Mutex;

use serde_json::{json, Value};

use super::sse::sse;
use super::wire::{json_response, Request, Response};
use super::{anthropic, lock, openai, Exchange, Served, State, Step, DONE_TEXT, SIDE_TEXT};

/// What one model request is answered with.
pub(super) enum Turn {
    Tool {
        id: String,
        name: String,
        input: Value,
    },
    Text(String),
}

/// The two model APIs the server speaks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dialect {
    /// Claude Code's `POST …/v1/messages`.
    Anthropic,
    /// opencode's `POST …/chat/completions`.
    OpenAi,
}

/// Answers one request: takes its turn of the script (logged), then renders it in the
/// request's dialect, streamed when the request asks for a stream.
pub(super) fn respond(state: &Mutex<State>, req: &Request) -> Response {
    let body: Value = if req.body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&req.body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&req.body).into_owned()))
    };
    let route = req
        .path
        .split('?')
        .next()
        .unwrap_or("")
        .trim_end_matches('/');
    let is_post = req.method == "POST";
    let dialect = if is_post && route.ends_with("/messages") {
        Some(Dialect::Anthropic)
    } else if is_post && route.ends_with("/chat/completions") {
        Some(Dialect::OpenAi)
    } else {
        None
    };
    let (exchange, turn) = take_turn(state, req, &body, dialect);

    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("scripted")
        .to_string();
    let stream = body.get("stream").and_then(Value::as_bool) == Some(true);
    match dialect {
        Some(Dialect::Anthropic) => {
            let id = format!("msg_scripted_{exchange}");
            if stream {
                sse(anthropic::events(&id, &model, &turn))
            } else {
                json_response(anthropic::message(&id, &model, &turn))
            }
        }
        Some(Dialect::OpenAi) => {
            let id = format!("chatcmpl-scripted-{exchange}");
            if stream {
                sse(openai::events(&id, &model, &turn))
            } else {
                json_response(openai::completion(&id, &model, &turn))
            }
        }
        None => not_a_model_request(&req.method, route),
    }
}

/// Picks the answer to one request and logs it, under one lock: the log's order is the
/// order in which steps were served. Returns the request's index in the log.
fn take_turn(
    state: &Mutex<State>,
    req: &Request,
    body: &Value,
    dialect: Option<Dialect>,
) -> (usize, Turn) {
    let mut st = lock(state);
    let exchange = st.log.len();
    let (served, turn) = match dialect {
        Some(dialect) => next_turn(&mut st, body, dialect),
        None => (Served::Other, Turn::Text(String::new())),
    };
    st.log.push(Exchange {
        method: req.method.clone(),
        path: req.path.clone(),
        body: body.clone(),
        served,
        at: std::time::Instant::now(),
        key: req.key.clone(),
        via_host: req.via_host,
    });
    (exchange, turn)
}

/// A model request's turn: the next step for the main loop (a request offering tools),
/// `done` once the script is exhausted, plain text for a side request.
fn next_turn(st: &mut State, body: &Value, dialect: Dialect) -> (Served, Turn) {
    let offers_tools = body
        .get("tools")
        .and_then(Value::as_array)
        .is_some_and(|t| !t.is_empty());
    if !offers_tools {
        return (Served::Side, Turn::Text(SIDE_TEXT.to_string()));
    }
    if st.next >= st.script.len() {
        return (Served::Done, Turn::Text(DONE_TEXT.to_string()));
    }
    let n = st.next;
    st.next += 1;
    let anthropic = dialect == Dialect::Anthropic;
    let id = if anthropic {
        format!("toolu_scripted_{n}")
    } else {
        format!("call_scripted_{n}")
    };
    let turn = match &st.script[n] {
        Step::Bash { command } => Turn::Tool {
            id,
            name: if anthropic { "Bash" } else { "bash" }.to_string(),
            input: json!({"command": command, "description": format!("scripted step {n}")}),
        },
        Step::Tool { name, input } => Turn::Tool {
            id,
            name: name.clone(),
            input: input.clone(),
        },
        Step::Text(text) => Turn::Text(text.clone()),
    };
    (Served::Step(n), turn)
}

/// Answers what is no model request, harmlessly: a token count, a one-model list, or `{}`
/// (Claude Code's `HEAD /api/hello` probe and anything unknown).
fn not_a_model_request(method: &str, route: &str) -> Response {
    if method == "POST" && route.ends_with("/count_tokens") {
        json_response(json!({"input_tokens": 1}))
    } else if method == "GET" && route.ends_with("/models") {
        json_response(json!({
            "object": "list",
            "data": [{"id": "scripted", "object": "model", "type": "model", "display_name": "Scripted", "created": 0, "created_at": "1970-01-01T00:00:00Z", "owned_by": "scripted"}],
            "has_more": false, "first_id": "scripted", "last_id": "scripted",
        }))
    } else {
        json_response(json!({}))
    }
}
