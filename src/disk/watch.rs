//! The disk watchdog: one per running job, from its agent's start to its end.
//!
//! Every [`TICK`] it asks the job's file systems how much is free (one `statvfs` each,
//! microseconds). It walks the job's trees ([`super::usage`]) when
//! - the file systems lost more than half of the job's remaining headroom since the last
//!   walk (someone is writing: it may be this job), or one is below the reserve — but not
//!   sooner after the last walk than twice its duration, so a large tree is never walked
//!   more than a third of the time;
//! - else, every [`INTERVAL_PER_WALK`]× the last walk's duration, between [`MIN_INTERVAL`]
//!   and [`MAX_INTERVAL`] (at most 1% of a core): growth the file systems' free space does
//!   not show, because something else freed as much meanwhile.
//!
//! It fires when the job has more than the limit on disk, or when a file system it writes is
//! below the reserve and, of this runner's running jobs on it ([`Registry`]), this one has
//! the most there. The caller stops the job; the result says `limit_fired: "disk"`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::usage::{self, Seen, Usage};
use super::{human, DiskLimits};

pub const TICK: Duration = Duration::from_millis(50);
pub const MIN_INTERVAL: Duration = Duration::from_secs(5);
pub const MAX_INTERVAL: Duration = Duration::from_secs(120);
/// The interval is this many times the last walk's duration.
pub const INTERVAL_PER_WALK: u32 = 100;

/// One tree a job writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tree {
    /// How the message names it: `checkout`, `temp dirs`, `job files`, `git data`.
    pub label: &'static str,
    pub path: PathBuf,
}

/// Why the watchdog fired, in one line for the result's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fired {
    pub message: String,
}

/// The running jobs of one runner and what each had on disk at its last walk, by file
/// system: which job the reserve stops.
#[derive(Debug, Default)]
pub struct Registry {
    /// Bytes by file system (`st_dev`), by job id.
    jobs: Mutex<HashMap<String, HashMap<u64, u64>>>,
}

impl Registry {
    fn set(&self, id: &str, by_dev: HashMap<u64, u64>) {
        self.lock().insert(id.to_string(), by_dev);
    }

    fn remove(&self, id: &str) {
        self.lock().remove(id);
    }

    /// Whether `id` has the most on file system `dev` of the jobs there (ties: the first by
    /// id, so exactly one job fires).
    fn largest_on(&self, dev: u64, id: &str) -> bool {
        let jobs = self.lock();
        let top = jobs
            .iter()
            .filter_map(|(job, by_dev)| Some((job, *by_dev.get(&dev)?)))
            .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(a.0)));
        top.is_some_and(|(top, _)| top == id)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<u64, u64>>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A job's watchdog; dropping it stops it.
pub struct Watchdog {
    fired: tokio::sync::watch::Receiver<Option<Fired>>,
    peak: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
    registry: Arc<Registry>,
    id: String,
}

impl Watchdog {
    /// Starts watching job `id`'s `trees`; `None` when `limits` has nothing to watch.
    pub fn start(
        id: &str,
        trees: Vec<Tree>,
        limits: DiskLimits,
        registry: Arc<Registry>,
    ) -> Option<Watchdog> {
        if limits.is_off() {
            return None;
        }
        let (tx, rx) = tokio::sync::watch::channel(None);
        let peak = Arc::new(AtomicU64::new(0));
        let state = State {
            id: id.to_string(),
            trees,
            limits,
            registry: registry.clone(),
            peak: peak.clone(),
            used: 0,
            free_at_walk: HashMap::new(),
            named_fs: None,
            last_walk: None,
            last_took: Duration::ZERO,
            interval: MIN_INTERVAL,
        };
        let task = tokio::spawn(watch(state, tx));
        Some(Watchdog {
            fired: rx,
            peak,
            task,
            registry,
            id: id.to_string(),
        })
    }

