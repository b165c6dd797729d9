use super::*;
use crate::config::{Count, LimitsFile, Size};

#[test]
fn sizes_read_for_people() {
    assert_eq!(human(12), "12 B");
    assert_eq!(human(10 << 30), "10 GiB");
    assert_eq!(human(1536 << 20), "1.5 GiB");
    assert_eq!(human(812 << 20), "812 MiB");
}

#[test]
fn the_default_reserve_is_a_gigabyte_or_five_percent() {
    assert_eq!(Reserve::Default.bytes(1 << 40), 1 << 30);
    assert_eq!(Reserve::Default.bytes(100 << 20), 5 << 20);
    assert_eq!(Reserve::Off.bytes(1 << 40), 0);
    assert_eq!(Reserve::Amount(7).bytes(1 << 40), 7);
}

#[test]
fn limits_come_from_the_config_default_on() {
    let mut config = LimitsFile::default();
    assert_eq!(config.disk_limits().unwrap(), DiskLimits::default());
    assert_eq!(DiskLimits::default().limit, Some(10 << 30));
    assert_eq!(DiskLimits::default().files, Some(1_000_000));
    config.disk = Some(Size::Text("off".into()));
    config.disk_reserve = Some(Size::Text("off".into()));
    config.disk_files = Some(Count::Text("off".into()));
    config.disk_reserve_files = Some(Count::Text("OFF".into()));
    let off = config.disk_limits().unwrap();
    assert!(off.is_off(), "{off:?}");
    config.disk = Some(Size::Text("512M".into()));
    config.disk_reserve = Some(Size::Bytes(4096));
    config.disk_files = Some(Count::Number(2000));
    config.disk_reserve_files = Some(Count::Text("300".into()));
    let set = config.disk_limits().unwrap();
    assert_eq!(set.limit, Some(512 << 20));
    assert_eq!(set.reserve, Reserve::Amount(4096));
    assert_eq!(set.files, Some(2000));
    assert_eq!(set.reserve_files, Reserve::Amount(300));
    // Round trip: the file as the runner would write these limits back.
    let parsed = crate::config::LimitsFile::from(&config.parse().unwrap());
    assert_eq!(parsed.disk_limits().unwrap(), set);
    config.disk = Some(Size::Text("lots".into()));
    let err = config.disk_limits().unwrap_err();
    assert_eq!(err.field, "limits.disk", "{err}");
}

/// A wrong `limits.disk_files` or `limits.disk_reserve_files` names its field, in the JSON
/// the config file holds.
#[test]
fn a_wrong_file_count_names_its_field() {
    for (json, field, says) in [
        (
            r#"{"disk_files": "many"}"#,
            "limits.disk_files",
            "not a number of files",
        ),
        (
            r#"{"disk_files": 0}"#,
            "limits.disk_files",
            "0 files is no limit",
        ),
        (
            r#"{"disk_reserve_files": "-3"}"#,
            "limits.disk_reserve_files",
            "not a number",
        ),
    ] {
        let file: LimitsFile = serde_json::from_str(json).unwrap();
        let err = file.parse().unwrap_err();
        assert_eq!(err.field, field, "{json}: {}", err.message);
        assert!(err.message.contains(says), "{json}: {}", err.message);
    }
    let file: LimitsFile = serde_json::from_str(r#"{"disk_files": 5000000}"#).unwrap();
    assert_eq!(file.parse().unwrap().disk.files, Some(5_000_000));
}

#[test]
fn the_default_inode_reserve_is_what_a_gigabyte_holds_or_five_percent() {
    assert_eq!(DEFAULT_RESERVE_FILES, 65_536);
    assert_eq!(Reserve::Default.files(10_000_000), 65_536);
    assert_eq!(Reserve::Default.files(6_000), 300);
    assert_eq!(Reserve::Amount(9).files(0), 0, "no fixed number of inodes");
    assert_eq!(count(1_000_000), "1,000,000");
    assert_eq!(count(999), "999");
}

/// Only a reserve: of `bytes`, and of `files` inodes.
fn reserve(bytes: Reserve, files: Reserve) -> DiskLimits {
    DiskLimits {
        limit: None,
        files: None,
        reserve: bytes,
        reserve_files: files,
    }
}

#[test]
fn a_job_does_not_start_below_the_reserve() {
    let dir = tempfile::tempdir().unwrap();
    let small = reserve(Reserve::Amount(1), Reserve::Amount(1));
    assert_eq!(room_to_start(&[dir.path()], &small), Ok(()));
    let off = reserve(Reserve::Off, Reserve::Off);
    assert_eq!(room_to_start(&[dir.path()], &off), Ok(()));
    let huge = reserve(Reserve::Amount(u64::MAX / 2), Reserve::Off);
    let err = room_to_start(&[dir.path()], &huge).unwrap_err().to_string();
    assert!(
        err.contains(&dir.path().display().to_string())
            && err.contains("below the runner's reserve")
            && err.contains("(bytes, limits.disk_reserve)"),
        "{err}"
    );
}

struct Unmount<'a>(&'a Path);

