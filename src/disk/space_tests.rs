use super::*;

#[test]
fn a_roomy_file_system_is_not_full() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(full(dir.path()), None);
    assert_eq!(full_clause(&[dir.path()]), "");
}

#[test]
fn a_filled_tmpfs_is_named_once() {
    if rustix::process::geteuid().as_raw() != 0 {
        eprintln!("SKIPPED: mounting a tmpfs needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("small");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(mounted.success());
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(self.0).status();
        }
    }
    let _unmount = Unmount(&mnt);
    assert_eq!(full(&mnt), None, "an empty 1 MiB tmpfs has room");
    let filler = vec![0u8; 64 * 1024];
    let mut f = std::fs::File::create(mnt.join("filler")).unwrap();
    use std::io::Write;
    while f.write_all(&filler).is_ok() {}
    drop(f);
    let sub = mnt.join("sub");
    std::fs::create_dir(&sub).unwrap();
    let clause = full_clause(&[&mnt, &sub, dir.path()]);
    assert_eq!(
        clause.matches("is full").count(),
        1,
        "one file system, named once: {clause}"
    );
    assert!(clause.contains(&mnt.display().to_string()), "{clause}");
}
