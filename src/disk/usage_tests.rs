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

/// A tmpfs mounted for a test and unmounted after it (root only: `None` otherwise).
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(options: &str) -> Option<Tmpfs> {
        if !rustix::process::geteuid().is_root() {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(dir.path())
            .status()
            .unwrap()
            .success();
        ok.then_some(Tmpfs { dir })
    }

    /// Inodes in use, as the file system counts them (`df -i`).
    fn used_inodes(&self) -> u64 {
        let st = rustix::fs::statvfs(self.dir.path()).unwrap();
        st.f_files - st.f_ffree
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.dir.path())
            .status();
    }
}

/// On tmpfs, what the walk counts is what the file system charges: every hard link and every
/// KiB of extended attributes takes one of its inodes (issue 40: a job filled a 6,000-inode
/// tmpfs with links to one file, or attributes on it, counted as "6 inodes").
#[test]
fn on_tmpfs_links_and_attributes_count_as_the_file_system_charges_them() {
    let Some(fs) = Tmpfs::mount("size=16m,nr_inodes=6000") else {
        eprintln!("not root, or no tmpfs: skipped");
        return;
    };
    let tree = fs.dir.path().join("job");
    std::fs::create_dir(&tree).unwrap();
    write_file(&tree.join("one"), 10);
    for i in 0..500 {
        std::fs::hard_link(tree.join("one"), tree.join(format!("link-{i}"))).unwrap();
    }
    write_file(&tree.join("tagged"), 10);
    for i in 0..40 {
        let name = format!("user.attr-{i}");
        rustix::fs::setxattr(
            tree.join("tagged"),
            name.as_str(),
            &[b'x'; 3000],
            rustix::fs::XattrFlags::empty(),
        )
        .unwrap();
    }
    let charged = fs.used_inodes() - 1; // the mount's root
    let usage = measure(&tree, &mut Seen::default());
    assert!(
        usage.entries >= charged && usage.entries <= charged + charged / 20,
        "counted {} inodes; tmpfs charges {charged}",
        usage.entries
    );
}
