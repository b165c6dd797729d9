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
//! Bytes and files alike: the same `statvfs` gives free inodes, the same walk counts the
//! job's entries, and a job creating empty files (which cost no blocks on tmpfs) is walked as
//! soon as the file systems lost more than half its remaining file headroom.
//!
//! It fires when the job has more than the limit on disk (bytes, or files), or when a file
//! system it writes is below the reserve (of bytes, or of inodes) and, of this runner's
//! running jobs on it ([`Registry`]) that are growing there, this one grows fastest (bytes, or
//! files, a second between its last two walks; then the most there). A job at rest is never
//! stopped by the reserve, however much it holds: stopping it frees nothing the filler will
//! not take, and the filler goes on. The caller stops the job; the result says
//! `limit_fired: "disk"`.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::usage::{self, Seen, Usage};
use super::{count, human, DiskLimits};

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
    /// Entries of the tree's top directory that are not the job's: a directory the job shares
    /// (a repository's Nix store) counts only what was added to it since these were listed.
    pub before: Option<Arc<HashSet<OsString>>>,
}

impl Tree {
    /// All of `path` is the job's.
    pub fn new(label: &'static str, path: impl Into<PathBuf>) -> Tree {
        Tree {
            label,
            path: path.into(),
            before: None,
        }
    }

    /// Of the shared directory `path`, only the entries added from now on are the job's (a
    /// missing directory has none yet).
    pub fn added_to(label: &'static str, path: impl Into<PathBuf>) -> Tree {
        let path = path.into();
        let before = match std::fs::read_dir(&path) {
            Ok(entries) => entries.flatten().map(|e| e.file_name()).collect(),
            Err(_) => HashSet::new(),
        };
        Tree {
            label,
            path,
            before: Some(Arc::new(before)),
        }
    }

    /// What the job holds of the tree now.
    fn measure(&self, seen: &mut Seen) -> Usage {
        let Some(before) = &self.before else {
            return usage::measure(&self.path, seen);
        };
        let mut usage = Usage::default();
        let Ok(entries) = std::fs::read_dir(&self.path) else {
            return usage;
        };
        for entry in entries.flatten() {
            if !before.contains(&entry.file_name()) {
                usage += usage::measure(&entry.path(), seen);
            }
        }
        usage
    }
}

/// Why the watchdog fired, in one line for the result's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fired {
    pub message: String,
}

/// What a job holds on one file system.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Held {
    bytes: u64,
    files: u64,
}

/// Which of a file system's resources is short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resource {
    Bytes,
    Inodes,
}

type ByDev = HashMap<u64, Held>;

/// The running jobs of one runner and what each had on disk at its last walk, by file
/// system, and how fast that grew: which job the reserve stops.
#[derive(Debug, Default)]
pub struct Registry {
    /// Each job's last count, by job id.
    jobs: Mutex<HashMap<String, JobCount>>,
}

/// One job's count at its last walk.
#[derive(Debug)]
struct JobCount {
    /// Bytes and files by file system (`st_dev`).
    held: ByDev,
    /// What that grew by a second since the walk before (all of it, at the first walk).
    growth: ByDev,
    /// When the walk ended.
    at: Instant,
}

/// How long a job below the reserve waits for the others' walks to be newer than the moment
/// it saw the file system low, before it judges with what it has (a walk elsewhere that never
/// ends must not keep the reserve from firing).
const RESERVE_WAIT: Duration = Duration::from_secs(2);

/// Whether a job below the reserve stops.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// It has the most there.
    Stop,
    /// Another job has more.
    GoOn,
    /// Another job's count is older than the moment the file system went low: a job filling
    /// the disk since then would look small, and the wrong job would stop.
    Wait,
}

impl Registry {
    fn set(&self, id: &str, held: ByDev) {
        let at = Instant::now();
        let mut jobs = self.lock();
        let growth = match jobs.get(id) {
            None => held.clone(),
            Some(last) => {
                let ms = (at - last.at).as_millis().max(1) as u64;
                let rate = |now: u64, was: u64| now.saturating_sub(was).saturating_mul(1000) / ms;
                held.iter()
                    .map(|(dev, now)| {
                        let was = last.held.get(dev).copied().unwrap_or_default();
                        let grew = Held {
                            bytes: rate(now.bytes, was.bytes),
                            files: rate(now.files, was.files),
                        };
                        (*dev, grew)
                    })
                    .collect()
            }
        };
        jobs.insert(id.to_string(), JobCount { held, growth, at });
    }

    fn remove(&self, id: &str) {
        self.lock().remove(id);
    }

