//! A stand-in npm registry on loopback, for the boundary suite's registry attempts: the real
//! `npm` views, installs and publishes against it.
//!
//! It serves one package, `qr-pkg` 1.0.0 (a packument whose tarball URL points back here, with
//! its sha512 integrity, and the tarball, made by the system's `tar`), accepts every publish
//! (`PUT /<name>` → 201), answers anything else `200 {}`, and records `METHOD path` of every
//! request, which is how the suite sees a publish that got through. It stops when dropped.

use std::io;
use std::sync::{Arc, Mutex};

use serde_json::json;
use sha2::Digest;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::task::JoinHandle;

/// The package the registry serves.
pub const PACKAGE: &str = "qr-pkg";
pub const VERSION: &str = "1.0.0";
/// Request bodies larger than this are refused (a publish of the suite's package is < 1 KiB).
const MAX_BODY: usize = 4 << 20;

pub struct NpmRegistry {
    pub port: u16,
    requests: Arc<Mutex<Vec<String>>>,
    task: JoinHandle<()>,
}

impl Drop for NpmRegistry {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl NpmRegistry {
    /// Serves on `listener` (bound where the agent's commands and the proxy can reach it).
    /// Must be called inside a tokio runtime.
    pub fn start(listener: std::net::TcpListener) -> io::Result<NpmRegistry> {
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let tarball = package_tarball()?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let requests = Arc::new(Mutex::new(Vec::new()));
        let state = Arc::new(Served {
            port,
            tarball,
            requests: requests.clone(),
        });
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    Ok((stream, _)) = listener.accept() => {
                        conns.spawn(serve(stream, state.clone()));
                    }
                    Some(_) = conns.join_next(), if !conns.is_empty() => {}
                }
            }
        });
        Ok(NpmRegistry {
            port,
            requests,
            task,
        })
    }

    /// `METHOD path` of every request so far, in order.
    pub fn requests(&self) -> Vec<String> {
        self.requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// `127.0.0.1:PORT`: the egress entry that lets commands reach it.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }
}

struct Served {
    port: u16,
    tarball: Vec<u8>,
    requests: Arc<Mutex<Vec<String>>>,
}

/// `package/package.json` of `qr-pkg`, gzipped tar, made by the system's `tar`.
fn package_tarball() -> io::Result<Vec<u8>> {
    let dir = tempfile::tempdir()?;
    let pkg = dir.path().join("package");
    std::fs::create_dir(&pkg)?;
    std::fs::write(
        pkg.join("package.json"),
        json!({"name": PACKAGE, "version": VERSION, "description": "the boundary suite's stand-in package"}).to_string(),
    )?;
    let out = std::process::Command::new("tar")
        .args(["-czf", "-", "-C"])
        .arg(dir.path())
        .arg("package")
        .output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "tar: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(out.stdout)
}

fn packument(s: &Served) -> serde_json::Value {
    let integrity = format!("sha512-{}", base64(&sha2::Sha512::digest(&s.tarball)));
    let tarball = format!(
        "http://127.0.0.1:{}/{PACKAGE}/-/{PACKAGE}-{VERSION}.tgz",
        s.port
    );
    json!({
        "name": PACKAGE,
        "dist-tags": {"latest": VERSION},
        "versions": {VERSION: {
            "name": PACKAGE, "version": VERSION,
            "dist": {"tarball": tarball, "integrity": integrity},
        }},
    })
}

async fn serve(stream: tokio::net::TcpStream, s: Arc<Served>) {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    loop {
        let mut line = String::new();
        if read.read_line(&mut line).await.unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (method, path) = (
            parts.next().unwrap_or("").to_string(),
            parts.next().unwrap_or("").to_string(),
        );
        let mut length = 0usize;
        let mut expect_continue = false;
        loop {
            let mut h = String::new();
            if read.read_line(&mut h).await.unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let Some((name, value)) = h.split_once(':') else {
                continue;
            };
            match name.trim().to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse().unwrap_or(0),
                "expect" => expect_continue = value.trim().eq_ignore_ascii_case("100-continue"),
                _ => {}
            }
        }
        if length > MAX_BODY {
            return;
        }
        if expect_continue
            && write
                .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .await
                .is_err()
        {
            return;
        }
        let mut body = vec![0; length];
        if read.read_exact(&mut body).await.is_err() {
            return;
        }
        s.requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(format!("{method} {path}"));
        let route = path.split('?').next().unwrap_or("");
        let tarball_path = format!("/{PACKAGE}/-/{PACKAGE}-{VERSION}.tgz");
        let (status, kind, bytes) = match (method.as_str(), route) {
            ("GET" | "HEAD", r) if r == format!("/{PACKAGE}") => (
                "200 OK",
                "application/json",
                packument(&s).to_string().into_bytes(),
            ),
            ("GET" | "HEAD", r) if r == tarball_path => {
                ("200 OK", "application/octet-stream", s.tarball.clone())
            }
            ("PUT", _) => ("201 Created", "application/json", b"{\"ok\":true}".to_vec()),
            _ => ("200 OK", "application/json", b"{}".to_vec()),
        };
        let head = format!(
            "HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {}\r\n\r\n",
            bytes.len()
        );
        let mut out = head.into_bytes();
        if method != "HEAD" {
            out.extend_from_slice(&bytes);
        }
        if write.write_all(&out).await.is_err() {
            return;
        }
    }
}

/// Standard base64 with padding (npm's integrity strings).
fn base64(data: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_matches_the_standard() {
        assert_eq!(super::base64(b""), "");
        assert_eq!(super::base64(b"f"), "Zg==");
        assert_eq!(super::base64(b"fo"), "Zm8=");
        assert_eq!(super::base64(b"foo"), "Zm9v");
        assert_eq!(super::base64(b"foobar"), "Zm9vYmFy");
    }
}
