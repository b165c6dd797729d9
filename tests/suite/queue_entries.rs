//! What other programs drop into the directory queue, against the real binary: a FIFO, a
//! name that is not UTF-8, a huge file and a symbolic link are each set aside once with
//! their reason, without a read that could block (`serve` goes on claiming, and stops on
//! SIGTERM in time; `jobs` and `cancel` return) or fill the runner's memory. And a `cancel`
//! that fails on a full disk leaves the job as it was.
//!
//! The jobs here are refused at once when claimed (their agent's binary does not exist):
//! enough to see that `serve` claims them, with no model, sandbox or devShell involved.

use crate::support;

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::serve::{Serve, NO_AGENT};
use support::{Repo, Runner};

/// A state dir whose config has one Claude account, and a valid job for it at `rev`.
fn setup() -> (Runner, tempfile::TempDir, Repo, String) {
    let runner = Runner::new();
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("anthropic-key");
    std::fs::write(&key, "sk-test").unwrap();
    let config = serde_json::json!({
        "nix": {"options": {"substituters": ""}},
        "concurrency": 1,
        "accounts": {"main": {"agent": "claude", "api_key_file": key}},
    });
    std::fs::write(runner.state().join("config.json"), config.to_string()).unwrap();
    let repo = Repo::new();
    let rev = repo.commit(&[("README.md", "x")]);
    (runner, keys, repo, rev)
}

fn job(repo: &Repo, rev: &str, id: &str) -> String {
    serde_json::json!({
        "id": id, "repo": repo.src().to_string_lossy(), "rev": rev, "trust": "trusted",
        "agent": "claude", "account": "main", "prompt": "Do nothing.",
    })
    .to_string()
}

/// Drops a job file into `queue/` as another program would: a dot-name, then a rename.
fn drop_job(runner: &Runner, name: &std::ffi::OsStr, text: &str) {
    let queue = runner.state().join("queue");
    std::fs::create_dir_all(&queue).unwrap();
    std::fs::write(queue.join(".incoming"), text).unwrap();
    std::fs::rename(queue.join(".incoming"), queue.join(name)).unwrap();
}

/// Runs `cmd` to its end, which must come within 10 s (a hang is the failure looked for).
fn bounded(mut cmd: Command) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("{cmd:?} hung for 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn state_of(runner: &Runner, id: &str) -> Option<String> {
    let out = runner.command().args(["show", id]).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    v["state"].as_str().map(str::to_string)
}

/// Waits (at most 30 s) until job `id` has ended.
fn wait_ended(runner: &Runner, id: &str, serve: &Serve) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match state_of(runner, id) {
            Some(s) if s != "queued" && s != "running" => return s,
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "job {id} never ended:\n{}",
            serve.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The rejected files (not their reasons), and the reason of each.
fn rejected(runner: &Runner) -> Vec<(Vec<u8>, String)> {
    let dir = runner.state().join("serve/rejected");
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| !n.as_bytes().ends_with(b".reason"))
        .map(|n| {
            let mut reason = n.clone();
            reason.push(".reason");
            let reason = std::fs::read_to_string(dir.join(reason)).unwrap_or_default();
            (n.as_bytes().to_vec(), reason)
        })
        .collect();
    out.sort();
    out
}

