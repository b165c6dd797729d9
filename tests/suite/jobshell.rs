//! opencode's commands as opencode runs them, without opencode: the job's sandbox made by the
//! runner's host code and srt's library (the real srt, bwrap, apply-seccomp), and commands run
//! through the runner's binary as opencode's shell. Exit status, stdout and stderr apart,
//! stdin, the working directory, signals, a shell killed outright, what a command leaves
//! running, the sandbox remade when a command makes a repository, and nothing left after.
//!
//! Needs bwrap, socat, rg, node and the pinned srt (`scripts/setup`).

use crate::support;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use quest_runner::agent::{self, AgentInputs, Launch};
use quest_runner::config::{Account, OpencodeAccount};
use quest_runner::job::{AgentKind, Job, Trust};
use quest_runner::jobshell::host::{JobSandbox, Prepared};
use quest_runner::sandbox::{self, Platform, PolicyInputs};
use quest_runner::workspace::WorkspacePaths;

fn pinned(var: &str, name: &str) -> PathBuf {
    std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("npm/node_modules/.bin")
            .join(name)
    })
}

/// One job's sandbox, with its shell.
struct Sandboxed {
    root: tempfile::TempDir,
    _helper: tempfile::TempDir,
    checkout: PathBuf,
    secret: PathBuf,
    shell: PathBuf,
    log: PathBuf,
    sandbox: Option<JobSandbox>,
}

impl Sandboxed {
    async fn start() -> Sandboxed {
        Sandboxed::start_with_path(None).await
    }

    /// The sandbox, its host started with `path` as its `PATH` (else the test's).
    async fn start_with_path(path: Option<&str>) -> Sandboxed {
        support::runner_runs_jobshell();
        let root = tempfile::Builder::new()
            .prefix("qr-jobshell-")
            .tempdir_in("/var/tmp")
            .unwrap();
        let r = std::fs::canonicalize(root.path()).unwrap();
        let helper = tempfile::Builder::new()
            .prefix("quest-srt-")
            .tempdir_in("/tmp")
            .unwrap();
        let state = r.join("state");
        let job_root = state.join("jobs/j1");
        let paths = WorkspacePaths {
            checkout: job_root.join("checkout"),
            bare_clone: state.join("repos/r.git"),
            git_store: job_root.join("git"),
            worktree_admin: job_root.join("git/worktrees/checkout"),
            temp_dir: r.join("tmp/quest-job-1"),
            job_dir: job_root.join("runner"),
            helper_tmp: std::fs::canonicalize(helper.path()).unwrap(),
            devshell_script: None,
        };
        for dir in [
            &paths.checkout,
            &paths.bare_clone.join("objects"),
            &paths.worktree_admin,
            &paths.temp_dir,
            &paths.job_dir,
        ] {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(paths.checkout.join(".git"), "gitdir: elsewhere\n").unwrap();
        let secret = state.join("secret");
        std::fs::write(&secret, "JOBSHELL-SECRET").unwrap();
        let policy = sandbox::plan(
            &paths,
            &PolicyInputs {
                platform: Platform::Linux,
                // No network: no proxy to start for this test.
                trust: Trust::Untrusted,
                extra_hosts: vec![],
                full_access_hosts: vec![],
                dependency_hosts: Vec::new(),
                state_dir: state.clone(),
                operator_home: None,
                private: vec![],
            },
        );
        let job = Job {
            id: "j1".into(),
            repo: "/r".into(),
            rev: "0".repeat(40),
            git_ref: None,
            trust: Trust::Untrusted,
            agent: AgentKind::Opencode,
            account: "oc".into(),
            prompt: String::new(),
            timeout: Duration::from_secs(600),
        };
        let account = Account::Opencode(OpencodeAccount {
            auth_file: Some(r.join("auth.json")),
            ..Default::default()
        });
        let srt = pinned("QUEST_RUNNER_SRT", "srt");
        let node = which::which("node").expect("node");
        let runner = PathBuf::from(env!("CARGO_BIN_EXE_quest-runner"));
        let launch: Launch = agent::plan(&AgentInputs {
            job: &job,
            account: &account,
            policy: &policy,
            workspace: &paths,
            system_prompt: "",
            program: Path::new("/bin/true"),
            srt: Some(&srt),
            node: Some(&node),
            runner: Some(&runner),
            srt_programs: quest_runner::agent::commands::SrtPrograms::find(),
            host_env: std::env::vars()
                .map(|(k, v)| match (k.as_str(), path) {
                    ("PATH", Some(path)) => (k, path.to_string()),
                    _ => (k, v),
                })
                .collect(),
            gateway: None,
        })
        .unwrap();
        launch.write_files().unwrap();
        let plan = launch.companion.clone().expect("a sandbox host");
        // Started by the first command, as a job's is when its agent's first command comes
        // before its first model request.
        let sandbox = Prepared::new(&plan)
            .unwrap()
            .spawn_when(std::future::pending());
        Sandboxed {
            root,
            _helper: helper,
            checkout: paths.checkout.clone(),
            secret,
            shell: paths.job_dir.join("quest-shell"),
            log: plan.log.clone(),
            sandbox: Some(sandbox),
        }
    }

    fn command(&self, script: &str) -> Command {
        let mut cmd = Command::new(&self.shell);
        cmd.args(["-c", script])
            .current_dir(&self.checkout)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    fn run(&self, script: &str) -> Output {
        self.command(script).output().unwrap()
    }

    /// Stops the sandbox; the files stay until the returned guard drops.
    async fn stop(mut self) -> tempfile::TempDir {
        if let Some(s) = self.sandbox.take() {
            s.stop().await;
        }
        self.root
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Processes whose command line starts with `name`.
fn processes(name: &str) -> Vec<u32> {
    quest_runner::procfs::pids()
        .into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.starts_with(name.as_bytes()))
        })
        .collect()
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Processes whose command line names `dir` (a job's sandbox host names its settings there).
fn processes_naming(dir: &std::path::Path) -> Vec<u32> {
    let dir = std::fs::canonicalize(dir).unwrap();
    let dir = dir.to_string_lossy().into_owned();
    quest_runner::procfs::pids()
        .into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&dir))
        })
        .collect()
}

