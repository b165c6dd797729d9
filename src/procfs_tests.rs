use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use super::*;

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// SIGTERM first, SIGKILL to what ignores it, and the caller's children reaped: nothing of
/// either is left, not even a zombie.
#[test]
fn stop_terminates_then_kills_what_is_left_and_reaps_its_children() {
    let mut polite = Command::new("sleep").arg("30").spawn().unwrap();
    let mut stubborn = Command::new("sh")
        .args(["-c", "trap '' TERM; echo ready; exec sleep 30"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Once the shell has said so, its trap is set (before, SIGTERM would still kill it).
    let mut ready = String::new();
    BufReader::new(stubborn.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert_eq!(ready, "ready\n");
    let pids = [polite.id(), stubborn.id()];
    let how = Stopping {
        term_grace: Some(Duration::from_millis(300)),
        kill_rounds: 5,
        kill_for: None,
        pause: Duration::from_millis(20),
    };
    let sent = stop(
        || pids.iter().copied().filter(|p| alive(*p)).collect(),
        &how,
    );
    assert!(
        sent >= 3,
        "{sent} signal(s): SIGTERM to both, SIGKILL to one"
    );
    for pid in pids {
        assert!(!alive(pid), "{pid} is left");
    }
    // Reaped by `stop` already: these only fail (no such child).
    assert!(polite.try_wait().is_err() && stubborn.try_wait().is_err());
}
