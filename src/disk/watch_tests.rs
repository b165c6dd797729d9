use super::*;
use crate::disk::Reserve;
use std::io::Write;

fn write_file(path: &std::path::Path, bytes: usize) {
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(&vec![7u8; bytes]).unwrap();
    f.sync_all().unwrap();
}

fn state(id: &str, trees: Vec<Tree>, limits: DiskLimits, registry: &Arc<Registry>) -> State {
    let peak = Arc::new(AtomicU64::new(0));
    State::new(id, trees, limits, registry.clone(), peak)
}

/// Only a byte limit of `bytes`: no file limit, no reserve.
fn bytes_only(bytes: u64) -> DiskLimits {
    DiskLimits {
        limit: Some(bytes),
        files: None,
        reserve: NO_RESERVE,
        reserve_files: NO_RESERVE,
    }
}

fn tree(label: &'static str, path: &std::path::Path) -> Tree {
    Tree::new(label, path)
}

const NO_RESERVE: Reserve = Reserve::Off;

/// Only an inode reserve, so large that every file system is below it.
fn below_the_inode_reserve() -> DiskLimits {
    DiskLimits {
        limit: None,
        files: None,
        reserve: NO_RESERVE,
        reserve_files: Reserve::Amount(u64::MAX / 2),
    }
}

#[test]
fn the_limit_fires_past_the_limit_and_names_the_trees() {
    let dir = tempfile::tempdir().unwrap();
    let (checkout, temp) = (dir.path().join("checkout"), dir.path().join("temp"));
    std::fs::create_dir(&checkout).unwrap();
    std::fs::create_dir(&temp).unwrap();
    write_file(&checkout.join("small"), 100 << 10);
    let limits = bytes_only(2 << 20);
    let registry = Arc::new(Registry::default());
    let trees = vec![tree("checkout", &checkout), tree("temp dirs", &temp)];
    let mut s = state("j1", trees, limits, &registry);
    assert_eq!(s.tick(), None, "under the limit");
    write_file(&temp.join("big"), 3 << 20);
    // Not due yet, but the file system lost more than half the headroom: walked at once.
    let fired = s.tick().expect("over the limit");
    assert!(
        fired
            .message
            .starts_with("the disk limit fired: the job had 3.")
            && fired
                .message
                .contains("over limits.disk (2 MiB): temp dirs 3 MiB, checkout"),
        "{}",
        fired.message
    );
    assert!(s.peak.load(Ordering::Relaxed) > 3 << 20);
}

/// Of a shared directory (a repository's store), only what was added since the watchdog
/// listed it counts: a store larger than the limit does not fire, its growth past it does.
#[test]
fn a_shared_tree_counts_only_what_was_added() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    std::fs::create_dir(&store).unwrap();
    write_file(&store.join("aaaa-public"), 3 << 20);
    let registry = Arc::new(Registry::default());
    let trees = vec![Tree::added_to("repository store", &store)];
    let mut s = state("j1", trees, bytes_only(2 << 20), &registry);
    assert_eq!(s.tick(), None, "what was there before is not the job's");
    let built = store.join("bbbb-built.drv.chroot");
    std::fs::create_dir(&built).unwrap();
    write_file(&built.join("out"), 1 << 20);
    write_file(&store.join("cccc-out"), 2 << 20);
    let fired = s.tick().expect("over the limit");
    assert!(
        fired
            .message
            .contains("over limits.disk (2 MiB): repository store 3"),
        "{}",
        fired.message
    );
}

