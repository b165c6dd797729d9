//! Just enough HTTP/1.1 for the agents: keep-alive connections, bounded heads,
//! `Content-Length` or chunked bodies, `Expect: 100-continue`; each request is answered by
//! [`super::script::respond`] in one response with a `Content-Length`.

use std::io;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use super::script::respond;
use super::State;

const MAX_HEAD: u64 = 64 * 1024;
const MAX_BODY: usize = 64 * 1024 * 1024;

/// Serves every connection `listener` accepts until aborted; `via_host` marks the requests
/// of the host-side listener.
pub(super) async fn accept_loop(listener: TcpListener, state: Arc<Mutex<State>>, via_host: bool) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    conns.spawn(serve_connection(stream, state.clone(), via_host));
                }
                Err(e) => {
                    eprintln!("model server: accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// One request, as far as the script and the log need it.
pub(super) struct Request {
    pub(super) method: String,
    pub(super) path: String,
    close: bool,
    pub(super) body: Vec<u8>,
    pub(super) key: Option<String>,
    pub(super) via_host: bool,
}

pub(super) struct Response {
    pub(super) status: &'static str,
    pub(super) content_type: &'static str,
    pub(super) body: Vec<u8>,
}

async fn serve_connection(stream: TcpStream, state: Arc<Mutex<State>>, via_host: bool) {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    loop {
        let request = match read_request(&mut read, &mut write).await {
            Ok(Some(mut r)) => {
                r.via_host = via_host;
                r
            }
            Ok(None) => return,
            Err(e) => {
                eprintln!("model server: bad request: {e}");
                let _ = write
                    .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
                return;
            }
        };
        let response = respond(&state, &request);
        let head = format!(
            "HTTP/1.1 {}\r\ncontent-type: {}\r\ncontent-length: {}\r\ncache-control: no-cache\r\nrequest-id: req_scripted\r\nconnection: {}\r\n\r\n",
            response.status,
            response.content_type,
            response.body.len(),
            if request.close { "close" } else { "keep-alive" },
        );
        let mut bytes = head.into_bytes();
        if request.method != "HEAD" {
            bytes.extend_from_slice(&response.body);
        }
        if write.write_all(&bytes).await.is_err() || write.flush().await.is_err() {
            return;
        }
        if request.close {
            return;
        }
    }
}

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Reads one line (CRLF or LF), bounded.
async fn read_line<R: AsyncRead + Unpin>(r: &mut BufReader<R>) -> io::Result<String> {
    let mut line = String::new();
    (&mut *r).take(MAX_HEAD).read_line(&mut line).await?;
    if !line.ends_with('\n') && !line.is_empty() {
        return Err(invalid("line too long or truncated"));
    }
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}

/// Reads one request, answering `Expect: 100-continue` on `w`; `None` at the connection's
/// end.
async fn read_request<R: AsyncRead + Unpin>(
    r: &mut BufReader<R>,
    w: &mut tokio::net::tcp::OwnedWriteHalf,
) -> io::Result<Option<Request>> {
    let Some(request_line) = read_request_line(r).await? else {
        return Ok(None);
    };
    let mut parts = request_line.split_whitespace();
    let (Some(method), Some(path), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(invalid(format!("request line {request_line:?}")));
    };
    let head = read_head(r, request_line.len(), version == "HTTP/1.0").await?;
    if head.expect_continue {
        w.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
    }
    let body = if head.chunked {
        read_chunked(r).await?
    } else {
        let n = head.length.unwrap_or(0);
        if n > MAX_BODY {
            return Err(invalid("body too large"));
        }
        let mut body = vec![0; n];
        r.read_exact(&mut body).await?;
        body
    };
    Ok(Some(Request {
        method: method.to_string(),
        path: path.to_string(),
        close: head.close,
        body,
        key: head.key,
        via_host: false,
    }))
}

/// The request line, past stray empty lines between requests (a few are tolerated); `None`
/// at the connection's end.
async fn read_request_line<R: AsyncRead + Unpin>(
    r: &mut BufReader<R>,
) -> io::Result<Option<String>> {
    let mut request_line = read_line(r).await?;
    let mut blank = 0;
    while request_line.is_empty() {
        if r.fill_buf().await?.is_empty() || blank > 4 {
            return Ok(None);
        }
        blank += 1;
        request_line = read_line(r).await?;
    }
    Ok(Some(request_line))
}

/// What a request's header fields say about its body, its connection and its credential.
struct Head {
    close: bool,
    length: Option<usize>,
    chunked: bool,
    expect_continue: bool,
    /// `x-api-key`, or the token of `Authorization: Bearer`.
    key: Option<String>,
}

/// Reads the header fields up to the empty line, bounded with the request line's
/// `line_len` by [`MAX_HEAD`]; `close` is the version's default.
async fn read_head<R: AsyncRead + Unpin>(
    r: &mut BufReader<R>,
    line_len: usize,
    close: bool,
) -> io::Result<Head> {
    let mut head = Head {
        close,
        length: None,
        chunked: false,
        expect_continue: false,
        key: None,
    };
    let mut head_size = line_len;
    loop {
        let line = read_line(r).await?;
        if line.is_empty() {
            return Ok(head);
        }
        head_size += line.len();
        if head_size as u64 > MAX_HEAD {
            return Err(invalid("headers too large"));
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(invalid(format!("header {line:?}")));
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => {
                head.length = Some(value.parse().map_err(|_| invalid("content-length"))?);
            }
            "transfer-encoding" => head.chunked = value.to_ascii_lowercase().contains("chunked"),
            "connection" => head.close = value.eq_ignore_ascii_case("close"),
            "expect" => head.expect_continue = value.eq_ignore_ascii_case("100-continue"),
            "x-api-key" => head.key = Some(value.to_string()),
            "authorization" => {
                if let Some(token) = value.strip_prefix("Bearer ") {
                    head.key = Some(token.trim().to_string());
                }
            }
            _ => {}
        }
    }
}

async fn read_chunked<R: AsyncRead + Unpin>(r: &mut BufReader<R>) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line = read_line(r).await?;
        let size = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size, 16).map_err(|_| invalid("chunk size"))?;
        if size == 0 {
            // Trailers, up to the empty line.
            while !read_line(r).await?.is_empty() {}
            return Ok(body);
        }
        if body.len() + size > MAX_BODY {
            return Err(invalid("body too large"));
        }
        let start = body.len();
        body.resize(start + size, 0);
        r.read_exact(&mut body[start..]).await?;
        read_line(r).await?;
    }
}

pub(super) fn json_response(v: Value) -> Response {
    Response {
        status: "200 OK",
        content_type: "application/json",
        body: v.to_string().into_bytes(),
    }
}