/// The job's sandbox host starts when first needed (`util::on_demand`): not before a command
/// comes, so the agent's start has the CPU to itself, and the first command waits for it in
/// the socket's backlog rather than failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_starts_at_its_first_command() {
    let s = Sandboxed::start().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        processes_naming(s.root.path()),
        Vec::<u32>::new(),
        "started unasked"
    );
    let out = s.run("echo ran");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "ran\n");
    assert!(
        !processes_naming(s.root.path()).is_empty(),
        "no host serves the command"
    );
    let root = s.stop().await;
    wait_until("the host and its sandbox to stop", || {
        processes_naming(root.path()).is_empty()
    });
}

/// srt finds its programs with `which`, spawned with a one-second timeout under Node; on a
/// loaded host (CI's emulated guest) it timed out and srt refused to start ("bwrap not
/// installed"). The host answers `which` itself: a `which` slower than the timeout, which
/// makes srt's own lookup find nothing, does not stop the job's sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_which_slower_than_srts_timeout_does_not_stop_the_sandbox() {
    let slow = tempfile::tempdir().unwrap();
    let which = which::which("which").expect("which");
    let script = slow.path().join("which");
    std::fs::write(
        &script,
        format!("#!/bin/sh\nsleep 3\nexec {} \"$@\"\n", which.display()),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        slow.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // srt's lookup, alone, with that PATH: it gives up and finds nothing.
    let package = quest_runner::binaries::srt_package_dir(&pinned("QUEST_RUNNER_SRT", "srt"))
        .expect("srt's package");
    let lookup = Command::new(which::which("node").expect("node"))
        .args(["--input-type=module", "-e"])
        .arg(format!(
            "const {{ whichSync }} = await import('{}'); console.log(String(whichSync('sh')));",
            package.join("dist/utils/which.js").display()
        ))
        .env("PATH", &path)
        .output()
        .unwrap();
    assert_eq!(
        text(&lookup.stdout).trim(),
        "null",
        "{}",
        text(&lookup.stderr)
    );

    let s = Sandboxed::start_with_path(Some(&path)).await;
    let out = s.run("echo the-sandbox-runs");
    assert!(
        out.status.success() && text(&out.stdout).contains("the-sandbox-runs"),
        "{}{}\n{}",
        text(&out.stdout),
        text(&out.stderr),
        std::fs::read_to_string(&s.log).unwrap_or_default()
    );
    drop(s.stop().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_keep_a_shells_semantics() {
    let s = Sandboxed::start().await;
    let token = std::process::id();

    // Exit status, stdout and stderr apart, stdin.
    let mut child = s
        .command("cat; echo to-stderr >&2; exit 3")
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"from-stdin")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "from-stdin");
    assert_eq!(text(&out.stderr), "to-stderr\n");

    // The working directory, where the command started.
    std::fs::create_dir_all(s.checkout.join("sub dir")).unwrap();
    let out = s
        .command("pwd")
        .current_dir(s.checkout.join("sub dir"))
        .output()
        .unwrap();
    assert_eq!(
        text(&out.stdout).trim(),
        s.checkout.join("sub dir").to_string_lossy()
    );

    // What a command leaves running ends with it.
    let bg = format!("qr-jobshell-bg-{token}");
    let out = s.run(&format!("(exec -a {bg} sleep 300) & echo started"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    wait_until("the background process to end", || {
        processes(&bg).is_empty()
    });

    // A signal opencode sends its shell (a timeout's SIGTERM) reaches the command.
    let mut child = s
        .command("trap 'echo got-term; exit 7' TERM; echo up; sleep 60 & wait")
        .spawn()
        .unwrap();
    let mut first = [0u8; 3];
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut first)
        .unwrap();
    assert_eq!(&first, b"up\n");
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(text(&out.stdout), "got-term\n");

    // A shell killed outright (a timeout's SIGKILL): its command is killed too.
    let held = format!("qr-jobshell-held-{token}");
    let mut child: Child = s
        .command(&format!("exec -a {held} sleep 300"))
        .spawn()
        .unwrap();
    wait_until("the command to start", || !processes(&held).is_empty());
    child.kill().unwrap();
    let _ = child.wait();
    wait_until("the command to be killed", || processes(&held).is_empty());

    // Killed by a signal: the shell reports it as a shell does (128 + its number).
    let out = s.run("kill -KILL $$");
    assert_eq!(out.status.code(), Some(128 + 9), "{}", text(&out.stderr));

    let _ = s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_holds_and_is_remade_when_a_repository_appears() {
    let s = Sandboxed::start().await;
    // srt's rules: the state dir is denied, the AF_UNIX filter is on.
    let out = s.run(&format!("cat {}", s.secret.display()));
    assert!(!out.status.success() && !text(&out.stdout).contains("JOBSHELL-SECRET"));
    let out = s.run("python3 -c 'import socket; socket.socket(socket.AF_UNIX)' && echo MADE");
    assert!(!text(&out.stdout).contains("MADE"), "{}", text(&out.stderr));
    let out = s.run("echo ok > written && cat written");
    assert_eq!(text(&out.stdout), "ok\n", "{}", text(&out.stderr));

    // A repository one command makes has its hooks protected from the next.
    let out = s.run("git init -q nested && echo made");
    assert_eq!(text(&out.stdout), "made\n", "{}", text(&out.stderr));
    let out = s.run("echo evil > nested/.git/hooks/post-checkout && echo WRITTEN");
    assert!(
        !text(&out.stdout).contains("WRITTEN"),
        "{}",
        text(&out.stderr)
    );
    let log = std::fs::read_to_string(&s.log).unwrap_or_default();
    assert!(log.contains("srt wraps again"), "{log}");
    // And commands go on in the new sandbox.
    let out = s.run("echo still");
    assert_eq!(text(&out.stdout), "still\n", "{}", text(&out.stderr));

    let checkout = s.checkout.clone();
    let _files = s.stop().await;
    // Nothing of the sandbox is left: no process, no mount point in the checkout.
    assert!(processes("bwrap").iter().all(|p| {
        !std::fs::read(format!("/proc/{p}/cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&*checkout.to_string_lossy()))
    }));
    let mut left: Vec<String> = std::fs::read_dir(&checkout)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [".git", "nested", "written"],
        "srt's mount points are removed"
    );
}
