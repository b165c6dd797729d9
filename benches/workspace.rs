//! Benchmark of a job's time to a ready workspace, by repository size (issue 31).
//!
//! For 1k / 20k / 100k files (a repository generated here with `git fast-import`, under a temp
//! dir), a first job at the revision warms the shared clone (and, as root, writes the
//! revision's shared tree); the second and third jobs at the same revision are timed through
//! the path every job takes: [`Workspace::prepare_in`] (as root: the job's git store and an
//! overlay of the shared tree, `workspace::overlay`; else a full checkout), the handing of its
//! trees to the agent's identity when the runner is root ([`hand_over`], the same call
//! `run::confine` makes), and the disk watchdog's first walk of the job's trees; then
//! `git status` in it, and the workspace's drop (the removal a job's end pays). Beside them, in
//! the same run: the full checkout every job took before (the same `JobGit::create` a runner
//! without root takes, its chown and walk), and a plain `git clone` of the shared clone (the
//! baseline). Then a new revision that changes ten files: its first job, whose tree is written
//! as a delta over the cached one (`workspace::tree_delta`), against the same job where no tree
//! is cached (the whole tree written). Ratios against the baseline; nothing is asserted on time.
//!
//! A runner that is not root layers checkouts too, in a user namespace of the job's own
//! (`workspace::owned_mount`): run as root with `QUEST_RUNNER_BENCH_USER=<user>`, the bench
//! runs again as that user, the service user's lines after root's.
//!
//! `cargo bench --bench workspace` (`QUEST_RUNNER_BENCH_FILES=1000,20000` for other sizes).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use quest_runner::disk::usage::{measure, Seen};
use quest_runner::job::{AgentKind, Job, Trust};
use quest_runner::run::confine::{chown_tree, hand_over};
use quest_runner::state::StateDir;
use quest_runner::workspace::job_git::JobGit;
use quest_runner::workspace::namespace::JobNamespace;
use quest_runner::workspace::Workspace;
use std::sync::Arc;

mod support;

use support::{git, ms};

/// Files per directory of the generated repository.
const PER_DIR: usize = 100;

fn sizes() -> Vec<usize> {
    std::env::var("QUEST_RUNNER_BENCH_FILES")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1_000, 20_000, 100_000])
}

