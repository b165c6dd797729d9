//! Server-sent events, as both dialects stream them: one frame per event, each ended by an
//! empty line, the whole stream sent as one body.

use super::wire::Response;

/// The response carrying a whole stream of frames.
pub(super) fn sse(events: String) -> Response {
    Response {
        status: "200 OK",
        content_type: "text/event-stream",
        body: events.into_bytes(),
    }
}

/// One event's frame: its `event:` line when the dialect names events (Anthropic does,
/// OpenAI does not), its `data:` line, and the empty line that ends it.
pub(super) fn frame(event: Option<&str>, data: &str) -> String {
    match event {
        Some(kind) => format!("event: {kind}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}
