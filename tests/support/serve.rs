//! `quest-runner serve` as the tests start it: on a runner's private state dir, polling every
//! 100 ms, its stderr in a log file of its own; stopped by a signal with a bounded wait, and
//! killed if still running when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::{unique_token, Runner};

/// An agent path that does not exist: for tests whose jobs never reach their agent.
pub const NO_AGENT: &str = "/nonexistent/claude";

/// The pinned Claude Code (`QUEST_RUNNER_CLAUDE`, or the checkout's npm/).
pub fn claude_binary() -> PathBuf {
    match std::env::var_os("QUEST_RUNNER_CLAUDE") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("npm/node_modules/.bin/claude"),
    }
}

pub struct Serve {
    child: Option<Child>,
    log: PathBuf,
}

impl Serve {
    /// `serve` with `claude` as its agent, its log in `log_dir`.
    pub fn start(runner: &Runner, claude: &Path, log_dir: &Path) -> Serve {
        Serve::start_with(runner, claude, log_dir, &[], |_| {})
    }

    /// [`Serve::start`] with more arguments to `serve`, and `adjust` applied to its command
    /// (a network namespace to start in).
    pub fn start_with(
        runner: &Runner,
        claude: &Path,
        log_dir: &Path,
        args: &[&str],
        adjust: impl FnOnce(&mut Command),
    ) -> Serve {
        let log = log_dir.join(format!("serve-{}.log", unique_token()));
        let mut cmd = runner.command();
        cmd.env("QUEST_RUNNER_CLAUDE", claude)
            .args(["serve", "--poll", "100ms"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        adjust(&mut cmd);
        Serve {
            child: Some(cmd.spawn().unwrap()),
            log,
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether the process is still running (not exited, not yet stopped).
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    /// Waits (at most 30 s) until the runner's log mentions `needle`.
    pub fn wait_log(&self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.log().contains(needle) {
            assert!(
                Instant::now() < deadline,
                "no {needle:?} in the log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, and the exit, which must come within 10 s (docs/service.md's promise).
    pub fn stop(&mut self) -> Duration {
        self.stop_with(libc::SIGTERM).1
    }

    /// Sends `sig` and waits for the exit, which must come within 10 s.
    pub fn stop_with(&mut self, sig: i32) -> (ExitStatus, Duration) {
        let mut child = self.child.take().unwrap();
        let started = Instant::now();
        unsafe { libc::kill(child.id() as i32, sig) };
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return (status, started.elapsed());
            }
            if started.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "serve did not exit within 10 s of signal {sig}:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
