//! A request as the script and the log see it, and the response the script gives: the
//! server's own types, apart from the HTTP that carries them ([`super::http`]).

use serde_json::Value;

/// One request, as far as the script and the log need it.
pub(super) struct Request {
    pub(super) method: String,
    pub(super) path: String,
    pub(super) body: Vec<u8>,
    /// `x-api-key`, or the token of `Authorization: Bearer`.
    pub(super) key: Option<String>,
    /// Whether it came through the host-side listener.
    pub(super) via_host: bool,
}

/// One whole response (a stream of events is one body, sent at once).
pub(super) struct Response {
    pub(super) status: &'static str,
    pub(super) content_type: &'static str,
    pub(super) body: Vec<u8>,
}

pub(super) fn json_response(v: Value) -> Response {
    Response {
        status: "200 OK",
        content_type: "application/json",
        body: v.to_string().into_bytes(),
    }
}
