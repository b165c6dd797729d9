//! The disk attempts: a job fills its file system beside a job that needs only a little room,
//! with bytes (`disk-fill`: 4 MiB files) and with inodes (`disk-fill-inodes`: empty files, which
//! cost no bytes, until the file system has no inode left). Both jobs are real jobs of a runner
//! with the suite's agent, sandbox and scripted model, run at once, on a state directory of
//! their own: a tmpfs small enough to fill (mounting one needs root; without root the attempts
//! are skipped and say so).
//!
//! - Control: the same pair with the disk limits and the reserves off. The filler fills the
//!   file system, and the job beside it cannot write its work: the harm must show.
//! - The run: the disk limit (`limits.disk`, `limits.disk_files`) stops the filler
//!   (`limit_fired: "disk"`), and the job beside it writes its work, commits and succeeds.
//! - The `no-disk-limit` mutation runs the pair with the limit off: the harm must show.
//!
//! Both jobs run the same script step (so the order in which their requests reach the model
//! does not matter): the filler's revision holds a file `fill-me`, the other's does not. Each
//! waits for a `go` file in its checkout, which the suite writes once both are running, so
//! the job beside is running the whole time the filler fills.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::attempts::Rule;
use super::fixture::Fixture;
use super::report::{AttemptReport, ControlReport};
use crate::fixture_git as git;
use crate::model_server::{ModelServer, Step};
use quest_runner::config::Config;
use quest_runner::disk::{DiskLimits, Reserve};
use quest_runner::job::{AgentKind, Job, Trust};
use quest_runner::run::{Cancel, JobResult, Outcome, RunHooks, Runner};
use quest_runner::state::StateDir;
use quest_runner::util::text::clip;

/// The disk pair's attempt, which the disk-limit mutation must let escape.
pub use super::mutation::DISK_FILL as ID;
pub const INODES_ID: &str = "disk-fill-inodes";
/// The pair's file system: large enough that a filler going flat out (~2 GB/s here) is
/// stopped well before it is full, small enough to fill in a second when nothing stops it.
const FS_SIZE: &str = "size=512m";
const LIMIT: u64 = 64 << 20;
/// The inode pair's: bytes to spare, and inodes for a filler to take in a second or two. A
/// job beside needs a few hundred (its clone, worktree, git data and the agent's files).
const INODES_FS: &str = "size=512m,nr_inodes=20000";
const FILES_LIMIT: u64 = 2000;
/// What the job beside writes and commits.
const WORK_BYTES: u64 = 4 << 20;

/// What the suite passes in.
pub struct Setup<'a> {
    pub fixture: &'a Fixture,
    pub server: &'a ModelServer,
    pub config: &'a Config,
    pub hooks: RunHooks,
    /// The suite's own processes in the model's network namespace, which outlive the jobs.
    pub helpers: &'a [rustix::process::RawPid],
    pub env_source: Vec<(String, String)>,
    pub agent: AgentKind,
    pub trust: Trust,
    /// Run the control pair (limit off) first.
    pub control: bool,
    /// The run itself has the limit off (the `no-disk-limit` mutation).
    pub unlimited: bool,
}

/// One pair's end.
struct Pair {
    filler: JobResult,
    beside: Option<JobResult>,
    /// What the job beside's command printed (its tool result).
    beside_output: String,
    /// The filler's command started (it waited for its `go`).
    filler_started: bool,
    /// The file system was full at some point.
    filled: bool,
    marker: String,
    /// Processes of the pair still there afterwards.
    left: usize,
    /// Workspaces (checkouts) left on the small file system.
    leftovers: Vec<PathBuf>,
}

impl Pair {
    /// The job beside did not get its work done.
    fn harmed(&self) -> bool {
        let done = self.beside.as_ref().is_some_and(|b| {
            b.outcome == Outcome::Succeeded
                && b.commits.len() == 1
                && self.beside_output.contains(&self.marker)
        });
        !done
    }

    fn stopped_by_the_limit(&self) -> bool {
        self.filler.limit_fired.as_deref() == Some("disk")
    }

