//! The queues soaked with faults, as an operator would meet them. The PostgreSQL queue: three
//! runners on state dirs of their own claiming 120 jobs submitted in waves, one killed (its work and
//! claims dropped, as kill -9 does) and restarted, the database stopped for five seconds
//! while another runner is killed and a third stopped (its jobs given back), cancels from a
//! fourth client. Then: no job lost, none run to its end twice, none run by two runners at
//! once, and nothing left (no job queued or running, no end waiting on disk).
//!
//! The queue, its leases, recovery and on-disk ends are the real ones against a real
//! PostgreSQL; a job's "run" is a sleep of 100-400 ms, 6 s for one in ten (tests/suite/serve_pg.rs
//! runs real agents).
//!
//! The directory queue likewise: three runner threads on one state dir, two killed mid-job
//! (their claim locks dropped) and recovered by the others, cancels, and a FIFO, a non-UTF-8
//! name, a 256 MiB file and a link dropped in, each set aside once.
//!
//! Ignored by default (about 40 s); scripts/test runs them and prints the figures.

use crate::support::postgres;
use crate::support::queue_jobs::{config, pg_config, pg_target, spec};

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use postgres::Postgres;
use quest_runner::run::{Cancel, JobResult, Outcome};
use quest_runner::serve::pg::{admin, PgQueue, Ticket};
use quest_runner::serve::{Claimed, Interruption, JobSource};
use quest_runner::state::StateDir;
use tokio::sync::watch;
use tokio::task::JoinSet;

const LEASE: Duration = Duration::from_secs(2);
const MAX_ATTEMPTS: u32 = 5;
/// How long a stopped runner waits for its jobs' ends to be recorded.
const GRACE: Duration = Duration::from_secs(3);

async fn submit_wave(pg: &Postgres, from: usize, count: usize) {
    let c = admin::connect(&pg_target(pg)).await.unwrap();
    for n in from..from + count {
        let id = format!("s{n:03}");
        admin::submit(&c, spec(&id), &pg_config(pg), Duration::from_secs(60))
            .await
            .unwrap();
    }
}

/// What the runners did, as the jobs themselves saw it.
#[derive(Default)]
struct Tally {
    /// Jobs whose run reached its end, and how often.
    completed: Mutex<HashMap<String, u32>>,
    /// Jobs being run now.
    running: Mutex<HashSet<String>>,
    /// Claims of a job another live run held.
    overlaps: AtomicUsize,
    /// Runs dropped by a kill of their runner.
    killed_mid_job: AtomicUsize,
}

/// Takes a job out of [`Tally::running`] however its run ends (an abort too).
struct Running(Arc<Tally>, String);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.lock().unwrap().remove(&self.1);
    }
}

/// One job's run: a sleep, watching for a cancel and for its runner's stop (then the job is
/// given back, as SIGTERM does).
async fn work(
    q: Arc<PgQueue>,
    tally: Arc<Tally>,
    claimed: Claimed<Ticket>,
    mut term: watch::Receiver<bool>,
) {
    let id = claimed.job.id.clone();
    if !tally.running.lock().unwrap().insert(id.clone()) {
        tally.overlaps.fetch_add(1, Ordering::SeqCst);
    }
    let running = Running(tally.clone(), id.clone());
    let n: u64 = id[1..].parse().unwrap();
    // One job in ten runs 6 s: long enough to be running when the outage's faults strike.
    let ms = if n % 10 == 7 {
        6000
    } else {
        100 + (n * 37) % 300
    };
    let until = Instant::now() + Duration::from_millis(ms);
    let job = spec(&id).validate(Duration::from_secs(60)).unwrap();
    let mut result = JobResult::new(&job);
    result.outcome = Outcome::Succeeded;
    while Instant::now() < until {
        if *term.borrow() {
            drop(running);
            let why = Interruption {
                reason: "interrupted: the runner got SIGTERM".into(),
            };
            let _ = q.release(claimed, why).await;
            return;
        }
        if q.cancel_requested(&id).await {
            result.outcome = Outcome::Cancelled(Cancel::Terminate);
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(25)) => {}
            _ = term.changed() => {}
        }
    }
    drop(running);
    if result.outcome == Outcome::Succeeded {
        *tally
            .completed
            .lock()
            .unwrap()
            .entry(id.clone())
            .or_default() += 1;
    }
    let _ = q.finish(claimed, result).await;
}

