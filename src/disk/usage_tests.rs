use super::*;
use std::io::Write;

fn write_file(path: &Path, bytes: usize) {
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(&vec![7u8; bytes]).unwrap();
    f.sync_all().unwrap();
}

/// GNU du's figure for the same tree: allocated bytes, hard links once, links not followed.
fn du(path: &Path) -> u64 {
    let out = std::process::Command::new("du")
        .args(["-s", "-B1"])
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn allocated_blocks_count_once_and_links_are_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    std::fs::create_dir_all(tree.join("a/b")).unwrap();
    write_file(&tree.join("a/b/data"), 1 << 20);
    std::fs::hard_link(tree.join("a/b/data"), tree.join("a/again")).unwrap();
    // Sparse: a terabyte that takes no space.
    let sparse = std::fs::File::create(tree.join("sparse")).unwrap();
    sparse.set_len(1 << 40).unwrap();
    // A link to a large file outside the tree: the link, not its target.
    let outside = dir.path().join("outside");
    write_file(&outside, 4 << 20);
    std::os::unix::fs::symlink(&outside, tree.join("link")).unwrap();
    std::os::unix::fs::symlink(dir.path(), tree.join("up")).unwrap();

    let usage = measure(&tree, &mut Seen::default());
    assert_eq!(usage.bytes, du(&tree), "{usage:?}");
    assert!(usage.bytes >= 1 << 20 && usage.bytes < 2 << 20, "{usage:?}");
    assert_eq!(usage.unseen, 0);

    // One job's trees share what was counted: the hard link's second name in another tree
    // adds only its directory.
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::hard_link(tree.join("a/b/data"), other.join("third")).unwrap();
    let mut seen = Seen::default();
    let first = measure(&tree, &mut seen);
    let second = measure(&other, &mut seen);
    assert!(second.bytes < 64 * 1024, "{second:?} after {first:?}");

    // A tree inside another is left to its own measure.
    let mut seen = Seen::with_roots([dir.path(), tree.as_path()]);
    let outer = measure(dir.path(), &mut seen);
    let inner = measure(&tree, &mut seen);
    assert_eq!(
        outer.bytes + inner.bytes,
        du(dir.path()),
        "{outer:?} {inner:?}"
    );
    assert!(outer.bytes >= 4 << 20, "{outer:?}");

    assert_eq!(
        measure(&dir.path().join("absent"), &mut Seen::default()),
        Usage::default()
    );
    let file = measure(&outside, &mut Seen::default());
    assert!(
        file.bytes >= 4 << 20,
        "a root that is a file is measured: {file:?}"
    );
}

/// A tree deeper than PATH_MAX, and than the descriptors a process may hold, with data at the
/// bottom: still counted.
#[test]
fn a_tree_deeper_than_path_max_hides_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut fd = rustix::fs::open(dir.path(), flags, Mode::empty()).unwrap();
    let levels = 2100; // "dd/" × 2100 = 6300 bytes of path
    for _ in 0..levels {
        rustix::fs::mkdirat(&fd, "dd", Mode::from_raw_mode(0o755)).unwrap();
        fd = rustix::fs::openat(&fd, "dd", flags, Mode::empty()).unwrap();
    }
    let file = rustix::fs::openat(
        &fd,
        "bottom",
        OFlags::WRONLY | OFlags::CREATE | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .unwrap();
    let mut file = std::fs::File::from(file);
    file.write_all(&vec![1u8; 2 << 20]).unwrap();
    file.sync_all().unwrap();
    drop((file, fd));

    let usage = measure(dir.path(), &mut Seen::default());
    assert!(usage.bytes >= 2 << 20, "{usage:?}");
    assert_eq!(usage.entries as usize, levels + 2, "{usage:?}");
    assert_eq!(usage.unseen, 0, "{usage:?}");
    crate::remove::remove_tree(&dir.path().join("dd")).ok();
}

/// A directory the job made unreadable is opened to its owner and counted (as root it is
/// readable anyway).
#[test]
fn an_unreadable_directory_is_counted() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let hidden = dir.path().join("hidden");
    std::fs::create_dir(&hidden).unwrap();
    write_file(&hidden.join("data"), 1 << 20);
    std::fs::set_permissions(&hidden, std::fs::Permissions::from_mode(0o000)).unwrap();
    let usage = measure(dir.path(), &mut Seen::default());
    assert!(usage.bytes >= 1 << 20, "{usage:?}");
    assert_eq!(usage.unseen, 0, "{usage:?}");
    std::fs::set_permissions(&hidden, std::fs::Permissions::from_mode(0o700)).unwrap();
}
