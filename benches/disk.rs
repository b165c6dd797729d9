//! The cost of the disk limit (`limits.disk`), in one run:
//!
//! 1. one measure of a job's trees (the watchdog's walk) against GNU `du -s` of the same tree
//!    (the baseline: what an operator would run), for a checkout-sized tree and a large one;
//!    and the share of a core the watchdog then takes at its interval (100× the walk, 5-120 s);
//! 2. the watchdog's cost over a job that writes nothing: CPU time per second, for a tiny
//!    tree (its 50 ms ticks: one `statvfs` per file system) and a checkout-sized one (the
//!    ticks and the periodic walks);
//! 3. a job's own work under the watchdog: writing a tree (many small files and a few large
//!    ones) with and without a watchdog over it, alternating, as a ratio;
//! 4. how far a writer going flat out gets past the limit before the watchdog fires.
//!
//! `cargo bench --bench disk` (no root needed). Run on the 2-core machine, with other work on
//! it: the ratios matter, not the absolute times.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quest_runner::disk::usage::{measure, Seen};
use quest_runner::disk::watch::{Registry, Tree, Watchdog};
use quest_runner::disk::{DiskLimits, Reserve};

const ROUNDS: usize = 5;

/// A tree shaped like a repository checkout: `dirs` directories three levels deep, `per_dir`
/// files of 1-16 KiB in each.
fn make_tree(root: &Path, dirs: usize, per_dir: usize) -> usize {
    let mut files = 0;
    for d in 0..dirs {
        let dir = root.join(format!("a{}/b{}/c{d}", d % 7, d % 53));
        std::fs::create_dir_all(&dir).expect("mkdir");
        for f in 0..per_dir {
            let size = 1024 * (1 + (d * 31 + f * 17) % 16);
            std::fs::write(dir.join(format!("f{f}.rs")), vec![b'x'; size]).expect("write");
            files += 1;
        }
    }
    files
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn du(path: &Path) -> Duration {
    let started = Instant::now();
    let out = std::process::Command::new("du")
        .args(["-s", "-B1"])
        .arg(path)
        .output()
        .expect("du");
    assert!(out.status.success());
    started.elapsed()
}

fn walk(path: &Path) -> (Duration, u64) {
    let started = Instant::now();
    let usage = measure(path, &mut Seen::default());
    (started.elapsed(), usage.bytes)
}

fn walks(label: &str, root: &Path, files: usize) {
    // Warm the cache first: the watchdog walks a tree the job is using.
    walk(root);
    du(root);
    let mut ours = Vec::new();
    let mut base = Vec::new();
    for _ in 0..ROUNDS {
        ours.push(walk(root).0.as_secs_f64() * 1000.0);
        base.push(du(root).as_secs_f64() * 1000.0);
    }
    let (ours, base) = (median(ours), median(base));
    let interval_ms = (ours * 100.0).clamp(5000.0, 120_000.0);
    println!(
        "walk {label:<28} {files:>7} files  {ours:8.1} ms  du -s {base:8.1} ms  walk/du {:5.2}x  \
         watchdog at its interval ({:.1} s): {:.2}% of a core",
        ours / base,
        interval_ms / 1000.0,
        100.0 * ours / interval_ms
    );
}

/// CPU time (user + system) of this process so far.
fn cpu_time() -> Duration {
    // SAFETY: getrusage fills the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn trees(root: &Path) -> Vec<Tree> {
    vec![Tree::new("checkout", root)]
}

fn limits(bytes: u64) -> DiskLimits {
    DiskLimits {
        limit: Some(bytes),
        reserve: Reserve::Default,
        ..DiskLimits::default()
    }
}

fn idle_cost(rt: &tokio::runtime::Runtime, label: &str, root: &Path) {
    let span = Duration::from_secs(20);
    let before = cpu_time();
    rt.block_on(async { tokio::time::sleep(span).await });
    let baseline = cpu_time() - before;
    let dog = rt
        .block_on(async { Watchdog::start("idle", trees(root), limits(10 << 30), Arc::default()) });
    let before = cpu_time();
    rt.block_on(async { tokio::time::sleep(span).await });
    let watched = cpu_time() - before;
    drop(dog);
    let per_s = (watched.saturating_sub(baseline)).as_secs_f64() / span.as_secs_f64();
    println!(
        "watchdog over an idle job, {label:<22} {:.3} ms of CPU per second ({:.3}% of a core; \
         runtime alone {:.3} ms/s)",
        per_s * 1000.0,
        per_s * 100.0,
        baseline.as_secs_f64() * 1000.0 / span.as_secs_f64()
    );
}

/// A job's own writing: 4000 files of 4 KiB in 100 directories, and 8 files of 16 MiB.
fn workload(dir: &Path) -> Duration {
    let started = Instant::now();
    for d in 0..100 {
        let sub = dir.join(format!("d{d}"));
        std::fs::create_dir_all(&sub).expect("mkdir");
        for f in 0..40 {
            std::fs::write(sub.join(format!("f{f}")), [b'y'; 4096]).expect("write");
        }
    }
    let block = vec![b'z'; 1 << 20];
    for f in 0..8 {
        let mut file = std::fs::File::create(dir.join(format!("big{f}"))).expect("create");
        for _ in 0..16 {
            file.write_all(&block).expect("write");
        }
    }
    started.elapsed()
}

fn job_overhead(rt: &tokio::runtime::Runtime, base: &Path) {
    let mut with = Vec::new();
    let mut without = Vec::new();
    for round in 0..ROUNDS * 2 {
        let dir = base.join(format!("job-{round}"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let watched = round % 2 == 0;
        let dog = watched.then(|| {
            rt.block_on(async {
                Watchdog::start("job", trees(&dir), limits(10 << 30), Arc::default())
            })
        });
        // The checkout the job starts from, so the walks have something to do.
        make_tree(&dir.join("checkout"), 200, 25);
        let took = workload(&dir).as_secs_f64() * 1000.0;
        drop(dog);
        if watched {
            with.push(took)
        } else {
            without.push(took)
        }
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
    let (with, without) = (median(with), median(without));
    println!(
        "a job's writing (5000-file checkout, then 4000 small files + 128 MiB): watched {with:.0} ms, \
         unwatched {without:.0} ms, watched/unwatched {:.3}x",
        with / without
    );
}

fn overshoot(rt: &tokio::runtime::Runtime, base: &Path) {
    let limit: u64 = 256 << 20;
    let dir = base.join("flat-out");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let registry: Arc<Registry> = Arc::default();
    let mut dog = rt
        .block_on(async { Watchdog::start("fast", trees(&dir), limits(limit), registry) })
        .expect("watchdog");
    std::thread::sleep(Duration::from_millis(200));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (dir, stop) = (dir.clone(), stop.clone());
        std::thread::spawn(move || {
            let block = vec![0u8; 4 << 20];
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::fs::write(dir.join(format!("fill-{n}")), &block).expect("write");
                n += 1;
            }
            n * 4
        })
    };
    let started = Instant::now();
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(60), dog.fired())
            .await
            .expect("fired")
    });
    let fired_after = started.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let written = writer.join().expect("writer");
    println!(
        "flat-out writer (4 MiB files), limit {} MiB: fired after {:.0} ms at {} MiB measured \
         ({} MiB written by the time it was told to stop; {:.0} MiB/s)",
        limit >> 20,
        fired_after.as_secs_f64() * 1000.0,
        dog.peak() >> 20,
        written,
        written as f64 / fired_after.as_secs_f64()
    );
    drop(dog);
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

fn main() {
    let base: PathBuf = std::env::var_os("QUEST_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let work = tempfile::Builder::new()
        .prefix("qr-bench-disk-")
        .tempdir_in(&base)
        .expect("tempdir");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!(
        "in {} (ext4 here; set QUEST_BENCH_DIR to measure another file system)",
        work.path().display()
    );
    let checkout = work.path().join("checkout");
    let files = make_tree(&checkout, 500, 20);
    walks("checkout-sized tree", &checkout, files);
    let large = work.path().join("large");
    let files = make_tree(&large, 5000, 40);
    walks("large tree (node_modules-like)", &large, files);
    let tiny = work.path().join("tiny");
    make_tree(&tiny, 2, 5);
    idle_cost(&rt, "10 files (ticks):", &tiny);
    idle_cost(&rt, "10000 files (+ walks):", &checkout);
    job_overhead(&rt, work.path());
    overshoot(&rt, work.path());
}
