use super::*;
use crate::disk::Reserve;
use std::io::Write;

fn write_file(path: &std::path::Path, bytes: usize) {
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(&vec![7u8; bytes]).unwrap();
    f.sync_all().unwrap();
}

fn state(id: &str, trees: Vec<Tree>, limits: DiskLimits, registry: &Arc<Registry>) -> State {
    State {
        id: id.into(),
        trees,
        limits,
        registry: registry.clone(),
        peak: Arc::new(AtomicU64::new(0)),
        used: 0,
        free_at_walk: HashMap::new(),
        named_fs: None,
        last_walk: None,
        last_took: Duration::ZERO,
        interval: MIN_INTERVAL,
    }
}

fn tree(label: &'static str, path: &std::path::Path) -> Tree {
    Tree {
        label,
        path: path.to_path_buf(),
    }
}

const NO_RESERVE: Reserve = Reserve::Off;

#[test]
fn the_limit_fires_past_the_limit_and_names_the_trees() {
    let dir = tempfile::tempdir().unwrap();
    let (checkout, temp) = (dir.path().join("checkout"), dir.path().join("temp"));
    std::fs::create_dir(&checkout).unwrap();
    std::fs::create_dir(&temp).unwrap();
    write_file(&checkout.join("small"), 100 << 10);
    let limits = DiskLimits {
        limit: Some(2 << 20),
        reserve: NO_RESERVE,
    };
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

/// Below the reserve, the one job with the most on that file system fires; the others go on.
#[test]
fn below_the_reserve_the_largest_job_fires() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    write_file(&a.join("f"), 1 << 20);
    write_file(&b.join("f"), 3 << 20);
    // Every file system is below a reserve this large.
    let limits = DiskLimits {
        limit: None,
        reserve: Reserve::Bytes(u64::MAX / 2),
    };
    let registry = Arc::new(Registry::default());
    let mut small = state("small", vec![tree("checkout", &a)], limits, &registry);
    let mut large = state("large", vec![tree("checkout", &b)], limits, &registry);
    // The small job walks first: alone in the registry, it is the largest for now.
    let _ = small.tick();
    let fired = large.tick().expect("the largest job fires");
    assert!(
        fired
            .message
            .starts_with("the disk reserve fired: the file system of ")
            && fired
                .message
                .contains("of the runner's jobs this one had the most on it (3 MiB; 3 MiB in all"),
        "{}",
        fired.message
    );
    assert_eq!(small.tick(), None, "the smaller job goes on");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watchdog_fires_soon_after_a_job_writes_past_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let limits = DiskLimits {
        limit: Some(8 << 20),
        reserve: NO_RESERVE,
    };
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
            reserve: NO_RESERVE
        },
        registry
    )
    .is_none());
}