    /// Resolves when the watchdog fires (never, if it does not).
    pub async fn fired(&mut self) -> Fired {
        let fired = match self.fired.wait_for(Option::is_some).await {
            Ok(fired) => fired.clone(),
            Err(_) => None,
        };
        match fired {
            Some(fired) => fired,
            // The task ended without firing (it cannot, short of a panic): never resolves.
            None => std::future::pending().await,
        }
    }

    /// The most the job had on disk at one of the watchdog's walks.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.task.abort();
        self.registry.remove(&self.id);
    }
}

struct State {
    id: String,
    trees: Vec<Tree>,
    limits: DiskLimits,
    registry: Arc<Registry>,
    peak: Arc<AtomicU64>,
    /// What the job had at the last walk.
    used: u64,
    free_at_walk: HashMap<u64, u64>,
    /// The file systems of the trees, each with a path on it (found at the first tick).
    named_fs: Option<Vec<(u64, PathBuf)>>,
    last_walk: Option<Instant>,
    /// How long the last walk took.
    last_took: Duration,
    interval: Duration,
}

async fn watch(mut state: State, fired: tokio::sync::watch::Sender<Option<Fired>>) {
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        // A tick is a `statvfs` per file system; a walk reads the disk: off the async threads.
        let Some(file_systems) = state.walk_due() else {
            continue;
        };
        let (next, verdict) = match tokio::task::spawn_blocking(move || {
            let verdict = state.walk_and_judge(&file_systems);
            (state, verdict)
        })
        .await
        {
            Ok(done) => done,
            Err(_) => return, // aborted (the job ended) or panicked
        };
        state = next;
        if let Some(verdict) = verdict {
            tracing::warn!(job = %state.id, "{}", verdict.message);
            let _ = fired.send(Some(verdict));
            return;
        }
    }
}

/// One file system the job writes: its room now, and a path on it to name it by.
struct Fs {
    dev: u64,
    free: u64,
    reserve: u64,
    named: PathBuf,
}

impl State {
    /// One tick: walks if due, and says whether the watchdog fires.
    #[cfg(test)]
    fn tick(&mut self) -> Option<Fired> {
        let file_systems = self.walk_due()?;
        self.walk_and_judge(&file_systems)
    }

    /// The job's file systems now, when a walk is due (see the module's doc).
    fn walk_due(&mut self) -> Option<Vec<Fs>> {
        let file_systems = self.file_systems();
        let lost: u64 = file_systems
            .iter()
            .map(|fs| {
                self.free_at_walk
                    .get(&fs.dev)
                    .map_or(0, |was| was.saturating_sub(fs.free))
            })
            .sum();
        let low = file_systems.iter().any(|f| f.free < f.reserve);
        let headroom = self.limits.limit.map(|l| l.saturating_sub(self.used));
        let since = self.last_walk.map_or(Duration::MAX, |at| at.elapsed());
        let urgent = headroom.is_some_and(|h| lost.saturating_mul(2) > h) || low;
        if since >= self.interval || (urgent && since >= self.last_took * 2) {
            Some(file_systems)
        } else {
            None
        }
    }