/// Below the reserve, the one job growing fastest on that file system fires; the others go on.
#[test]
fn below_the_reserve_the_growing_job_fires() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    write_file(&a.join("f"), 1 << 20);
    write_file(&b.join("f"), 3 << 20);
    // Every file system is below a reserve this large.
    let limits = DiskLimits {
        limit: None,
        files: None,
        reserve: Reserve::Amount(u64::MAX / 2),
        reserve_files: NO_RESERVE,
    };
    let registry = Arc::new(Registry::default());
    let mut small = state("small", vec![tree("checkout", &a)], limits, &registry);
    let mut large = state("large", vec![tree("checkout", &b)], limits, &registry);
    // The small job walks first: alone in the registry, it is the largest for now.
    let _ = small.tick();
    // small's count is from before large saw the file system low: large waits for a newer one.
    assert_eq!(large.tick(), None, "judged on a count older than the low");
    settle();
    assert_eq!(small.tick(), None, "the smaller job goes on");
    settle();
    write_file(&b.join("g"), 1 << 20);
    let fired = large.tick().expect("the growing job fires");
    assert!(
        fired
            .message
            .starts_with("the disk reserve fired: the file system of ")
            && fired.message.contains(
                "of the runner's jobs growing there this one grew fastest (4 MiB there; 4 MiB in all"
            ),
        "{}",
        fired.message
    );
    assert_eq!(small.tick(), None, "the smaller job goes on");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watchdog_fires_soon_after_a_job_writes_past_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let limits = bytes_only(8 << 20);
    let registry = Arc::new(Registry::default());
    let trees = vec![tree("temp dirs", dir.path())];
    let mut dog = Watchdog::start("j1", trees, limits, registry.clone()).unwrap();
    tokio::time::sleep(TICK * 2).await;
    let path = dir.path().join("fill");
    let writer = std::thread::spawn(move || {
        let mut f = std::fs::File::create(path).unwrap();
        for _ in 0..16 {
            f.write_all(&[1u8; 1 << 20]).unwrap();
        }
        f.sync_all().unwrap();
    });
    let fired = tokio::time::timeout(Duration::from_secs(5), dog.fired())
        .await
        .expect("fired within 5 s");
    writer.join().unwrap();
    assert!(
        fired.message.contains("over limits.disk (8 MiB)"),
        "{}",
        fired.message
    );
    assert!(dog.peak() > 8 << 20);
    drop(dog);
    assert!(
        registry.lock().is_empty(),
        "dropped: no longer a running job"
    );
    assert!(Watchdog::start(
        "j2",
        Vec::new(),
        DiskLimits {
            limit: None,
            files: None,
            reserve: NO_RESERVE,
            reserve_files: NO_RESERVE,
        },
        registry
    )
    .is_none());
}

/// `n` empty files `e-0`, `e-1`, … in `dir`, starting at `from`.
fn empty_files(dir: &std::path::Path, from: usize, n: usize) {
    for i in from..from + n {
        std::fs::File::create(dir.join(format!("e-{i}"))).unwrap();
    }
}

/// Only a file limit of `files`: no byte limit, no reserve.
fn files_only(files: u64) -> DiskLimits {
    DiskLimits {
        limit: None,
        files: Some(files),
        reserve: NO_RESERVE,
        reserve_files: NO_RESERVE,
    }
}

/// Thousands of empty files, which weigh next to nothing in bytes, fire the file limit with
/// the count in the message; as many under the limit do not.
#[test]
fn the_file_limit_fires_on_many_empty_files() {
    let dir = tempfile::tempdir().unwrap();
    let (checkout, temp) = (dir.path().join("checkout"), dir.path().join("temp"));
    std::fs::create_dir(&checkout).unwrap();
    std::fs::create_dir(&temp).unwrap();
    empty_files(&checkout, 0, 1500);
    let registry = Arc::new(Registry::default());
    let trees = vec![tree("checkout", &checkout), tree("temp dirs", &temp)];
    // A headroom of one file: the walk at once must not depend on what else the file system
    // does meanwhile (other tests free thousands of inodes; CI once saw them hide the 1,000
    // created here from a headroom of 498).
    let mut s = state("j1", trees, files_only(1503), &registry);
    assert_eq!(s.tick(), None, "1,502 entries: under the limit");
    assert_eq!(s.used.files, 1502, "the files and the two roots");
    empty_files(&temp, 0, 1000);
    // Not due yet, but the file system lost more than half the job's file headroom: walked
    // at once.
    let fired = s.tick().expect("over the file limit");
    assert_eq!(
        fired.message,
        "the disk limit fired: the job had 2,502 files on disk, over limits.disk_files (1,503): \
         checkout 1,501 files, temp dirs 1,001 files"
    );
    assert!(s.used.bytes < 1 << 20, "empty files: {:?}", s.used);
}