    fn summary(&self) -> String {
        let beside = match &self.beside {
            Some(b) => format!(
                "{:?}, {} commit(s), {}",
                b.outcome,
                b.commits.len(),
                clip(&self.beside_output, 120)
            ),
            None => "never started".into(),
        };
        format!(
            "filler: {:?}{} ({}); beside: {beside}; file system filled: {}",
            self.filler.outcome,
            self.filler
                .limit_fired
                .as_deref()
                .map(|l| format!(", limit_fired {l}"))
                .unwrap_or_default(),
            clip(self.filler.message.as_deref().unwrap_or(""), 160),
            self.filled
        )
    }
}

/// Which resource the filler takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// 4 MiB files until ENOSPC, against `limits.disk`.
    Bytes,
    /// Empty files until ENOSPC, against `limits.disk_files`.
    Inodes,
}

impl Form {
    fn id(self) -> &'static str {
        match self {
            Form::Bytes => ID,
            Form::Inodes => INODES_ID,
        }
    }

    fn mount_options(self) -> &'static str {
        match self {
            Form::Bytes => FS_SIZE,
            Form::Inodes => INODES_FS,
        }
    }

    /// The runner's disk limits when limited: the form's limit, the default reserves.
    fn limits(self) -> DiskLimits {
        DiskLimits {
            limit: Some(LIMIT),
            files: (self == Form::Inodes).then_some(FILES_LIMIT),
            ..DiskLimits::default()
        }
    }

    /// The filler's loop: it ends when the disk refuses, with `$i` files written (each file
    /// under RLIMIT_FSIZE: the watchdog, not the per-file limit, must stop it).
    fn fill(self) -> &'static str {
        match self {
            Form::Bytes => {
                "i=0; while head -c 4194304 /dev/zero > fill-$i 2>/dev/null; do i=$((i+1)); done"
            }
            Form::Inodes => "i=0; while : 2>/dev/null > e-$i; do i=$((i+1)); done",
        }
    }

    /// The file system of `dir` is as full as the filler gets it.
    fn is_full(self, dir: &Path) -> bool {
        quest_runner::disk::space::space(dir).is_ok_and(|s| match self {
            Form::Bytes => s.free < 1 << 20,
            Form::Inodes => s.files_free < 16,
        })
    }

    fn what(self) -> String {
        match self {
            Form::Bytes => format!(
                "a job fills its file system ({}) beside a job that needs {} MiB",
                FS_SIZE.trim_start_matches("size="),
                WORK_BYTES >> 20
            ),
            Form::Inodes => format!(
                "a job creates empty files until its file system ({}) has no inode left, beside \
                 a job that needs {} MiB",
                INODES_FS.trim_start_matches("size=512m,"),
                WORK_BYTES >> 20
            ),
        }
    }
}

/// The attempts' reports (bytes, then inodes) and their controls. Without root (no tmpfs),
/// one control says they were skipped.
pub async fn attempt(s: &Setup<'_>) -> (Vec<AttemptReport>, Vec<ControlReport>) {
    let mut controls = Vec::new();
    if !rustix::process::geteuid().is_root() {
        controls.push(ControlReport::new(
            "disk-fill: skipped",
            true,
            "mounting the small file system it fills needs root".into(),
        ));
        return (Vec::new(), controls);
    }
    let revs = match disk_repo(s.fixture) {
        Ok(revs) => revs,
        Err(e) => {
            controls.push(ControlReport::new("disk-fill: its repository", false, e));
            return (Vec::new(), controls);
        }
    };
    let mut reports = Vec::new();
    for form in [Form::Bytes, Form::Inodes] {
        reports.extend(form_attempt(s, &revs, form, &mut controls).await);
    }
    (reports, controls)
}

