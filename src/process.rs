//! Child processes that never outlive the request that started them.
//!
//! The runner's children (`nix`, `git`, later the agents) each run in a process group of their
//! own. When the future that awaits one is dropped — a cancelled request, a timeout, SIGINT to
//! the runner — the group first gets SIGTERM, so `nix` can stop its builders and delete its
//! build directories, and SIGKILL after a short grace period. Waiting is bounded so a stuck
//! child cannot stall the runner's shutdown.

use std::io;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Adjusts a command the runner starts for a job before it starts (the suite's network
/// namespace, `serve`'s limits): one type for every stage that offers the seam.
pub type CommandHook = Arc<dyn Fn(&mut std::process::Command) + Send + Sync>;

use rustix::process::{Pid, Signal, WaitOptions};

/// Starts `cmd` so that it ends with the runner, however the runner ends: a kill -9 runs no
/// handler, no drop and no cleanup, and a helper left behind (the job's network bridge runs as
/// root) would live on under pid 1 for ever.
///
/// The kernel's parent-death signal (SIGKILL here) fires when the *thread* that forked the
/// child exits, not the process. A tokio worker that `block_in_place` retires (the bare
/// clone's lock in a workspace's cleanup), or a blocking-pool thread, exits while the runner
/// lives on, and took every child it had started with it: measured, a child started on a
/// worker was killed 10 s after that worker's `block_in_place`, which in `serve` would have
/// been another job's agent. So every such child is forked by one thread that lives as long
/// as the runner ([`spawner`]); the caller waits the few milliseconds a fork takes.
pub fn spawn_with_runner(mut cmd: tokio::process::Command) -> io::Result<tokio::process::Child> {
    die_with_runner(cmd.as_std_mut());
    // The runtime's context, for the child's reaping and `kill_on_drop`.
    let runtime = tokio::runtime::Handle::try_current().ok();
    let mut spawn = move || {
        let _entered = runtime.as_ref().map(|r| r.enter());
        cmd.spawn()
    };
    let (done_tx, done_rx) = std::sync::mpsc::sync_channel(1);
    let task: SpawnTask = Box::new(move || {
        let _ = done_tx.send(spawn());
    });
    let unsent = match spawner() {
        Some(spawner) => spawner.send(task).err().map(|unsent| unsent.0),
        None => Some(task),
    };
    // No spawner (it could not start, or ended): here, with this thread's risk.
    if let Some(task) = unsent {
        task();
    }
    done_rx
        .recv()
        .unwrap_or_else(|_| Err(io::Error::other("the runner's spawner thread ended")))
}

type SpawnTask = Box<dyn FnOnce() + Send>;

/// The thread that forks the runner's children: started on first use, never ended.
fn spawner() -> Option<&'static std::sync::mpsc::Sender<SpawnTask>> {
    static SPAWNER: std::sync::OnceLock<Option<std::sync::mpsc::Sender<SpawnTask>>> =
        std::sync::OnceLock::new();
    SPAWNER
        .get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel::<SpawnTask>();
            let started = std::thread::Builder::new()
                .name("quest-runner-spawner".into())
                .spawn(move || {
                    for task in rx {
                        // A task that panics fails its own spawn (its caller sees the
                        // channel close), not the thread every later spawn needs.
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(task));
                    }
                });
            match started {
                Ok(_) => Some(tx),
                Err(e) => {
                    tracing::warn!("starting the runner's spawner thread: {e}");
                    None
                }
            }
        })
        .as_ref()
}

/// The parent-death signal and its check, for a child forked by [`spawner`]: the runner dying
/// between the fork and the `prctl` would go unnoticed, so the child then checks that its
/// parent is still the runner and gives up if not.
fn die_with_runner(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let runner = rustix::process::getpid();
    // SAFETY: only async-signal-safe calls (prctl, getppid) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
            if rustix::process::getppid() != Some(runner) {
                return Err(io::Error::other(
                    "the runner ended before this process started",
                ));
            }
            Ok(())
        });
    }
}
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Command;