fn queue_names(runner: &Runner) -> Vec<Vec<u8>> {
    std::fs::read_dir(runner.state().join("queue"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().as_bytes().to_vec())
        .collect()
}

#[test]
fn a_fifo_in_the_queue_blocks_nothing_and_serve_stops_on_sigterm_in_time() {
    let (runner, keys, repo, rev) = setup();
    let queue = runner.state().join("queue");
    std::fs::create_dir_all(&queue).unwrap();
    let fifo = queue.join("x.json");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());

    // Nothing waits for a writer that never comes.
    let out = bounded({
        let mut c = runner.command();
        c.args(["jobs", "--json"]);
        c
    });
    assert!(out.status.success(), "{out:?}");
    let out = bounded({
        let mut c = runner.command();
        c.args(["cancel", "x"]);
        c
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("a FIFO, not a regular file"), "{stderr}");
    assert_eq!(
        queue_names(&runner),
        [b"x.json".to_vec()],
        "cancel moved it"
    );

    let mut serve = Serve::start(&runner, Path::new(NO_AGENT), keys.path());
    drop_job(&runner, "after.json".as_ref(), &job(&repo, &rev, "after"));
    let ended = wait_ended(&runner, "after", &serve);
    assert_eq!(ended, "failed", "refused: its agent is missing");
    let log = serve.log();
    assert!(log.contains("claimed"), "{log}");
    let took = serve.stop();
    assert!(took < Duration::from_secs(10), "{took:?}");

    let rejected = rejected(&runner);
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert!(rejected[0].0.ends_with(b"-x.json"), "{rejected:?}");
    assert!(rejected[0].1.contains("a FIFO"), "{rejected:?}");
    let log = serve.log();
    assert_eq!(log.matches("rejected: a FIFO").count(), 1, "{log}");
    println!("serve exited {took:?} after SIGTERM");
}

/// The peak resident memory of process `pid`, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn a_non_utf8_name_a_huge_file_and_a_link_are_each_set_aside_once_with_the_reason() {
    let (runner, keys, repo, rev) = setup();
    let mut serve = Serve::start(&runner, Path::new(NO_AGENT), keys.path());
    // Serving (idle) first, for its memory before.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !serve.log().contains("serving") {
        assert!(Instant::now() < deadline, "{}", serve.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let idle = peak_rss_kib(serve.pid() as u32);

    let bad_name = std::ffi::OsStr::from_bytes(b"bad\xff.json");
    drop_job(&runner, bad_name, &job(&repo, &rev, "bad"));
    // 256 MiB, sparse: were it read, the runner's memory would grow by as much.
    let big = runner.state().join("queue/.big");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(256 << 20)
        .unwrap();
    std::fs::rename(&big, runner.state().join("queue/big.json")).unwrap();
    let outside = keys.path().join("linked.json");
    std::fs::write(&outside, job(&repo, &rev, "link")).unwrap();
    std::os::unix::fs::symlink(&outside, runner.state().join("queue/link.json")).unwrap();
    drop_job(&runner, "good.json".as_ref(), &job(&repo, &rev, "good"));

    wait_ended(&runner, "good", &serve);
    // Twenty more polls: a file not set aside would be rejected (and logged) again.
    std::thread::sleep(Duration::from_secs(2));
    let peak = peak_rss_kib(serve.pid() as u32);
    serve.stop();
    let log = serve.log();
    println!("serve's peak RSS: {idle} KiB idle, {peak} KiB after the 256 MiB file");
    assert!(
        peak < idle + 32 * 1024,
        "the huge file was read: {idle} -> {peak} KiB"
    );

    assert!(
        queue_names(&runner).is_empty(),
        "{:?}",
        queue_names(&runner)
    );
    let rejected = rejected(&runner);
    assert_eq!(rejected.len(), 3, "{rejected:?}");
    let reason_of = |suffix: &[u8]| {
        let found = rejected.iter().find(|(n, _)| n.ends_with(suffix));
        found.unwrap_or_else(|| panic!("{rejected:?}")).1.clone()
    };
    assert!(reason_of(b"-bad\\xff.json").contains("is not UTF-8"));
    assert!(reason_of(b"-big.json").contains("268435456 bytes; a job file is at most"));
    assert!(reason_of(b"-link.json").contains("symbolic link"));
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        job(&repo, &rev, "link"),
        "the link's target is untouched"
    );
    for file in ["bad\\xff.json", "big.json", "link.json"] {
        let warned = log
            .lines()
            .filter(|l| l.contains("WARN") && l.contains(file))
            .count();
        assert_eq!(warned, 1, "{file}:\n{log}");
    }
    let listed = runner.command().args(["jobs", "--json"]).output().unwrap();
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let states: Vec<(&str, &str)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|j| (j["id"].as_str().unwrap(), j["state"].as_str().unwrap()))
        .collect();
    assert!(
        states
            .iter()
            .all(|(id, s)| *s == "rejected" || *id == "good"),
        "{states:?}"
    );
}

/// A tmpfs on `dir` for the test's life.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("mount");
        assert!(status.success(), "mounting a tmpfs on {}", dir.display());
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fills the file system of `dir` (with `dir/filler`); returns the filler.
fn fill(dir: &Path) -> PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    while f.write_all(&[0u8; 4096]).is_ok() {}
    while f.write_all(&[0u8]).is_ok() {}
    path
}