/// A bare repository of `files` small files (`d<i>/f<j>.txt`), one commit on `main`, written
/// by `git fast-import` (no worktree: generating it costs no checkout of its own).
fn generate(dir: &Path, files: usize) -> (PathBuf, String) {
    let repo = dir.join("src.git");
    git(dir, &["init", "-q", "--bare", "-b", "main", "src.git"]);
    let mut child = Command::new("git")
        .current_dir(&repo)
        .args(["fast-import", "--quiet"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("git fast-import");
    {
        let mut w = std::io::BufWriter::new(child.stdin.take().unwrap());
        let msg = "bench";
        write!(
            w,
            "commit refs/heads/main\ncommitter b <b@example.invalid> 0 +0000\ndata {}\n{msg}\n",
            msg.len()
        )
        .unwrap();
        for i in 0..files {
            let body = format!("file {i} of the bench repository\n");
            writeln!(
                w,
                "M 644 inline d{}/f{}.txt\ndata {}\n{body}",
                i / PER_DIR,
                i % PER_DIR,
                body.len()
            )
            .unwrap();
        }
        w.flush().unwrap();
    }
    assert!(child.wait().unwrap().success(), "fast-import");
    let rev = git(&repo, &["rev-parse", "main"]);
    (repo, rev)
}

/// A commit on top of `main` that changes `changed` of its files; returns its revision.
fn change(repo: &Path, changed: usize) -> String {
    let mut child = Command::new("git")
        .current_dir(repo)
        .args(["fast-import", "--quiet"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("git fast-import");
    {
        let mut w = std::io::BufWriter::new(child.stdin.take().unwrap());
        let msg = "change";
        write!(
            w,
            "commit refs/heads/main\ncommitter b <b@example.invalid> 1 +0000\ndata {}\n{msg}\nfrom refs/heads/main^0\n",
            msg.len()
        )
        .unwrap();
        for i in 0..changed {
            let body = format!("file {i}, changed\n");
            writeln!(w, "M 644 inline d0/f{i}.txt\ndata {}\n{body}", body.len()).unwrap();
        }
        w.flush().unwrap();
    }
    assert!(child.wait().unwrap().success(), "fast-import");
    git(repo, &["rev-parse", "main"])
}

fn job(id: &str, repo: &Path, rev: &str) -> Job {
    Job {
        id: id.into(),
        repo: repo.to_string_lossy().into_owned(),
        rev: rev.into(),
        git_ref: Some("main".into()),
        trust: Trust::Trusted,
        agent: AgentKind::Claude,
        account: "a".into(),
        prompt: "p".into(),
        timeout: Duration::from_secs(3600),
    }
}

/// Where one job's time to a ready workspace went.
#[derive(Default)]
struct JobTimes {
    checkout: Duration,
    chown: Option<Duration>,
    walk: Duration,
    status: (Duration, bool),
    removal: Duration,
    layered: bool,
}

impl JobTimes {
    fn ready(&self) -> Duration {
        self.checkout + self.chown.unwrap_or_default() + self.walk
    }
}

async fn one_job(state: &StateDir, temp: &Path, job: &Job) -> JobTimes {
    let mut t = JobTimes::default();
    let start = Instant::now();
    let ws = Workspace::prepare_in(state, job, temp)
        .await
        .expect("prepare");
    t.checkout = start.elapsed();
    if rustix::process::geteuid().is_root() {
        let start = Instant::now();
        hand_over(&ws.paths).expect("hand over");
        t.chown = Some(start.elapsed());
    }
    let start = Instant::now();
    let trees = ws.disk_trees();
    let mut seen = Seen::with_roots(trees.iter().map(|t| t.path.as_path()));
    let bytes: u64 = trees
        .iter()
        .map(|t| measure(&t.path, &mut seen).bytes)
        .sum();
    t.walk = start.elapsed();
    assert!(bytes > 0);
    t.status = status(&ws.paths.checkout, ws.namespace());
    t.layered = ws.layer.is_some();
    let start = Instant::now();
    drop(ws);
    t.removal = start.elapsed();
    t
}

/// A plain `git clone` of the shared clone at `rev` (objects hard-linked, every file
/// written): the baseline; its removal beside it.
fn plain_clone(bare: &Path, rev: &str, dir: &Path) -> (Duration, Duration) {
    let start = Instant::now();
    let out = Command::new("git")
        .args(["clone", "-q", "--no-checkout"])
        .arg(bare)
        .arg(dir)
        .status()
        .unwrap();
    assert!(out.success());
    git(dir, &["checkout", "-q", "--detach", rev]);
    let cloned = start.elapsed();
    let start = Instant::now();
    quest_runner::remove::remove_tree(dir).unwrap();
    (cloned, start.elapsed())
}

/// The full checkout, as every job took it before layering and a runner without root still
/// does: the job's store and `worktree add` + `reset --hard` (`JobGit::create`), the chown of
/// the checkout when root, the first disk walk, and the removal.
async fn full_checkout(bare: &Path, rev: &str, dir: &Path) -> JobTimes {
    let mut t = JobTimes::default();
    std::fs::create_dir_all(dir).unwrap();
    let git = JobGit::at(dir);
    let start = Instant::now();
    git.create(bare, rev, "").await.expect("full checkout");
    t.checkout = start.elapsed();
    if rustix::process::geteuid().is_root() {
        let start = Instant::now();
        chown_tree(&git.checkout).expect("hand over");
        t.chown = Some(start.elapsed());
    }
    let start = Instant::now();
    let mut seen = Seen::with_roots([git.checkout.as_path(), git.store.as_path()]);
    assert!(measure(&git.checkout, &mut seen).bytes > 0);
    t.walk = start.elapsed();
    t.status = status(&git.checkout, None);
    let start = Instant::now();
    quest_runner::remove::remove_tree(dir).unwrap();
    t.removal = start.elapsed();
    t
}

/// `git status` in `checkout` (in the job's namespace, where only that holds it): its time,
/// and whether it was clean.
fn status(checkout: &Path, ns: Option<&Arc<JobNamespace>>) -> (Duration, bool) {
    let start = Instant::now();
    let mut git = Command::new("git");
    git.current_dir(checkout);
    if let Some(ns) = ns {
        ns.enter(&mut git);
    }
    let out = git
        .args([
            "-c",
            "safe.directory=*",
            "--no-optional-locks",
            "status",
            "--porcelain",
        ])
        .output()
        .unwrap();
    let took = start.elapsed();
    let clean = out.status.success() && out.stdout.is_empty();
    if !clean {
        eprintln!(
            "git status in {}: {} {}",
            checkout.display(),
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .next()
                .unwrap_or(""),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    (took, clean)
}

fn line(files: usize, n: usize, path: &str, t: &JobTimes, clone: Duration) -> String {
    let chown = t
        .chown
        .map_or("not root".to_string(), |d| format!("{:.1} ms", ms(d)));
    format!(
        "workspace {files} files job {n} {path}: ready {:.1} ms = {:.4}x git clone ({:.0} ms) \
         [checkout {:.1} ms, chown {chown}, first disk walk {:.1} ms]; git status {:.0} ms ({}); \
         removal at its end {:.1} ms",
        ms(t.ready()),
        ms(t.ready()) / ms(clone),
        ms(clone),
        ms(t.checkout),
        ms(t.walk),
        ms(t.status.0),
        if t.status.1 { "clean" } else { "NOT CLEAN" },
        ms(t.removal),
    )
}

async fn bench_size(files: usize) {
    let dir = tempfile::tempdir().unwrap();
    let gen_start = Instant::now();
    let (repo, rev) = generate(dir.path(), files);
    let generated = gen_start.elapsed();
    let state_root = dir.path().join("state");
    std::fs::create_dir_all(&state_root).unwrap();
    let state = StateDir::at(&state_root);
    let temp = dir.path().join("tmp");
    std::fs::create_dir_all(&temp).unwrap();
    // The first job clones the repository into the shared clone.
    let first = one_job(&state, &temp, &job("j1", &repo, &rev)).await;
    let bare = quest_runner::workspace::bare_clone_path(&state, &repo.to_string_lossy());
    println!(
        "workspace {files} files: generated in {:.0} ms; first job (clone included) ready in {:.0} ms",
        ms(generated),
        ms(first.ready())
    );
    let root = rustix::process::geteuid().is_root();
    let path = match (first.layered, root) {
        (true, true) => "layered (root)",
        (true, false) => "layered (service user: in the job's user namespace)",
        (false, _) => "full checkout (no overlay here: what jobs get)",
    };
    for n in 2..=3 {
        let t = one_job(&state, &temp, &job(&format!("j{n}"), &repo, &rev)).await;
        let full = full_checkout(&bare, &rev, &dir.path().join(format!("full{n}"))).await;
        let (clone, clone_rm) = plain_clone(&bare, &rev, &dir.path().join(format!("plain{n}")));
        println!("{}", line(files, n, path, &t, clone));
        println!("{}", line(files, n, "full checkout (old)", &full, clone));
        println!(
            "workspace {files} files job {n}: layered/full ready {:.4}x; git clone removal {:.0} ms",
            ms(t.ready()) / ms(full.ready()),
            ms(clone_rm)
        );
    }
    if first.layered {
        bench_new_revision(files, dir.path(), &repo, &state, &temp).await;
    }
}

/// The first job at a new revision near the cached one, its tree a delta, against the same
/// job in a state dir with the shared clone (hard-linked) and no tree: the whole tree written.
async fn bench_new_revision(files: usize, dir: &Path, repo: &Path, state: &StateDir, temp: &Path) {
    let rev = change(repo, 10);
    let near = one_job(state, temp, &job("near", repo, &rev)).await;
    let fresh_root = dir.join("state-without-trees");
    std::fs::create_dir_all(&fresh_root).unwrap();
    let linked = Command::new("cp")
        .arg("-al")
        .arg(state.root().join("repos"))
        .arg(&fresh_root)
        .status()
        .unwrap();
    assert!(linked.success(), "cp -al of the shared clone");
    let fresh = StateDir::at(&fresh_root);
    let whole = one_job(&fresh, temp, &job("whole", repo, &rev)).await;
    let deltas = std::fs::read_dir(state.root().join("trees"))
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|clone| {
            std::fs::read_dir(clone.path())
                .into_iter()
                .flatten()
                .flatten()
        })
        .filter(|t| t.path().join("delta").is_dir())
        .count();
    println!(
        "workspace {files} files, a new revision changing 10: first job ready {:.1} ms with its \
         tree a delta over the cached one ({deltas} delta tree), {:.1} ms writing the whole \
         tree = {:.4}x; git status {} / {}",
        ms(near.ready()),
        ms(whole.ready()),
        ms(near.ready()) / ms(whole.ready()),
        if near.status.1 { "clean" } else { "NOT CLEAN" },
        if whole.status.1 { "clean" } else { "NOT CLEAN" },
    );
}

/// The same bench as an unprivileged user (a runner that is its service user), when run as
/// root and `QUEST_RUNNER_BENCH_USER` names one: this executable, copied where that user may
/// run it, under `setpriv`, its lines after root's.
fn as_service_user() {
    let Ok(user) = std::env::var("QUEST_RUNNER_BENCH_USER") else {
        println!(
            "workspace: as root only (QUEST_RUNNER_BENCH_USER=<user> adds the service user's path)"
        );
        return;
    };
    let dir = tempfile::Builder::new()
        .prefix("quest-bench-")
        .tempdir()
        .unwrap();
    let exe = dir.path().join("workspace-bench");
    std::fs::copy("/proc/self/exe", &exe).unwrap();
    use std::os::unix::fs::PermissionsExt;
    for (path, mode) in [(dir.path(), 0o755), (exe.as_path(), 0o755)] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let id = |flag: &str| {
        let out = Command::new("id").args([flag, &user]).output().unwrap();
        assert!(out.status.success(), "no user {user}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let (uid, gid) = (id("-u"), id("-g"));
    println!("workspace: the same jobs as {user} (uid {uid}), a runner that is not root");
    let status = Command::new("setpriv")
        .args(["--reuid", &uid, "--regid", &gid, "--clear-groups", "--"])
        .arg(&exe)
        .current_dir("/")
        .env("TMPDIR", "/tmp")
        .env_remove("QUEST_RUNNER_BENCH_USER")
        .status()
        .unwrap();
    assert!(status.success(), "the bench as {user}: {status}");
}

#[tokio::main]
async fn main() {
    for files in sizes() {
        bench_size(files).await;
    }
    if rustix::process::geteuid().is_root() {
        as_service_user();
    }
}