/// How long a job's helper process (its network proxy, its sandbox's host: each a Node
/// program) may take to come up before the job fails. It bounds a hung start, not a slow one:
/// one that fails exits and is reported at once. Under an emulated CPU (scripts/vm-test's
/// guest under TCG, each job in its memory-limited group) the proxy took 11–83 s to serve,
/// and a fixed 60 s failed jobs there that would have run: a hung helper costs a job these
/// minutes, a bound too tight costs every job on a slow host. Both log how long they took.
pub const HELPER_START_BOUND: Duration = Duration::from_secs(300);

/// How long a process group gets between SIGTERM and SIGKILL. Nix needs a moment to kill its
/// builder and remove its temporary build directory; a second bounds the whole teardown.
pub const TERMINATE_GRACE: Duration = Duration::from_millis(800);

/// How many of the last stderr lines are kept for error messages.
const STDERR_TAIL_LINES: usize = 40;

/// What a finished child produced.
#[derive(Debug)]
pub struct Captured {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    /// `stdout` stops at the limit the caller set ([`run_captured_upto`]); the program was
    /// stopped there, so its status says nothing about its output.
    pub stdout_truncated: bool,
    /// The last lines of stderr, which hold the program's own error message.
    pub stderr_tail: Vec<String>,
}

impl Captured {
    /// The program's error message on one line: from the first `error:` line of the tail
    /// onwards (Nix's `error (ignored):` lines are noise from concurrent cache access),
    /// whitespace folded. The full text is already in the log, line by line.
    pub fn error_message(&self) -> String {
        const MAX_CHARS: usize = 1000;
        let start = self
            .stderr_tail
            .iter()
            .position(|l| l.trim_start().starts_with("error:"))
            .unwrap_or(0);
        let folded = self.stderr_tail[start..]
            .iter()
            .flat_map(|l| l.split_whitespace())
            .collect::<Vec<_>>()
            .join(" ");
        match folded.char_indices().nth(MAX_CHARS) {
            _ if folded.is_empty() => format!("exited with {}", self.status),
            Some((cut, _)) => format!("{}…", &folded[..cut]),
            None => folded,
        }
    }
}

/// Runs `cmd` in its own process group, collecting stdout and logging each stderr line as it
/// comes under `log_target`. Dropping the returned future terminates the whole group.
pub async fn run_captured(cmd: Command, log_target: &'static str) -> io::Result<Captured> {
    run_captured_upto(cmd, log_target, u64::MAX).await
}

/// [`run_captured`], keeping at most `max_stdout` bytes of stdout: the program is stopped when
/// it writes more (its output then describes what a job wrote, which may be endless).
pub async fn run_captured_upto(
    mut cmd: Command,
    log_target: &'static str,
    max_stdout: u64,
) -> io::Result<Captured> {
    cmd.process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(false);
    let mut child = spawn_with_runner(cmd)?;
    let pid = child
        .id()
        .and_then(|id| Pid::from_raw(id as i32))
        .ok_or_else(|| io::Error::other("child exited before its pid was read"))?;
    let mut guard = GroupGuard { pid, armed: true };

    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| io::Error::other("child stdout missing"))?;
    let stderr = child
        .stderr
        .take()
        .ok_or_else(|| io::Error::other("child stderr missing"))?;

    let read_stdout = async move {
        // One byte past the limit tells a full stop from an output of exactly the limit.
        // Dropping the pipe here then ends a program that goes on writing (SIGPIPE).
        let mut buf = Vec::new();
        stdout
            .take(max_stdout.saturating_add(1))
            .read_to_end(&mut buf)
            .await
            .map(|_| buf)
    };
    let read_stderr = async {
        let mut tail = std::collections::VecDeque::new();
        let mut lines = BufReader::new(stderr).lines();
        while let Some(line) = lines.next_line().await? {
            log_line(log_target, &line);
            if tail.len() == STDERR_TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line);
        }
        Ok::<_, io::Error>(tail.into_iter().collect::<Vec<_>>())
    };
    let (mut stdout, stderr_tail, status) =
        tokio::try_join!(read_stdout, read_stderr, child.wait())?;
    guard.armed = false;
    let stdout_truncated = stdout.len() as u64 > max_stdout;
    if stdout_truncated {
        stdout.truncate(max_stdout as usize);
    }
    // The leader has exited; anything it left in its group (a stray helper) goes too.
    let _ = rustix::process::kill_process_group(pid, Signal::KILL);
    Ok(Captured {
        status,
        stdout,
        stdout_truncated,
        stderr_tail,
    })
}