/// One form's control pair (limits off) and run.
async fn form_attempt(
    s: &Setup<'_>,
    revs: &Revs,
    form: Form,
    controls: &mut Vec<ControlReport>,
) -> Option<AttemptReport> {
    let id = form.id();
    let harm = format!("{id} harms the job beside it without the disk limit");
    let mut control_harmed = None;
    if s.control {
        match pair(s, revs, form, false, "control").await {
            Ok(p) => {
                let harmed = p.harmed() && p.filled;
                control_harmed = Some(harmed);
                controls.push(ControlReport::new(&harm, harmed, p.summary()));
                controls.push(clean_control(id, "control", &p));
            }
            Err(e) => controls.push(ControlReport::new(&harm, false, e)),
        }
    }
    let run = match pair(s, revs, form, !s.unlimited, "run").await {
        Ok(p) => p,
        Err(e) => {
            controls.push(ControlReport::new(&format!("{id}: the pair ran"), false, e));
            return None;
        }
    };
    controls.push(ControlReport::new(
        &format!("{id}: the limit stops the filler, the job beside succeeds"),
        s.unlimited || (run.stopped_by_the_limit() && !run.harmed()),
        run.summary(),
    ));
    controls.push(clean_control(id, "run", &run));
    Some(AttemptReport {
        id,
        what: form.what(),
        rule: Rule::Disk,
        control_escaped: control_harmed,
        ran: run.filler_started && (run.stopped_by_the_limit() || run.filled),
        escaped: run.harmed() || !run.stopped_by_the_limit(),
        refused_by_runner: None,
        evidence: run.summary(),
        network: None,
    })
}

fn clean_control(id: &str, which: &str, p: &Pair) -> ControlReport {
    ControlReport::new(
        &format!("{id} ({which}): no process or workspace left"),
        p.left == 0 && p.leftovers.is_empty(),
        format!(
            "{} process(es); left: {:?}",
            p.left,
            p.leftovers.iter().map(|p| p.display()).collect::<Vec<_>>()
        ),
    )
}

/// The revisions of the pair: (the filler's, the other's).
struct Revs {
    repo: PathBuf,
    fill: String,
    beside: String,
}

fn disk_repo(fixture: &Fixture) -> Result<Revs, String> {
    let repo = fixture.path().join("disk-repo");
    std::fs::create_dir_all(&repo).map_err(|e| e.to_string())?;
    let io = |e: std::io::Error| e.to_string();
    std::fs::write(repo.join("README.md"), "beside\n").map_err(io)?;
    git(&repo, &["init", "-q", "-b", "main"])?;
    git(&repo, &["add", "-A"])?;
    git(&repo, &["commit", "-q", "-m", "beside"])?;
    let beside = git(&repo, &["rev-parse", "HEAD"])?;
    std::fs::write(repo.join("fill-me"), "this job fills its disk\n").map_err(io)?;
    git(&repo, &["add", "-A"])?;
    git(&repo, &["commit", "-q", "-m", "filler"])?;
    let fill = git(&repo, &["rev-parse", "HEAD"])?;
    Ok(Revs { repo, fill, beside })
}

/// The one step both jobs run. The filler writes files until the disk refuses
/// ([`Form::fill`]), then holds what it wrote; the other writes and commits its work.
/// The file each job of the pair writes in its checkout once it waits for its `go`.
const WAITING: &str = ".waiting-for-go";

fn step(token: &str, form: Form) -> Step {
    let fill = form.fill();
    // `$w`: the waiting processes' names are in their argv[0] only, not in the script text
    // that the command's own shell carries in its command line.
    // Each also says it waits with a file in its checkout: on gVisor's kernel the host sees
    // no process of the job's by its name, only the sandbox's.
    Step::bash(format!(
        "w=wait; if [ -e fill-me ]; then : > {WAITING}; \
           (exec -a \"fill-$w-{token}\" sh -c 'while [ ! -e go ]; do sleep 0.05; done'); \
           {fill}; echo FILLED-$i; (exec -a fill-hold sleep 300); \
         else : > {WAITING}; \
           (exec -a \"beside-$w-{token}\" sh -c 'while [ ! -e go ]; do sleep 0.05; done'); \
           {{ head -c {WORK_BYTES} /dev/urandom > work.bin && git add work.bin && \
              git commit -qm 'work beside the filler' && echo BESIDE-RAN-{token}; }} 2>&1; \
         fi"
    ))
}