    /// Whether `id` grows fastest in `resource` on file system `dev` of the jobs growing
    /// there (ties: the most there, then the first by id, so exactly one job fires; none
    /// growing, none fires), judged only on counts newer than `low_since` (when `id` saw the
    /// file system below the reserve) until [`RESERVE_WAIT`] has passed.
    fn largest_on(&self, dev: u64, resource: Resource, id: &str, low_since: Instant) -> Verdict {
        let jobs = self.lock();
        let on_dev = || {
            jobs.iter().filter_map(|(job, count)| {
                let held = count.held.get(&dev)?.of(resource);
                let growth = count.growth.get(&dev).map_or(0, |g| g.of(resource));
                Some((job, (growth, held), count.at))
            })
        };
        let stale = on_dev().any(|(job, _, at)| job != id && at < low_since);
        if stale && low_since.elapsed() < RESERVE_WAIT {
            return Verdict::Wait;
        }
        let top = on_dev()
            .filter(|(_, (growth, _), _)| *growth > 0)
            .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(a.0)));
        match top {
            Some((top, _, _)) if top == id => Verdict::Stop,
            _ => Verdict::GoOn,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, JobCount>> {
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
    /// Whether dropping it removes the job from the registry ([`Watchdog::stop`] hands that
    /// to a [`Counted`]).
    counted: bool,
}

/// A stopped job still counted among the jobs on its file systems, with what it had at its
/// last walk, until this is dropped: its files stay until its workspace is removed, and a job
/// beside it that sees the file system below the reserve meanwhile must not find itself the
/// largest there and stop too (the reserve fired on the filler, then on the job beside).
pub struct Counted {
    registry: Arc<Registry>,
    id: String,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.registry.remove(&self.id);
    }
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
        let state = State::new(id, trees, limits, registry.clone(), peak.clone());
        let task = tokio::spawn(watch(state, tx));
        Some(Watchdog {
            fired: rx,
            peak,
            task,
            registry,
            id: id.to_string(),
            counted: true,
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

    /// Stops watching, keeping the job counted until the returned value is dropped: drop it
    /// once the job's trees are removed.
    pub fn stop(mut self) -> Counted {
        self.counted = false;
        Counted {
            registry: self.registry.clone(),
            id: self.id.clone(),
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.task.abort();
        if self.counted {
            self.registry.remove(&self.id);
        }
    }
}

struct State {
    id: String,
    trees: Vec<Tree>,
    limits: DiskLimits,
    registry: Arc<Registry>,
    peak: Arc<AtomicU64>,
    /// What the job had at the last walk.
    used: Held,
    /// Free bytes and inodes of each file system at the last walk.
    free_at_walk: HashMap<u64, Held>,
    /// The file systems of the trees, each with a path on it (found at the first tick).
    named_fs: Option<Vec<(u64, PathBuf)>>,
    last_walk: Option<Instant>,
    /// How long the last walk took.
    last_took: Duration,
    interval: Duration,
    /// Since when each file system below the reserve has been seen so.
    low_since: HashMap<u64, Instant>,
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

/// One file system the job writes: its room now (bytes and inodes), the reserve on it, and a
/// path on it to name it by.
struct Fs {
    dev: u64,
    free: Held,
    reserve: Held,
    named: PathBuf,
}

impl Fs {
    /// The resource it has less of than the reserve, if any (bytes first).
    fn short_of(&self) -> Option<Resource> {
        [Resource::Bytes, Resource::Inodes]
            .into_iter()
            .find(|r| self.free.of(*r) < self.reserve.of(*r))
    }
}

impl Held {
    fn of(self, resource: Resource) -> u64 {
        match resource {
            Resource::Bytes => self.bytes,
            Resource::Inodes => self.files,
        }
    }
}

impl State {
    fn new(
        id: &str,
        trees: Vec<Tree>,
        limits: DiskLimits,
        registry: Arc<Registry>,
        peak: Arc<AtomicU64>,
    ) -> State {
        State {
            id: id.to_string(),
            trees,
            limits,
            registry,
            peak,
            used: Held::default(),
            free_at_walk: HashMap::new(),
            named_fs: None,
            last_walk: None,
            last_took: Duration::ZERO,
            interval: MIN_INTERVAL,
            low_since: HashMap::new(),
        }
    }

    /// One tick: walks if due, and says whether the watchdog fires.
    #[cfg(test)]
    fn tick(&mut self) -> Option<Fired> {
        let file_systems = self.walk_due()?;
        self.walk_and_judge(&file_systems)
    }

    /// The job's file systems now, when a walk is due (see the module's doc).
    fn walk_due(&mut self) -> Option<Vec<Fs>> {
        let file_systems = self.file_systems();
        let mut lost = Held::default();
        for fs in &file_systems {
            if let Some(was) = self.free_at_walk.get(&fs.dev) {
                lost.bytes += was.bytes.saturating_sub(fs.free.bytes);
                lost.files += was.files.saturating_sub(fs.free.files);
            }
        }
        let now = Instant::now();
        self.low_since.retain(|dev, _| {
            file_systems
                .iter()
                .any(|f| f.dev == *dev && f.short_of().is_some())
        });
        for fs in file_systems.iter().filter(|f| f.short_of().is_some()) {
            self.low_since.entry(fs.dev).or_insert(now);
        }
        let low = !self.low_since.is_empty();
        // Half the headroom left under a limit was taken since the last walk.
        let near = |limit: Option<u64>, used: u64, lost: u64| {
            limit.is_some_and(|l| lost.saturating_mul(2) > l.saturating_sub(used))
        };
        let urgent = low
            || near(self.limits.limit, self.used.bytes, lost.bytes)
            || near(self.limits.files, self.used.files, lost.files);
        let since = self.last_walk.map_or(Duration::MAX, |at| at.elapsed());
        if since >= self.interval || (urgent && since >= self.last_took * 2) {
            Some(file_systems)
        } else {
            None
        }
    }

    /// Walks the job's trees and says whether the watchdog fires.
    fn walk_and_judge(&mut self, file_systems: &[Fs]) -> Option<Fired> {
        let started = Instant::now();
        let (parts, by_dev) = self.walk();
        let took = started.elapsed();
        self.last_took = took;
        self.interval = (took * INTERVAL_PER_WALK).clamp(MIN_INTERVAL, MAX_INTERVAL);
        self.last_walk = Some(Instant::now());
        self.free_at_walk = file_systems.iter().map(|f| (f.dev, f.free)).collect();
        let used = Held {
            bytes: parts.iter().map(|(_, u)| u.bytes).sum(),
            files: parts.iter().map(|(_, u)| u.entries).sum(),
        };
        self.used = used;
        self.peak.fetch_max(used.bytes, Ordering::Relaxed);
        self.registry.set(&self.id, by_dev.clone());

        if let Some(limit) = self.limits.limit.filter(|l| used.bytes > *l) {
            return Some(Fired {
                message: format!(
                    "the disk limit fired: the job had {} on disk, over limits.disk ({}): {}",
                    human(used.bytes),
                    human(limit),
                    breakdown(&parts, Resource::Bytes)
                ),
            });
        }
        if let Some(limit) = self.limits.files.filter(|l| used.files > *l) {
            return Some(Fired {
                message: format!(
                    "the disk limit fired: the job had {} files on disk, over limits.disk_files \
                     ({}): {}",
                    count(used.files),
                    count(limit),
                    breakdown(&parts, Resource::Inodes)
                ),
            });
        }
        let (stopped, short) = file_systems.iter().find_map(|fs| {
            let short = fs.short_of()?;
            let since = self.low_since.get(&fs.dev).copied().unwrap_or(started);
            let verdict = self.registry.largest_on(fs.dev, short, &self.id, since);
            (verdict == Verdict::Stop).then_some((fs, short))
        })?;
        let held = by_dev.get(&stopped.dev).copied().unwrap_or_default();
        let show = |n: Held| match short {
            Resource::Bytes => human(n.bytes),
            Resource::Inodes => format!("{} inodes", count(n.files)),
        };
        let field = match short {
            Resource::Bytes => "limits.disk_reserve",
            Resource::Inodes => "limits.disk_reserve_files",
        };
        Some(Fired {
            message: format!(
                "the disk reserve fired: the file system of {} had {} free, below the runner's \
                 reserve of {} ({field}), and of the runner's jobs growing there this one grew \
                 fastest ({} there; {} in all: {})",
                stopped.named.display(),
                show(stopped.free),
                show(stopped.reserve),
                show(held),
                show(used),
                breakdown(&parts, short)
            ),
        })
    }

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
        let limits = self.limits;
        named
            .iter()
            .filter_map(|(dev, path)| {
                let st = rustix::fs::statvfs(path).ok()?;
                Some(Fs {
                    dev: *dev,
                    free: Held {
                        bytes: st.f_bavail.saturating_mul(st.f_frsize),
                        files: st.f_favail,
                    },
                    reserve: Held {
                        bytes: limits
                            .reserve
                            .bytes(st.f_blocks.saturating_mul(st.f_frsize)),
                        files: limits.reserve_files.files(st.f_files),
                    },
                    named: path.clone(),
                })
            })
            .collect()
    }

    /// What each labelled part of the job holds now, and what it holds on each file system.
    fn walk(&mut self) -> (Vec<(&'static str, Usage)>, ByDev) {
        let mut seen = Seen::with_roots(self.trees.iter().map(|t| t.path.as_path()));
        let mut parts: Vec<(&'static str, Usage)> = Vec::new();
        let mut by_dev = ByDev::new();
        for tree in &self.trees {
            let usage = tree.measure(&mut seen);
            if let Ok(st) = rustix::fs::lstat(&tree.path) {
                let held = by_dev.entry(st.st_dev).or_default();
                held.bytes += usage.bytes;
                held.files += usage.entries;
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

/// `checkout 9.9 GiB, temp dirs 310 MiB, …` (or `checkout 5,998 files, …`), largest first,
/// and what could not be seen.
fn breakdown(parts: &[(&'static str, Usage)], by: Resource) -> String {
    let held = |u: &Usage| match by {
        Resource::Bytes => u.bytes,
        Resource::Inodes => u.entries,
    };
    let mut sorted: Vec<&(&str, Usage)> = parts.iter().collect();
    sorted.sort_by_key(|part| std::cmp::Reverse(held(&part.1)));
    let mut text = sorted
        .iter()
        .map(|(label, u)| match by {
            Resource::Bytes => format!("{label} {}", human(u.bytes)),
            Resource::Inodes => format!("{label} {} files", count(u.entries)),
        })
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
