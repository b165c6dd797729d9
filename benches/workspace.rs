//! Benchmark of a job's time to a ready workspace, by repository size (issue 31).
//!
//! For 1k / 20k / 100k files (a repository generated here with `git fast-import`, under a temp
//! dir), a first job at the revision warms the shared clone; the second and third jobs at the
//! same revision are timed through the path every job takes: [`Workspace::prepare_in`] (the
//! job's git store, `git worktree add` and `reset --hard` of the revision), the handing of its
//! trees to the agent's identity when the runner is root ([`hand_over`], the same call
//! `run::confine` makes), and the disk watchdog's first walk of the job's trees; then the
//! workspace's drop (the removal a job's end pays before the next one starts). Beside them, in
//! the same run: a plain `git clone` of the shared clone (the baseline), and, as root, the
//! design measured for the next step: a read-only per-revision tree written once plus a
//! per-job overlay (kernel overlayfs mounted by the runner: bwrap 0.8.0 has no `--overlay`),
//! with `git status` in the job's worktree on it. Ratios against the baseline; nothing is asserted
//! on time.
//!
//! `cargo bench --bench workspace` (`QUEST_RUNNER_BENCH_FILES=1000,20000` for other sizes).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use quest_runner::disk::usage::{measure, Seen};
use quest_runner::job::{AgentKind, Job, Trust};
use quest_runner::run::confine::hand_over;
use quest_runner::state::StateDir;
use quest_runner::workspace::{revision_tree, Workspace};

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
    removal: Duration,
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

/// The design measured for the next step: a per-revision tree, written once
/// ([`revision_tree::ensure`]: the files, handed to the agent's identity when root, and the
/// index that describes them), and per job an overlay of it with an empty upper layer and
/// the index copied: (once, per-job ready, `git status` in it, per-job removal).
struct Overlay {
    once: Duration,
    ready: Duration,
    status: Duration,
    clean: bool,
    removal: Duration,
}

async fn overlay_design(
    state: &StateDir,
    bare: &Path,
    rev: &str,
    dir: &Path,
    jobs: usize,
) -> Vec<Overlay> {
    let start = Instant::now();
    let hand_over = rustix::process::geteuid()
        .is_root()
        .then_some(quest_runner::run::confine::chown_tree);
    let written = revision_tree::ensure(state, bare, rev, hand_over)
        .await
        .expect("the revision's tree");
    let once = start.elapsed();
    let (tree, index) = (written.files, written.index);
    (0..jobs)
        .map(|i| {
            let job = dir.join(format!("job{i}"));
            let start = Instant::now();
            let (upper, work, checkout) = (job.join("upper"), job.join("work"), job.join("co"));
            for d in [&upper, &work, &checkout] {
                std::fs::create_dir_all(d).unwrap();
            }
            // The job's store on the shared objects, its worktree's admin dir with the tree's
            // index, and the worktree's `.git` in the upper layer.
            let store = job.join("git");
            git(&job, &["init", "-q", "--bare", "git"]);
            std::fs::write(
                store.join("objects/info/alternates"),
                format!("{}\n", bare.join("objects").display()),
            )
            .unwrap();
            let co = checkout.to_string_lossy().into_owned();
            git(
                &store,
                &[
                    "worktree",
                    "add",
                    "-q",
                    "--detach",
                    "--no-checkout",
                    &co,
                    rev,
                ],
            );
            std::fs::rename(checkout.join(".git"), upper.join(".git")).unwrap();
            std::fs::copy(&index, store.join("worktrees/co/index")).unwrap();
            let opts = format!(
                "lowerdir={},upperdir={},workdir={}",
                tree.display(),
                upper.display(),
                work.display()
            );
            let mounted = Command::new("mount")
                .args(["-t", "overlay", "overlay", "-o", &opts])
                .arg(&checkout)
                .status()
                .unwrap();
            assert!(mounted.success(), "mount -t overlay");
            let ready = start.elapsed();
            let start = Instant::now();
            let out = Command::new("git")
                .current_dir(&checkout)
                .args(["--no-optional-locks", "status", "--porcelain"])
                .output()
                .unwrap();
            let status = start.elapsed();
            let clean = out.status.success() && out.stdout.is_empty();
            if !clean {
                let said = String::from_utf8_lossy(&out.stdout);
                eprintln!(
                    "overlay git status: {} {}",
                    said.lines().next().unwrap_or(""),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            let start = Instant::now();
            let _ = rustix::mount::unmount(&checkout, rustix::mount::UnmountFlags::DETACH);
            quest_runner::remove::remove_tree(&job).unwrap();
            Overlay {
                once,
                ready,
                status,
                clean,
                removal: start.elapsed(),
            }
        })
        .collect()
}

fn overlay_possible() -> bool {
    rustix::process::geteuid().is_root()
        && std::fs::read_to_string("/proc/filesystems").is_ok_and(|f| f.contains("overlay"))
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
    for n in 2..=3 {
        let t = one_job(&state, &temp, &job(&format!("j{n}"), &repo, &rev)).await;
        let (clone, clone_rm) = plain_clone(&bare, &rev, &dir.path().join(format!("plain{n}")));
        let chown = t
            .chown
            .map_or("not root".to_string(), |d| format!("{:.0} ms", ms(d)));
        println!(
            "workspace {files} files job {n}: ready {:.0} ms = {:.2}x git clone ({:.0} ms) \
             [checkout {:.0} ms, chown {chown}, first disk walk {:.0} ms]; removal at its end \
             {:.0} ms (git clone's tree: {:.0} ms)",
            ms(t.ready()),
            ms(t.ready()) / ms(clone),
            ms(clone),
            ms(t.checkout),
            ms(t.walk),
            ms(t.removal),
            ms(clone_rm),
        );
    }
    if !overlay_possible() {
        println!("workspace {files} files overlay design: not measured (needs root and overlayfs)");
        return;
    }
    let (clone, _) = plain_clone(&bare, &rev, &dir.path().join("plain-ov"));
    for (i, o) in overlay_design(&state, &bare, &rev, &dir.path().join("ov"), 2)
        .await
        .iter()
        .enumerate()
    {
        println!(
            "workspace {files} files overlay design job {}: ready {:.1} ms = {:.4}x git clone \
             ({:.0} ms); tree written once {:.0} ms; git status {:.0} ms ({}); removal {:.1} ms",
            i + 2,
            ms(o.ready),
            ms(o.ready) / ms(clone),
            ms(clone),
            ms(o.once),
            ms(o.status),
            if o.clean { "clean" } else { "NOT CLEAN" },
            ms(o.removal),
        );
    }
}

#[tokio::main]
async fn main() {
    for files in sizes() {
        bench_size(files).await;
    }
}