/// Runs one pair on a small file system of its own: the runner of the pair, its two jobs,
/// the race between them, then what they left.
async fn pair(
    s: &Setup<'_>,
    revs: &Revs,
    form: Form,
    limited: bool,
    label: &str,
) -> Result<Pair, String> {
    let label = format!("{}{label}", if form == Form::Inodes { "i" } else { "" });
    let token = format!("{}{label}", s.fixture.token);
    let dir = s.fixture.path().join(format!("disk-{label}"));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let fs = Tmpfs::mount(&dir, form.mount_options())?;
    let state = StateDir::at(dir.join("state"));
    std::fs::create_dir_all(state.root()).map_err(|e| e.to_string())?;
    let runner = pair_runner(s, &state, limited.then(|| form.limits()));

    s.server
        .set_script(vec![step(&token, form), step(&token, form)]);
    let before = s.server.exchanges().len();
    let jobs = PairJobs {
        filler: pair_job(s, revs, "disk-fill", &revs.fill, &token),
        beside: pair_job(s, revs, "disk-beside", &revs.beside, &token),
        state,
        form,
    };
    let raced = race(&runner, &jobs, &dir, &token).await;
    let pair = collect(s, &jobs, raced, before, &token);
    drop(fs);
    Ok(pair)
}

/// A runner on the pair's state directory, with the suite's environment and hooks, and the
/// disk limits and reserves `limited` (`None`: all off).
fn pair_runner(s: &Setup<'_>, state: &StateDir, limited: Option<DiskLimits>) -> Runner {
    let mut config = s.config.clone();
    config.limits.disk = limited.unwrap_or(DiskLimits {
        limit: None,
        files: None,
        reserve: Reserve::Off,
        reserve_files: Reserve::Off,
    });
    Runner::new(state.clone(), config)
        .with_environment(s.env_source.clone(), s.fixture.operator_home.clone())
        .with_hooks(s.hooks.clone())
}

fn pair_job(s: &Setup<'_>, revs: &Revs, name: &str, rev: &str, token: &str) -> Job {
    Job {
        id: format!("{name}-{token}"),
        repo: revs.repo.display().to_string(),
        rev: rev.to_string(),
        git_ref: Some("main".into()),
        trust: s.trust,
        agent: s.agent,
        account: "main".into(),
        prompt: "Do the step.".into(),
        timeout: Duration::from_secs(180),
    }
}

/// The pair's two jobs, on the pair's state directory.
struct PairJobs {
    filler: Job,
    beside: Job,
    state: StateDir,
    form: Form,
}

impl PairJobs {
    fn checkout(&self, job: &Job) -> PathBuf {
        quest_runner::workspace::job_root(&self.state, &job.id).join("checkout")
    }
}

/// How the race between the two jobs ended.
struct Raced {
    filler: JobResult,
    beside: Option<JobResult>,
    filler_started: bool,
    filled: bool,
}

