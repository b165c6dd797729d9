//! A stand-in registry on loopback, for the boundary suite's registry attempts: the real `npm`
//! (and yarn, pnpm, bun, deno) views, installs and publishes against it, and the real `pip` and
//! `uv` download from its PyPI side.
//!
//! It serves one package, `qr-pkg` 1.0.0: for npm a packument whose tarball URL points back
//! here, with its sha512 integrity, and the tarball, made by the system's `tar`; for PyPI a
//! simple index page (`/simple/qr-pkg/`) and a wheel. It accepts every publish (`PUT /<name>` →
//! 201), answers anything else `200 {}`, and records `METHOD path` of every request, which is
//! how the suite sees a publish that got through. It stops when dropped.
//!
//! It speaks plain HTTP; [`crate::tls_front`] puts HTTPS in front of it. A request
//! that came through the front (its `Host` names the front's port, see [`NpmRegistry::set_tls_port`])
//! is answered with `https` links to the front.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use std::io;
use std::sync::{Arc, Mutex};

use serde_json::json;
use sha2::Digest;
use tokio::task::JoinHandle;

use crate::stub_http::{self, StubRequest, StubResponse};

/// The package the registry serves.
pub const PACKAGE: &str = "qr-pkg";
pub const VERSION: &str = "1.0.0";
/// Request bodies larger than this are refused, 413 (a publish of the suite's package is < 1 KiB).
const MAX_BODY: usize = 4 << 20;

pub struct NpmRegistry {
    pub port: u16,
    requests: Arc<Mutex<Vec<String>>>,
    tls_port: Arc<std::sync::atomic::AtomicU16>,
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
        let tls_port = Arc::new(std::sync::atomic::AtomicU16::new(0));
        let state = Arc::new(Served {
            port,
            tarball,
            wheel: crate::wheel::build(PACKAGE, VERSION),
            tls_port: tls_port.clone(),
            requests: requests.clone(),
        });
        let handler = move |req: StubRequest| {
            let request = Request {
                host: req.header("host").unwrap_or_default().to_string(),
                method: req.method,
                path: req.target,
            };
            state
                .requests
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(format!("{} {}", request.method, request.path));
            let (status, content_type, body) = route(&state, &request);
            StubResponse {
                status,
                content_type,
                body,
                headers: &[],
            }
        };
        let task = tokio::spawn(stub_http::serve(listener, MAX_BODY, Arc::new(handler)));
        Ok(NpmRegistry {
            port,
            requests,
            tls_port,
            task,
        })
    }

    /// The port of the HTTPS front: requests naming it get `https` links to it.
    pub fn set_tls_port(&self, port: u16) {
        self.tls_port
            .store(port, std::sync::atomic::Ordering::Relaxed);
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
    wheel: Vec<u8>,
    tls_port: Arc<std::sync::atomic::AtomicU16>,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Served {
    /// Where links point for a request whose `Host` header is `host`: back through the HTTPS
    /// front if it came that way, else here.
    fn base(&self, host: &str) -> String {
        let tls = self.tls_port.load(std::sync::atomic::Ordering::Relaxed);
        if tls != 0 && host.rsplit(':').next() == Some(&tls.to_string()) {
            format!("https://localhost:{tls}")
        } else {
            format!("http://127.0.0.1:{}", self.port)
        }
    }
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

fn packument(s: &Served, host: &str) -> serde_json::Value {
    let digest = sha2::Sha512::digest(&s.tarball);
    // Standard base64 with padding, as npm's integrity strings are.
    let integrity = format!("sha512-{}", STANDARD.encode(digest));
    let tarball = format!("{}/{PACKAGE}/-/{PACKAGE}-{VERSION}.tgz", s.base(host));
    json!({
        "name": PACKAGE,
        "dist-tags": {"latest": VERSION},
        "versions": {VERSION: {
            "name": PACKAGE, "version": VERSION,
            "dist": {"tarball": tarball, "integrity": integrity},
        }},
    })
}

/// The PyPI simple index page of the package (PEP 503): one link to the wheel, with its hash.
fn simple_page(s: &Served) -> String {
    let name = crate::wheel::file_name(PACKAGE, VERSION);
    let sha = quest_runner::util::hex::encode(sha2::Sha256::digest(&s.wheel));
    format!(
        "<!DOCTYPE html><html><body><a href=\"/files/{name}#sha256={sha}\">{name}</a></body></html>\n"
    )
}

/// One request as the registry needs it (its body is read, and dropped).
struct Request {
    method: String,
    path: String,
    host: String,
}

/// The answer to a request: status, content type and body.
fn route(s: &Served, request: &Request) -> (u16, &'static str, Vec<u8>) {
    let route = request.path.split('?').next().unwrap_or("");
    let tarball_path = format!("/{PACKAGE}/-/{PACKAGE}-{VERSION}.tgz");
    let wheel_path = format!("/files/{}", crate::wheel::file_name(PACKAGE, VERSION));
    let simple = format!("/simple/{PACKAGE}");
    match (request.method.as_str(), route) {
        ("GET" | "HEAD", r) if r == format!("/{PACKAGE}") => (
            200,
            "application/json",
            packument(s, &request.host).to_string().into_bytes(),
        ),
        ("GET" | "HEAD", r) if r == tarball_path => {
            (200, "application/octet-stream", s.tarball.clone())
        }
        ("GET" | "HEAD", r) if r.trim_end_matches('/') == simple => {
            (200, "text/html", simple_page(s).into_bytes())
        }
        ("GET" | "HEAD", r) if r == wheel_path => {
            (200, "application/octet-stream", s.wheel.clone())
        }
        ("PUT", _) => (201, "application/json", b"{\"ok\":true}".to_vec()),
        _ => (200, "application/json", b"{}".to_vec()),
    }
}