fn log_line(target: &'static str, line: &str) {
    // `tracing` needs static targets, so the known ones are spelled out.
    match target {
        "git" => tracing::info!(target: "git", "{line}"),
        _ => tracing::info!(target: "nix", "{line}"),
    }
}

/// Terminates a process group when dropped while armed.
struct GroupGuard {
    pid: Pid,
    armed: bool,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            terminate_group(self.pid, TERMINATE_GRACE);
        }
    }
}

/// SIGTERM to the group, a bounded wait for the leader, then SIGKILL to whatever is left.
///
/// This blocks the calling thread for at most `grace`: it runs only when a request is being
/// abandoned, and the caller must not return before the children are gone (a test or an
/// operator checks right after for leftover processes and temp files).
pub fn terminate_group(pid: Pid, grace: Duration) {
    tracing::debug!(
        pid = pid.as_raw_nonzero().get(),
        "terminating process group"
    );
    let _ = rustix::process::kill_process_group(pid, Signal::TERM);
    let deadline = Instant::now() + grace;
    loop {
        match rustix::process::waitpid(Some(pid), WaitOptions::NOHANG) {
            Ok(Some(_)) | Err(_) => break, // reaped, or already reaped elsewhere
            Ok(None) if Instant::now() >= deadline => {
                tracing::warn!(
                    pid = pid.as_raw_nonzero().get(),
                    "process group ignored SIGTERM; killing it"
                );
                let _ = rustix::process::kill_process_group(pid, Signal::KILL);
                let _ = rustix::process::waitpid(Some(pid), WaitOptions::empty());
                break;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    // Helpers the leader started in its group but did not stop.
    let _ = rustix::process::kill_process_group(pid, Signal::KILL);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child the runner starts outlives the thread that asked for it. A worker that
    /// `block_in_place` retires exits (here after 50 ms idle); the control, forked by that
    /// worker itself, is killed by its parent-death signal then, which proves the worker
    /// exited; the child started through the spawner thread lives on.
    #[test]
    fn a_child_outlives_the_worker_that_started_it() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_keep_alive(Duration::from_millis(50))
            .enable_all()
            .build()
            .unwrap();
        let sleep = || {
            let mut cmd = Command::new("sleep");
            cmd.arg("60").kill_on_drop(true);
            cmd
        };
        let (mut control, mut started) = runtime.block_on(async move {
            tokio::spawn(async move {
                let mut control = sleep();
                die_with_runner(control.as_std_mut());
                let control = control.spawn().unwrap();
                let started = spawn_with_runner(sleep()).unwrap();
                // This worker hands its core to a new thread and is retired.
                tokio::task::block_in_place(|| std::thread::sleep(Duration::from_millis(300)));
                tokio::time::sleep(Duration::from_millis(10)).await;
                (control, started)
            })
            .await
            .unwrap()
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        let killed = loop {
            if let Some(status) = control.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "the control lives on: the worker never exited, which proves nothing"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(killed.signal(), Some(9), "{killed:?}");
        assert!(
            started.try_wait().unwrap().is_none(),
            "killed with the worker that asked for it"
        );
        runtime.block_on(async { started.kill().await }).unwrap();
    }

    #[tokio::test]
    async fn endless_output_stops_at_the_limit() {
        let mut cmd = Command::new("yes");
        cmd.arg("job-written");
        let out =
            tokio::time::timeout(Duration::from_secs(10), run_captured_upto(cmd, "git", 1000))
                .await
                .expect("stopped, not read for ever")
                .unwrap();
        assert!(out.stdout_truncated);
        assert_eq!(out.stdout.len(), 1000);
        let mut short = Command::new("echo");
        short.arg("hi");
        let out = run_captured_upto(short, "git", 3).await.unwrap();
        assert!(!out.stdout_truncated && out.status.success(), "{out:?}");
        assert_eq!(out.stdout, b"hi\n");
    }
}
