//! The job's own network (src/agentnet.rs), with the real binary and bubblewrap: inside a
//! network namespace of its own, a program reaches the bridged port (a loopback service of
//! the host's) and nothing else of the host's loopback, which it does reach unconfined.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A loopback service answering each connection with `name`, for a bounded number of them.
fn service(name: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming().take(8).flatten() {
            let mut conn = conn;
            let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
            let mut buf = [0u8; 64];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(name.as_bytes());
        }
    });
    port
}

/// bash's /dev/tcp to `port`, bounded: prints what came back, or FAILED.
fn probe(port: u16) -> String {
    format!(
        "timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port} && echo hi >&3 && cat <&3' 2>/dev/null || echo FAILED-{port}"
    )
}

#[test]
fn only_the_bridged_port_is_reachable_from_the_jobs_network() {
    if which::which("bwrap").is_err() {
        eprintln!("bwrap not found: skipped");
        return;
    }
    let runner = env!("CARGO_BIN_EXE_quest-runner");
    let gateway = service("GATEWAY");
    let other = service("OTHER");
    // Unconfined, both answer: the refusal below is the namespace's.
    let plain = Command::new("bash")
        .args(["-c", &format!("{}; {}", probe(gateway), probe(other))])
        .output()
        .unwrap();
    let plain = String::from_utf8_lossy(&plain.stdout).to_string();
    assert!(
        plain.contains("GATEWAY") && plain.contains("OTHER"),
        "{plain}"
    );

    let dir = tempfile::tempdir().unwrap();
    let seen = through_the_bridge(runner, dir.path(), gateway, other);
    assert!(seen.contains("GATEWAY"), "the bridged port answers: {seen}");
    assert!(
        !seen.contains("OTHER"),
        "another host service was reached: {seen}"
    );
    assert!(seen.contains(&format!("FAILED-{other}")), "{seen}");
}

/// Runs both sides of the bridge for `gateway` with their sockets in `dir`, and a program
/// inside that probes `gateway` and `other`: what it printed.
fn through_the_bridge(runner: &str, dir: &std::path::Path, gateway: u16, other: u16) -> String {
    let dir_s = dir.to_str().unwrap();
    let mut outside = Command::new(runner)
        .args([
            "--quest-agent-net",
            "outside",
            dir_s,
            "-",
            &gateway.to_string(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = [0u8; 6];
    outside
        .stdout
        .take()
        .unwrap()
        .read_exact(&mut ready)
        .unwrap();
    assert_eq!(&ready, b"ready\n");
    let inside = Command::new("bwrap")
        .args(["--unshare-net", "--unshare-pid", "--die-with-parent"])
        .args(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"])
        .args(["--", runner, "--quest-agent-net", "inside", dir_s])
        .arg(gateway.to_string())
        .args(["--", "bash", "-c"])
        .arg(format!(
            "{}; {}; echo INSIDE-RAN",
            probe(gateway),
            probe(other)
        ))
        .output()
        .unwrap();
    let _ = outside.kill();
    let _ = outside.wait();
    let seen = String::from_utf8_lossy(&inside.stdout).to_string();
    assert!(
        seen.contains("INSIDE-RAN"),
        "{seen} {}",
        String::from_utf8_lossy(&inside.stderr)
    );
    seen
}

/// The sockets' directory is under the state dir and the job's id, whose lengths are the
/// operator's and the job's: a path past the kernel's 108 bytes for a socket's address once
/// failed every job ("the job's network bridge exited before it was ready").
#[test]
fn the_bridge_carries_from_a_directory_of_any_length() {
    if which::which("bwrap").is_err() {
        eprintln!("bwrap not found: skipped");
        return;
    }
    let runner = env!("CARGO_BIN_EXE_quest-runner");
    let gateway = service("GATEWAY");
    let other = service("OTHER");
    let top = tempfile::tempdir().unwrap();
    // As `/var/lib/quest-runner` (21 bytes) and a 64-byte id make it, and far past that.
    let long = top
        .path()
        .join("var-lib-quest-runner-")
        .join("jobs")
        .join("i".repeat(64))
        .join("runner")
        .join("net")
        .join("d".repeat(200));
    std::fs::create_dir_all(&long).unwrap();
    assert!(long.as_os_str().len() > 300, "{}", long.display());
    let seen = through_the_bridge(runner, &long, gateway, other);
    assert!(seen.contains("GATEWAY"), "the bridged port answers: {seen}");
    assert!(seen.contains(&format!("FAILED-{other}")), "{seen}");
}
