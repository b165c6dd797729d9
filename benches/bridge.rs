//! The job's network bridge (`src/agentnet.rs`) on its own: request/answer round trips shaped
//! like a model request (a 1 KiB head, then a 60 KiB body, in two writes; a small answer once
//! the whole request is in), from inside a network namespace through the bridge to a loopback
//! upstream, against the same client talking to the upstream directly, in one run.
//!
//! Issue 42 found 40 ms per request here: the bridge's TCP sides had Nagle's algorithm on, so
//! the tail of a request waited for the upstream's delayed ACK. The gateway's bench misses it
//! because it connects to the gateway directly. Target: the bridge adds < 2 ms per request.
//!
//! `cargo bench --bench bridge` (root: bubblewrap makes the namespace the bridge's inside
//! runs in).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::Instant;

const HEAD: usize = 1024;
const BODY: usize = 60 * 1024;
const ANSWER: usize = 256;
const REQUESTS: usize = 50;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // The client, run again inside the namespace: `--client <port>`.
    if let Some(at) = args.iter().position(|a| a == "--client") {
        let port: u16 = args[at + 1].parse().unwrap();
        for ms in client(port) {
            println!("{ms}");
        }
        return;
    }
    let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = upstream.local_addr().unwrap().port();
    std::thread::spawn(move || serve(upstream));

    let direct = median(client(port));
    let bridged = median(through_bridge(port));
    println!("the job's network bridge, {REQUESTS} requests of {HEAD} + {BODY} bytes (medians)");
    println!("  direct to the upstream         {direct:>8.2} ms");
    println!("  through the bridge             {bridged:>8.2} ms");
    let added = bridged - direct;
    let verdict = if added < 2.0 { "met" } else { "NOT met" };
    println!("  added per request              {added:>8.2} ms   target < 2 ms  {verdict}");
    println!(
        "  ratio                          {:>8.2}x",
        bridged / direct
    );
}

/// The upstream: for each connection, answers each whole request with `ANSWER` bytes.
fn serve(listener: TcpListener) {
    for conn in listener.incoming().flatten() {
        std::thread::spawn(move || {
            let mut conn = conn;
            let mut request = vec![0u8; HEAD + BODY];
            while conn.read_exact(&mut request).is_ok() {
                if conn.write_all(&[b'a'; ANSWER]).is_err() {
                    return;
                }
            }
        });
    }
}

/// Round-trip times (ms) of `REQUESTS` requests over one connection to 127.0.0.1:`port`.
fn client(port: u16) -> Vec<f64> {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    // The agent's side as a Node client has it: no delay on its own socket.
    conn.set_nodelay(true).unwrap();
    let head = vec![b'h'; HEAD];
    let body = vec![b'b'; BODY];
    let mut answer = vec![0u8; ANSWER];
    let mut out = Vec::new();
    for _ in 0..REQUESTS {
        let start = Instant::now();
        conn.write_all(&head).unwrap();
        conn.write_all(&body).unwrap();
        conn.read_exact(&mut answer).unwrap();
        out.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    out
}

/// The client's times through the bridge: the runner's `outside` mode on the host, its
/// `inside` mode in a network namespace of bubblewrap's, and this bench's client in there.
fn through_bridge(port: u16) -> Vec<f64> {
    let runner = env!("CARGO_BIN_EXE_quest-runner");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_string_lossy().into_owned();
    let ports = port.to_string();
    let mut outside = Command::new(runner)
        .args(["--quest-agent-net", "outside", &d, "-", &ports])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = [0u8; 6];
    outside
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut ready)
        .unwrap();
    let me = std::env::current_exe().unwrap();
    let out = Command::new("bwrap")
        .args(["--dev-bind", "/", "/", "--unshare-net", "--"])
        .arg(runner)
        .args(["--quest-agent-net", "inside", &d, &ports, "--"])
        .arg(&me)
        .args(["--client", &ports])
        .output()
        .unwrap();
    let _ = outside.kill();
    let _ = outside.wait();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}