/// Below the inode reserve, the job whose files grow there fires, not the one with the most
/// bytes; the others go on.
#[test]
fn below_the_inode_reserve_the_job_growing_in_files_fires() {
    let dir = tempfile::tempdir().unwrap();
    let (bulky, many) = (dir.path().join("bulky"), dir.path().join("many"));
    std::fs::create_dir(&bulky).unwrap();
    std::fs::create_dir(&many).unwrap();
    write_file(&bulky.join("f"), 4 << 20);
    empty_files(&many, 0, 500);
    // Every file system with inodes is below a reserve this large.
    let limits = below_the_inode_reserve();
    let registry = Arc::new(Registry::default());
    let mut bulky = state("bulky", vec![tree("checkout", &bulky)], limits, &registry);
    let mut many = state("many", vec![tree("checkout", &many)], limits, &registry);
    let _ = bulky.tick();
    // bulky's count is from before many saw the file system low: many waits for a newer one.
    assert_eq!(many.tick(), None, "judged on a count older than the low");
    settle();
    assert_eq!(bulky.tick(), None, "the job with fewer files goes on");
    settle();
    empty_files(&dir.path().join("many"), 500, 10);
    let fired = many.tick().expect("the job growing in files fires");
    assert!(
        fired
            .message
            .starts_with("the disk reserve fired: the file system of ")
            && fired.message.contains(
                "inodes (limits.disk_reserve_files), and of the runner's jobs growing there this \
                 one grew fastest (511 inodes there; 511 inodes in all: checkout 511 files)"
            ),
        "{}",
        fired.message
    );
    assert_eq!(
        bulky.tick(),
        None,
        "the job with more bytes, fewer files, goes on"
    );
}

/// Fired within seconds of the job passing its file limit (timed from the file past it, so a
/// loaded machine's slow writes do not count).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watchdog_fires_soon_after_a_job_creates_files_past_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let registry = Arc::new(Registry::default());
    let trees = vec![tree("temp dirs", dir.path())];
    let mut dog = Watchdog::start("j1", trees, files_only(1000), registry).unwrap();
    tokio::time::sleep(TICK * 2).await;
    let path = dir.path().to_path_buf();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopping = stop.clone();
    // Empty files as fast as one thread makes them, until the watchdog fires (or 20,000).
    let writer = std::thread::spawn(move || {
        let (mut made, mut past) = (0, None);
        while !stopping.load(Ordering::Relaxed) && made < 20_000 {
            std::fs::File::create(path.join(format!("e-{made}"))).unwrap();
            made += 1;
            if made == 1000 {
                past = Some(Instant::now());
            }
        }
        (made, past)
    });
    let fired = tokio::time::timeout(Duration::from_secs(60), dog.fired())
        .await
        .expect("fired within 60 s");
    let fired_at = Instant::now();
    stop.store(true, Ordering::Relaxed);
    let (made, past) = writer.join().unwrap();
    let after = fired_at - past.expect("the writer passed the limit");
    eprintln!(
        "{made} files made, fired {} ms after the limit: {}",
        after.as_millis(),
        fired.message
    );
    assert!(after < Duration::from_secs(5), "{after:?}");
    assert!(
        fired
            .message
            .starts_with("the disk limit fired: the job had ")
            && fired
                .message
                .contains(" files on disk, over limits.disk_files (1,000)"),
        "{}",
        fired.message
    );
}

/// Another tick's walk is due at once below the reserve, but not sooner than twice the last
/// walk's duration: a moment between ticks.
fn settle() {
    std::thread::sleep(Duration::from_millis(20));
}