#[test]
fn a_cancel_that_fails_on_a_full_disk_leaves_the_job_queued_as_it_was() {
    let (runner, _keys, repo, rev) = setup();
    let config = std::fs::read(runner.state().join("config.json")).unwrap();
    let _tmpfs = Tmpfs::mount(runner.state(), "1m");
    std::fs::write(runner.state().join("config.json"), &config).unwrap();
    let text = job(&repo, &rev, "c1");
    drop_job(&runner, "c1.json".as_ref(), &text);
    let filler = fill(runner.state());

    let out = runner.command().args(["cancel", "c1"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert_eq!(state_of(&runner, "c1").as_deref(), Some("queued"));
    let file = runner.state().join("queue/c1.json");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text, "rewritten");
    assert!(!runner.state().join("serve/cancel/c1").exists());

    std::fs::remove_file(filler).unwrap();
    let out = runner.command().args(["cancel", "c1"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let out = runner.command().args(["show", "c1"]).output().unwrap();
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["state"], "cancelled", "{shown}");
    assert_eq!(shown["result"]["outcome"], "cancelled", "{shown}");
}

#[test]
fn a_job_given_back_on_a_full_disk_is_requeued_and_the_error_says_what_is_missing() {
    use quest_runner::serve::queue::{FsQueue, JobState};
    use quest_runner::serve::Interruption;
    let (runner, _keys, repo, rev) = setup();
    let _tmpfs = Tmpfs::mount(runner.state(), "1m");
    let state = quest_runner::state::StateDir::at(runner.state());
    let queue = FsQueue::open(&state, Duration::from_secs(60)).unwrap();
    drop_job(&runner, "r1.json".as_ref(), &job(&repo, &rev, "r1"));
    let claimed = queue.claim_now().unwrap().expect("claimed");
    let filler = fill(runner.state());
    let why = Interruption {
        reason: "interrupted: the runner got SIGTERM".into(),
    };
    let err = queue.release_now(claimed, why).unwrap_err().to_string();
    assert!(
        err.contains("requeued job \"r1\", but without the end of its attempt"),
        "{err}"
    );
    assert!(err.contains("No space left on device"), "{err}");
    assert_eq!(queue.find_state("r1"), Some(JobState::Queued));
    std::fs::remove_file(filler).unwrap();
    let again = queue.claim_now().unwrap().expect("claimed again");
    assert_eq!(again.attempt, 2);
}

/// A job file the runner's user cannot read (another program's, written with a strict umask)
/// is set aside with its reason, once, and the jobs behind it are claimed: it is the oldest
/// in the queue, so putting it back as a transient error would stall the queue for good.
/// Needs a user other than root (root reads every file): run as root, serve runs as nobody.
#[test]
fn an_unreadable_file_is_set_aside_and_the_queue_goes_on() {
    if !rustix::process::geteuid().is_root() {
        println!("skipped: needs root, to run serve as another user");
        return;
    }
    let (runner, keys, repo, rev) = setup();
    let queue = runner.state().join("queue");
    std::fs::create_dir_all(&queue).unwrap();
    let first = queue.join("a.json");
    std::fs::write(&first, job(&repo, &rev, "a")).unwrap();
    std::fs::set_permissions(&first, std::os::unix::fs::PermissionsExt::from_mode(0o000)).unwrap();
    let older = Command::new("touch")
        .args(["-d", "1 minute ago"])
        .arg(&first)
        .status()
        .unwrap();
    assert!(older.success());
    drop_job(&runner, "good.json".as_ref(), &job(&repo, &rev, "good"));
    for tree in [runner.state(), keys.path()] {
        let chown = Command::new("chown")
            .args(["-R", "65534:65534"])
            .arg(tree)
            .status()
            .unwrap();
        assert!(chown.success());
    }
    let log = keys.path().join("serve.log");
    let mut serve = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_quest-runner"))
        .arg("--state-dir")
        .arg(runner.state())
        .args(["serve", "--poll", "100ms"])
        .env("QUEST_RUNNER_CLAUDE", "/nonexistent/claude")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while queue_names(&runner).iter().any(|n| n == b"good.json") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    unsafe { libc::kill(serve.id() as i32, libc::SIGTERM) };
    let _ = serve.wait();
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !queue_names(&runner).iter().any(|n| n == b"good.json"),
        "the job behind the unreadable file was never claimed:\n{log}"
    );
    let rejected = rejected(&runner);
    assert_eq!(rejected.len(), 1, "{rejected:?}\n{log}");
    assert!(rejected[0].0.ends_with(b"-a.json"), "{rejected:?}");
    assert!(
        rejected[0].1.contains("unreadable by the runner"),
        "{rejected:?}"
    );
    assert_eq!(log.matches("unreadable by the runner").count(), 1, "{log}");
    println!("set aside: {}", rejected[0].1.trim());
}

/// `jobs` says when no `serve` works the directory queue (`submit` succeeds with none): with
/// none ever started, and after a runner was killed outright (its mark is gone with it), but
/// not while one serves.
#[test]
fn jobs_says_when_no_serve_is_running() {
    let (runner, keys, repo, rev) = setup();
    let jobs_stderr = || {
        let out = bounded({
            let mut c = runner.command();
            c.arg("jobs");
            c
        });
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let queue = runner.state().join("queue");
    std::fs::create_dir_all(&queue).unwrap();
    std::fs::write(queue.join("w.json"), job(&repo, &rev, "w")).unwrap();
    let said = jobs_stderr();
    assert!(said.contains("no serve is running"), "{said}");

    let mut serve = Serve::start(&runner, Path::new(NO_AGENT), keys.path());
    let runners = runner.state().join("serve/runners");
    let mark = runners.join(format!("{}.lock", serve.pid()));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !mark.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        mark.exists(),
        "no mark of the running serve:\n{}",
        serve.log()
    );
    // While it serves, `jobs` does not warn.
    assert!(!jobs_stderr().contains("no serve is running"));

    // SIGKILL, as a crash would: the kernel releases its lock.
    let _ = serve.stop_with(libc::SIGKILL);
    std::fs::write(queue.join("v.json"), job(&repo, &rev, "v")).unwrap();
    let said = jobs_stderr();
    assert!(
        said.contains("no serve is running"),
        "after a kill -9: {said}"
    );
    assert!(!mark.exists(), "the dead runner's mark was left");
}