impl Drop for Unmount<'_> {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(self.0).status();
    }
}

/// A tmpfs of plenty of bytes and 2,000 inodes: filled with empty files to below the inode
/// reserve, no job starts, and the refusal names the file system and inodes; with the files
/// removed, it starts again.
#[test]
fn a_job_does_not_start_below_the_inode_reserve() {
    if rustix::process::geteuid().as_raw() != 0 {
        eprintln!("SKIPPED: mounting a tmpfs (size=50m,nr_inodes=2000) needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("few-inodes");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=50m,nr_inodes=2000", "tmpfs"])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(mounted.success());
    let _unmount = Unmount(&mnt);
    let limits = DiskLimits::default(); // 5% of 2,000 inodes: 100
    assert_eq!(limits.reserve_files.files(2000), 100);
    assert_eq!(room_to_start(&[&mnt], &limits), Ok(()), "an empty tmpfs");
    let fill = mnt.join("fill");
    std::fs::create_dir(&fill).unwrap();
    let mut made = 0;
    while space::space(&mnt).unwrap().files_free >= 50 {
        std::fs::File::create(fill.join(made.to_string())).unwrap();
        made += 1;
    }
    let room = space::space(&mnt).unwrap();
    assert!(room.free > 40 << 20, "bytes to spare: {room:?}");
    let err = room_to_start(&[dir.path(), &mnt], &limits)
        .unwrap_err()
        .to_string();
    eprintln!("after {made} empty files: {err}");
    assert!(
        err.contains(&format!("the file system of {} has ", mnt.display()))
            && err.contains("inodes free of 2,000")
            && err
                .contains("below the runner's reserve of 100 (inodes, limits.disk_reserve_files)"),
        "after {made} files: {err}"
    );
    assert_eq!(
        room_to_start(&[&mnt], &reserve(Reserve::Default, Reserve::Off)),
        Ok(()),
        "the byte reserve alone lets it start: the refusal came from inodes"
    );
    std::fs::remove_dir_all(&fill).unwrap();
    assert_eq!(room_to_start(&[&mnt], &limits), Ok(()), "emptied again");
}

#[test]
fn rooms_show_bytes_and_inodes_once_per_file_system() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let line = rooms(&[("state dir", dir.path()), ("temp dirs", &sub)]);
    let unmade = rooms(&[("state dir", &sub.join("not/yet"))]);
    assert!(
        unmade.contains(" inodes ") && !unmade.contains("os error"),
        "{unmade}"
    );
    let first = format!("state dir {}: ", dir.path().display());
    assert!(
        line.starts_with(&first)
            && line.contains(" free of ")
            && (line.contains(" inodes free of ") || line.contains("no fixed number of inodes"))
            && line.ends_with(&format!(
                "temp dirs {}: on the same file system as the state dir",
                sub.display()
            )),
        "{line}"
    );
}