/// The issue-30 race: the filler's count is from its last walk, before it filled the file
/// system; the job beside, first to see the file system low, must not judge itself the
/// largest on that stale count and stop (as it did, leaving the filler running). It waits for
/// a count newer than the low, and the filler stops.
#[test]
fn below_the_reserve_a_count_from_before_the_low_stops_no_one() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let (filler, beside) = (dir.path().join("filler"), dir.path().join("beside"));
    std::fs::create_dir(&filler).unwrap();
    std::fs::create_dir(&beside).unwrap();
    empty_files(&beside, 0, 95);
    let limits = below_the_inode_reserve();
    let registry = Arc::new(Registry::default());
    // The filler's last walk, before its fill: one file.
    let dev = std::fs::metadata(&filler).unwrap().dev();
    let stale = HashMap::from([(dev, Held { bytes: 0, files: 1 })]);
    registry.set("filler", stale);
    settle();
    empty_files(&filler, 0, 500);
    let mut beside = state("beside", vec![tree("checkout", &beside)], limits, &registry);
    let mut filler = state("filler", vec![tree("checkout", &filler)], limits, &registry);
    assert_eq!(
        beside.tick(),
        None,
        "the job beside stopped on the filler's stale count"
    );
    settle();
    assert_eq!(
        filler.tick(),
        None,
        "beside's count is older than the filler's low"
    );
    settle();
    assert_eq!(beside.tick(), None, "the job beside stopped");
    settle();
    empty_files(&dir.path().join("filler"), 500, 10);
    let fired = filler.tick().expect("the filler stops");
    assert!(
        fired
            .message
            .contains("this one grew fastest (511 inodes there"),
        "{}",
        fired.message
    );
    settle();
    assert_eq!(beside.tick(), None);
}

/// The second issue-30 race: the filler, stopped, left the registry with its watchdog while
/// its files stayed until its workspace was removed, and the job beside, still below the
/// reserve, then found itself the largest and stopped too. A stopped job stays counted until
/// its `Counted` is dropped (after the workspace is removed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_job_stays_counted_until_its_workspace_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let (filler, beside) = (dir.path().join("filler"), dir.path().join("beside"));
    std::fs::create_dir(&filler).unwrap();
    std::fs::create_dir(&beside).unwrap();
    empty_files(&filler, 0, 500);
    empty_files(&beside, 0, 95);
    let limits = below_the_inode_reserve();
    let registry = Arc::new(Registry::default());
    let mut dog = Watchdog::start(
        "filler",
        vec![tree("checkout", &filler)],
        limits,
        registry.clone(),
    )
    .unwrap();
    let fired = tokio::time::timeout(Duration::from_secs(10), dog.fired())
        .await
        .expect("the filler, alone and largest, fires");
    assert!(
        fired.message.contains("the disk reserve fired"),
        "{}",
        fired.message
    );
    let counted = dog.stop();
    let mut beside = state("beside", vec![tree("checkout", &beside)], limits, &registry);
    settle();
    assert_eq!(
        beside.tick(),
        None,
        "the job beside stopped while the filler's files stay"
    );
    settle();
    assert_eq!(beside.tick(), None);
    drop(counted);
    settle();
    assert_eq!(
        beside.tick(),
        None,
        "at rest, the job beside is not stopped"
    );
    settle();
    empty_files(&dir.path().join("beside"), 95, 1);
    let alone = beside
        .tick()
        .expect("alone below the reserve and growing, the job beside fires");
    assert!(alone.message.contains("97 inodes"), "{}", alone.message);
}

/// Below the reserve, a job at rest is never the one stopped, however much it holds: the job
/// growing there is (issue 40: a job filling a tmpfs while counted small made the reserve stop
/// the innocent job beside it, the largest at rest).
#[test]
fn below_the_reserve_a_job_at_rest_is_never_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let (resting, growing) = (dir.path().join("resting"), dir.path().join("growing"));
    std::fs::create_dir(&resting).unwrap();
    std::fs::create_dir(&growing).unwrap();
    empty_files(&resting, 0, 500);
    empty_files(&growing, 0, 5);
    let limits = below_the_inode_reserve();
    let registry = Arc::new(Registry::default());
    let mut resting = state(
        "resting",
        vec![tree("checkout", &resting)],
        limits,
        &registry,
    );
    let mut filler = state(
        "growing",
        vec![tree("checkout", &growing)],
        limits,
        &registry,
    );
    // Its first count is all new; from its second on it is at rest.
    let _ = resting.tick();
    settle();
    assert_eq!(resting.tick(), None, "a job at rest stopped, alone");
    assert_eq!(filler.tick(), None, "judged on a count older than the low");
    settle();
    assert_eq!(resting.tick(), None, "a job at rest stopped");
    settle();
    empty_files(&growing, 5, 20);
    let fired = filler.tick().expect("the growing job fires");
    assert!(
        fired.message.contains("grew fastest (26 inodes there"),
        "{}",
        fired.message
    );
    settle();
    assert_eq!(resting.tick(), None, "a job at rest stopped");
}