/// A runner: claims up to two jobs at a time, recovers dead runners' jobs every second.
/// Killed (`kill`), its runs are dropped where they are; stopped (`term`), they are given
/// back first.
struct Runner {
    kill: watch::Sender<bool>,
    term: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Runner {
    async fn start(pg: &Postgres, dir: &Path, tally: &Arc<Tally>) -> Runner {
        let q = loop {
            let opened = PgQueue::open(
                pg_target(pg),
                &StateDir::at(dir),
                &pg_config(pg),
                LEASE,
                Duration::from_secs(600),
            )
            .await;
            match opened {
                Ok(q) => break Arc::new(q),
                // The state dir's lock, while the killed process's tasks wind down.
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        let (kill, killed) = watch::channel(false);
        let (term, termed) = watch::channel(false);
        let task = tokio::spawn(serve(q, tally.clone(), killed, termed));
        Runner { kill, term, task }
    }

    async fn kill(self) {
        self.kill.send(true).unwrap();
        self.task.await.unwrap();
    }

    /// Like SIGTERM: the jobs are given back, and what is not recorded within the grace
    /// (the database is down) is left on disk for the next start.
    async fn stop(mut self) {
        self.term.send(true).unwrap();
        if tokio::time::timeout(GRACE, &mut self.task).await.is_err() {
            self.kill.send(true).unwrap();
            self.task.await.unwrap();
        }
    }
}

async fn serve(
    q: Arc<PgQueue>,
    tally: Arc<Tally>,
    mut killed: watch::Receiver<bool>,
    termed: watch::Receiver<bool>,
) {
    let _ = q.recover(MAX_ATTEMPTS).await;
    let mut jobs = JoinSet::new();
    let mut last_recovery = Instant::now();
    loop {
        if *killed.borrow() {
            jobs.abort_all();
            while jobs.join_next().await.is_some() {}
            return; // q dropped with every claim it held: no end, no release
        }
        if *termed.borrow() {
            loop {
                tokio::select! {
                    joined = jobs.join_next() => if joined.is_none() { return },
                    _ = killed.changed() => {
                        jobs.abort_all();
                        while jobs.join_next().await.is_some() {}
                        return;
                    }
                }
            }
        }
        while jobs.len() < 2 {
            match q.claim().await {
                Ok(Some(c)) => {
                    jobs.spawn(work(q.clone(), tally.clone(), c, termed.clone()));
                }
                _ => break,
            }
        }
        if last_recovery.elapsed() > Duration::from_secs(1) {
            let _ = q.recover(MAX_ATTEMPTS).await;
            last_recovery = Instant::now();
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            Some(_) = jobs.join_next(), if !jobs.is_empty() => {}
            _ = killed.changed() => {}
        }
    }
}

fn count(pg: &Postgres, condition: &str) -> usize {
    pg.sql(&format!(
        "SELECT count(*) FROM quest_runner.jobs WHERE {condition}"
    ))
    .parse()
    .unwrap()
}

fn pending_ends(dirs: &[PathBuf]) -> usize {
    dirs.iter()
        .map(|d| std::fs::read_dir(d.join("serve/pg-pending")).map_or(0, |r| r.count()))
        .sum()
}

async fn cancel(pg: &Postgres, id: &str) -> bool {
    let Ok(c) = admin::connect(&pg_target(pg)).await else {
        return false;
    };
    admin::cancel(&c, id).await.is_ok()
}

async fn sleep_s(s: f64) {
    tokio::time::sleep(Duration::from_secs_f64(s)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a soak of half a minute; scripts/test runs it"]
async fn the_postgres_queue_soaked_with_faults_loses_nothing_and_runs_nothing_twice() {
    let started = Instant::now();
    let mut pg = Postgres::start();
    let tally = Arc::new(Tally::default());
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let paths: Vec<PathBuf> = dirs.iter().map(|d| d.path().to_path_buf()).collect();
    submit_wave(&pg, 0, 60).await;
    let mut runners = Vec::new();
    for dir in &paths {
        runners.push(Some(Runner::start(&pg, dir, &tally).await));
    }
    let mut cancelled = 0;
    sleep_s(0.5).await;
    cancelled += cancel(&pg, "s005").await as usize + cancel(&pg, "s059").await as usize;
    sleep_s(1.0).await;
    // kill -9 of runner 0 mid-job, restarted a second later.
    runners[0].take().unwrap().kill().await;
    submit_wave(&pg, 60, 30).await;
    sleep_s(1.0).await;
    runners[0] = Some(Runner::start(&pg, &paths[0], &tally).await);
    cancelled += cancel(&pg, "s070").await as usize + cancel(&pg, "s089").await as usize;
    sleep_s(1.0).await;

    // The outage: runner 1 killed and runner 2 stopped during it.
    tokio::task::block_in_place(|| pg.stop());
    sleep_s(1.0).await;
    runners[1].take().unwrap().kill().await;
    sleep_s(1.0).await;
    runners[2].take().unwrap().stop().await;
    sleep_s(3.0).await;
    let kept = pending_ends(&paths);
    tokio::task::block_in_place(|| pg.start_again());
    for i in [1, 2] {
        runners[i] = Some(Runner::start(&pg, &paths[i], &tally).await);
    }
    submit_wave(&pg, 90, 30).await;
    cancelled += cancel(&pg, "s100").await as usize + cancel(&pg, "s119").await as usize;

    let deadline = Instant::now() + Duration::from_secs(120);
    while count(&pg, "state IN ('queued', 'running')") > 0 || pending_ends(&paths) > 0 {
        assert!(Instant::now() < deadline, "jobs left unfinished");
        sleep_s(0.2).await;
    }
    for r in runners.into_iter().flatten() {
        r.stop().await;
    }

    let total = count(&pg, "true");
    let done = count(&pg, "state = 'done'");
    let cancelled_rows = count(&pg, "state = 'cancelled'");
    let lost = 120 - count(&pg, "state IN ('done', 'cancelled')");
    let completed = tally.completed.lock().unwrap().clone();
    let twice: Vec<_> = completed.iter().filter(|(_, n)| **n > 1).collect();
    let requeued = count(&pg, "attempts > 1");
    let left = count(&pg, "state IN ('queued', 'running')") + pending_ends(&paths);
    let overlaps = tally.overlaps.load(Ordering::SeqCst);
    println!(
        "soak: {total} jobs, 3 runners, 2 kill -9 (one during a 5 s outage), 1 stopped during it, \
         {cancelled} cancels: {done} done, {cancelled_rows} cancelled, {requeued} requeued, \
         {kept} ends kept on disk through the outage; \
         {lost} lost, {} run twice, {overlaps} run by two at once, {left} left, in {:.0} s",
        twice.len(),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(total, 120);
    assert_eq!(lost, 0, "lost");
    assert!(twice.is_empty(), "run twice: {twice:?}");
    assert_eq!(overlaps, 0, "run by two runners at once");
    assert_eq!(left, 0, "left behind");
    assert!(
        requeued > 0,
        "the kills requeued nothing: the faults missed"
    );
    assert_eq!(
        done + cancelled_rows,
        120,
        "every job done or cancelled (no failed)"
    );
}

/// A directory-queue runner: a thread claiming one job at a time and recovering dead
/// runners' jobs every half second, until `stop`; `kill` drops its claim where it is.
fn fs_runner(
    queue: quest_runner::serve::queue::FsQueue,
    tally: Arc<Tally>,
    kill: Arc<std::sync::atomic::AtomicBool>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<()> {
    use quest_runner::serve::queue::made_up_result;
    std::thread::spawn(move || {
        let mut last_recovery = Instant::now();
        while !stop.load(Ordering::SeqCst) && !kill.load(Ordering::SeqCst) {
            if last_recovery.elapsed() > Duration::from_millis(500) {
                queue.recover_now(MAX_ATTEMPTS).unwrap();
                last_recovery = Instant::now();
            }
            let Some(claimed) = queue.claim_now().unwrap() else {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            };
            let id = claimed.job.id.clone();
            if !tally.running.lock().unwrap().insert(id.clone()) {
                tally.overlaps.fetch_add(1, Ordering::SeqCst);
            }
            let running = Running(tally.clone(), id.clone());
            let n: u64 = id[1..].parse().unwrap();
            let until = Instant::now() + Duration::from_millis(50 + (n * 37) % 150);
            let mut outcome = Outcome::Succeeded;
            while Instant::now() < until {
                if kill.load(Ordering::SeqCst) {
                    tally.killed_mid_job.fetch_add(1, Ordering::SeqCst);
                    return; // the claim (its lock) dropped with the thread: no end
                }
                if queue.cancel_pending(&id) {
                    outcome = Outcome::Cancelled(Cancel::Terminate);
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            drop(running);
            if outcome == Outcome::Succeeded {
                *tally
                    .completed
                    .lock()
                    .unwrap()
                    .entry(id.clone())
                    .or_default() += 1;
            }
            let result = made_up_result(&id, outcome, "soak");
            queue.finish_now(claimed, outcome, result).unwrap();
        }
    })
}

fn names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir).map_or(Vec::new(), |d| {
        d.flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    })
}

#[test]
#[ignore = "a soak of some seconds; scripts/test runs it"]
fn the_directory_queue_soaked_with_faults_loses_nothing_and_runs_nothing_twice() {
    use quest_runner::serve::queue::FsQueue;
    use std::sync::atomic::AtomicBool;
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir::at(dir.path());
    let open = || FsQueue::open(&state, Duration::from_secs(60)).unwrap();
    let config = config();
    let submitter = open();
    for n in 0..60 {
        submitter
            .submit(spec(&format!("s{n:03}")), &config)
            .unwrap();
    }
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let start =
        |kill: &Arc<AtomicBool>| fs_runner(open(), tally.clone(), kill.clone(), stop.clone());
    let kills: Vec<Arc<AtomicBool>> = (0..3).map(|_| Arc::default()).collect();
    let mut runners: Vec<_> = kills.iter().map(start).collect();

    // What other programs may drop in: none of it may stall or be claimed.
    let queue = dir.path().join("queue");
    let made = std::process::Command::new("mkfifo")
        .arg(queue.join("fifo.json"))
        .status()
        .unwrap();
    assert!(made.success());
    use std::os::unix::ffi::OsStrExt;
    let bad = std::ffi::OsStr::from_bytes(b"bad\xff.json");
    std::fs::write(queue.join(bad), "{}").unwrap();
    let big = std::fs::File::create(queue.join(".big")).unwrap();
    big.set_len(256 << 20).unwrap();
    std::fs::rename(queue.join(".big"), queue.join("big.json")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", queue.join("link.json")).unwrap();

    let mut cancelled = 0;
    let kill_one = |i: usize, runners: &mut Vec<std::thread::JoinHandle<()>>| {
        kills[i].store(true, Ordering::SeqCst);
        let dead = std::mem::replace(&mut runners[i], std::thread::spawn(|| {}));
        dead.join().unwrap();
    };
    std::thread::sleep(Duration::from_millis(500));
    for id in ["s003", "s050"] {
        cancelled += submitter.cancel(id).is_ok() as usize;
    }
    kill_one(0, &mut runners);
    for n in 60..90 {
        submitter
            .submit(spec(&format!("s{n:03}")), &config)
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(500));
    kill_one(1, &mut runners);
    let fresh: Vec<Arc<AtomicBool>> = (0..2).map(|_| Arc::default()).collect();
    runners.extend(fresh.iter().map(start));
    for id in ["s070", "s089"] {
        cancelled += submitter.cancel(id).is_ok() as usize;
    }

    let deadline = Instant::now() + Duration::from_secs(60);
    while !names(&queue).is_empty() || !names(&dir.path().join("running")).is_empty() {
        assert!(
            Instant::now() < deadline,
            "left: {:?} {:?}",
            names(&queue),
            names(&dir.path().join("running"))
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::SeqCst);
    for r in runners {
        r.join().unwrap();
    }

    let done = names(&dir.path().join("done")).len();
    let cancelled_files = names(&dir.path().join("cancelled")).len();
    let failed = names(&dir.path().join("failed")).len();
    let rejected = names(&dir.path().join("serve/rejected")).len() / 2;
    let completed = tally.completed.lock().unwrap().clone();
    let twice = completed.values().filter(|n| **n > 1).count();
    let overlaps = tally.overlaps.load(Ordering::SeqCst);
    let lost = 90 - done - cancelled_files;
    let requeued = names(&dir.path().join("done"))
        .iter()
        .filter(|n| {
            let text = std::fs::read_to_string(dir.path().join("done").join(n)).unwrap();
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            v["attempts"].as_array().unwrap().len() > 1
        })
        .count();
    let killed = tally.killed_mid_job.load(Ordering::SeqCst);
    let left = names(&queue).len()
        + names(&dir.path().join("running")).len()
        + names(&dir.path().join("serve/cancel")).len();
    println!(
        "soak (directory queue): 90 jobs, 3 runners, {killed} killed mid-job, 4 bad files, \
         {cancelled} cancels: {done} done ({requeued} after a requeue), {cancelled_files} \
         cancelled, {rejected} set aside; \
         {lost} lost, {twice} run twice, {overlaps} run by two at once, {left} left, in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!((lost, failed), (0, 0), "lost or failed");
    assert_eq!(twice, 0, "run twice");
    assert_eq!(overlaps, 0, "run by two at once");
    assert_eq!(left, 0, "left behind");
    assert_eq!(rejected, 4, "the bad files set aside, each once");
    assert!(
        killed > 0 && requeued > 0,
        "the kills missed: {killed}, {requeued}"
    );
}