    /// Walks the job's trees and says whether the watchdog fires.
    fn walk_and_judge(&mut self, file_systems: &[Fs]) -> Option<Fired> {
        let low: Vec<&Fs> = file_systems.iter().filter(|f| f.free < f.reserve).collect();
        let started = Instant::now();
        let (parts, by_dev) = self.walk();
        let took = started.elapsed();
        self.last_took = took;
        self.interval = (took * INTERVAL_PER_WALK).clamp(MIN_INTERVAL, MAX_INTERVAL);
        self.last_walk = Some(Instant::now());
        self.free_at_walk = file_systems.iter().map(|f| (f.dev, f.free)).collect();
        let used: u64 = parts.iter().map(|(_, u)| u.bytes).sum();
        self.used = used;
        self.peak.fetch_max(used, Ordering::Relaxed);
        self.registry.set(&self.id, by_dev.clone());

        let breakdown = breakdown(&parts);
        if let Some(limit) = self.limits.limit.filter(|l| used > *l) {
            return Some(Fired {
                message: format!(
                    "the disk limit fired: the job had {} on disk, over limits.disk ({}): {breakdown}",
                    human(used),
                    human(limit)
                ),
            });
        }
        let stopped = low
            .iter()
            .find(|fs| self.registry.largest_on(fs.dev, &self.id))?;
        Some(Fired {
            message: format!(
                "the disk reserve fired: the file system of {} had {} free, below the runner's \
                 reserve of {} (limits.disk_reserve), and of the runner's jobs this one had the \
                 most on it ({}; {} in all: {breakdown})",
                stopped.named.display(),
                human(stopped.free),
                human(stopped.reserve),
                human(by_dev.get(&stopped.dev).copied().unwrap_or(0)),
                human(used)
            ),
        })
    }

    /// The distinct file systems of the job's trees.
    /// The distinct file systems of the job's trees, found once (one tree each names it).
    fn file_systems(&mut self) -> Vec<Fs> {
        let named = self.named_fs.get_or_insert_with(|| {
            let mut found: Vec<(u64, PathBuf)> = Vec::new();
            for tree in &self.trees {
                if let Ok(st) = rustix::fs::stat(&tree.path) {
                    if !found.iter().any(|(dev, _)| *dev == st.st_dev) {
                        found.push((st.st_dev, tree.path.clone()));
                    }
                }
            }
            found
        });
        named
            .iter()
            .filter_map(|(dev, path)| {
                let st = rustix::fs::statvfs(path).ok()?;
                Some(Fs {
                    dev: *dev,
                    free: st.f_bavail.saturating_mul(st.f_frsize),
                    reserve: self
                        .limits
                        .reserve
                        .bytes(st.f_blocks.saturating_mul(st.f_frsize)),
                    named: path.clone(),
                })
            })
            .collect()
    }

    /// What each labelled part of the job holds now, and what it holds on each file system.
    fn walk(&mut self) -> (Vec<(&'static str, Usage)>, HashMap<u64, u64>) {
        let mut seen = Seen::with_roots(self.trees.iter().map(|t| t.path.as_path()));
        let mut parts: Vec<(&'static str, Usage)> = Vec::new();
        let mut by_dev: HashMap<u64, u64> = HashMap::new();
        for tree in &self.trees {
            let usage = usage::measure(&tree.path, &mut seen);
            if let Ok(st) = rustix::fs::lstat(&tree.path) {
                *by_dev.entry(st.st_dev).or_default() += usage.bytes;
            }
            add(&mut parts, tree.label, usage);
        }
        (parts, by_dev)
    }
}

fn add(parts: &mut Vec<(&'static str, Usage)>, label: &'static str, usage: Usage) {
    match parts.iter_mut().find(|(l, _)| *l == label) {
        Some((_, total)) => *total += usage,
        None => parts.push((label, usage)),
    }
}

/// `checkout 9.9 GiB, temp dirs 310 MiB, …`, largest first, and what could not be seen.
fn breakdown(parts: &[(&'static str, Usage)]) -> String {
    let mut sorted: Vec<&(&str, Usage)> = parts.iter().collect();
    sorted.sort_by_key(|part| std::cmp::Reverse(part.1.bytes));
    let mut text = sorted
        .iter()
        .map(|(label, u)| format!("{label} {}", human(u.bytes)))
        .collect::<Vec<_>>()
        .join(", ");
    let unseen: u64 = parts.iter().map(|(_, u)| u.unseen).sum();
    if unseen > 0 {
        text.push_str(&format!(
            " ({unseen} directories could not be measured: the figure is a lower bound)"
        ));
    }
    text
}

#[cfg(test)]
#[path = "watch_tests.rs"]
mod tests;