/// Runs both jobs at once. The job beside starts once the filler waits for its `go`; the
/// filler gets its `go` once the job beside waits for its own, and the job beside once the
/// filler has filled the file system or was stopped; the filler is cancelled once the job
/// beside is done.
async fn race(runner: &Runner, jobs: &PairJobs, dir: &Path, token: &str) -> Raced {
    let (filler_done, beside_done) = (AtomicBool::new(false), AtomicBool::new(false));
    let filler_started = AtomicBool::new(false);
    let (stop_filler, stopped) = tokio::sync::oneshot::channel::<()>();

    let filler = async {
        let cancel = async {
            let _ = stopped.await;
            Cancel::Terminate
        };
        let result = runner.run(&jobs.filler, cancel).await;
        filler_done.store(true, Ordering::SeqCst);
        result
    };
    let beside = async {
        let waiting = format!("fill-wait-{token}");
        let said = jobs.checkout(&jobs.filler).join(WAITING);
        let ready = wait_until(Duration::from_secs(120), || {
            filler_done.load(Ordering::SeqCst) || running(&waiting) || said.exists()
        })
        .await;
        let result = match ready && !filler_done.load(Ordering::SeqCst) {
            true => {
                filler_started.store(true, Ordering::SeqCst);
                Some(runner.run(&jobs.beside, std::future::pending()).await)
            }
            false => None,
        };
        beside_done.store(true, Ordering::SeqCst);
        result
    };
    let drive = async {
        let waiting = format!("beside-wait-{token}");
        let said = jobs.checkout(&jobs.beside).join(WAITING);
        wait_until(Duration::from_secs(120), || {
            beside_done.load(Ordering::SeqCst) || running(&waiting) || said.exists()
        })
        .await;
        // The job beside's `go` is made now and renamed later: on a file system with no inode
        // left the suite could not create it, and the job beside would wait, not fail.
        let beside = jobs.checkout(&jobs.beside);
        let _ = std::fs::write(beside.join("go-soon"), "");
        let _ = std::fs::write(jobs.checkout(&jobs.filler).join("go"), "");
        // Until the filler is stopped, or has filled the file system.
        let mut filled = false;
        wait_until(Duration::from_secs(60), || {
            filled |= jobs.form.is_full(dir);
            filler_done.load(Ordering::SeqCst) || filled
        })
        .await;
        let _ = std::fs::rename(beside.join("go-soon"), beside.join("go"));
        wait_until(Duration::from_secs(150), || {
            filled |= jobs.form.is_full(dir);
            beside_done.load(Ordering::SeqCst)
        })
        .await;
        let _ = stop_filler.send(());
        filled
    };
    let (filler, beside, filled) = tokio::join!(filler, beside, drive);
    Raced {
        filler,
        beside,
        filler_started: filler_started.load(Ordering::SeqCst),
        filled,
    }
}

/// The pair's end: what the job beside printed, and the processes and workspaces left
/// (read before the file system is unmounted).
fn collect(s: &Setup<'_>, jobs: &PairJobs, raced: Raced, before: usize, token: &str) -> Pair {
    let beside_output = s
        .server
        .tool_results_since(before)
        .into_iter()
        .map(|r| r.text)
        .collect::<Vec<_>>()
        .join("\n");
    let left = s
        .server
        .confined_processes()
        .iter()
        .filter(|p| !s.helpers.contains(p))
        .count();
    let leftovers = [&jobs.filler, &jobs.beside]
        .into_iter()
        .map(|j| jobs.checkout(j))
        .filter(|c| c.exists())
        .collect();
    Pair {
        filler: raced.filler,
        beside: raced.beside,
        beside_output,
        filler_started: raced.filler_started,
        filled: raced.filled,
        marker: format!("BESIDE-RAN-{token}"),
        left,
        leftovers,
    }
}

/// Polls `done` every 20 ms for at most `limit`; says whether it came true.
async fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether a process whose command line holds `token` runs.
fn running(token: &str) -> bool {
    quest_runner::procfs::pids().into_iter().any(|pid| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(token))
    })
}

/// A tmpfs mounted over a directory for the pair; unmounted (lazily: a process of a failed
/// run may still hold it) when dropped.
struct Tmpfs(CString);

impl Tmpfs {
    fn mount(dir: &Path, options: &str) -> Result<Tmpfs, String> {
        use rustix::mount::MountFlags;
        let target = CString::new(dir.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
        let data = CString::new(options).map_err(|e| e.to_string())?;
        let mounted = rustix::mount::mount(
            c"tmpfs",
            target.as_c_str(),
            c"tmpfs",
            MountFlags::NOSUID | MountFlags::NODEV,
            data.as_c_str(),
        );
        if let Err(e) = mounted {
            return Err(format!(
                "mounting a tmpfs on {}: {}",
                dir.display(),
                std::io::Error::from(e)
            ));
        }
        Ok(Tmpfs(target))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = rustix::mount::unmount(self.0.as_c_str(), rustix::mount::UnmountFlags::DETACH);
    }
}
