use super::*;
use crate::config::{LimitsFile, Size};

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
    assert_eq!(Reserve::Bytes(7).bytes(1 << 40), 7);
}

#[test]
fn limits_come_from_the_config_default_on() {
    let mut config = LimitsFile::default();
    assert_eq!(config.disk_limits().unwrap(), DiskLimits::default());
    assert_eq!(DiskLimits::default().limit, Some(10 << 30));
    config.disk = Some(Size::Text("off".into()));
    config.disk_reserve = Some(Size::Text("off".into()));
    let off = config.disk_limits().unwrap();
    assert!(off.is_off(), "{off:?}");
    config.disk = Some(Size::Text("512M".into()));
    config.disk_reserve = Some(Size::Bytes(4096));
    let set = config.disk_limits().unwrap();
    assert_eq!(set.limit, Some(512 << 20));
    assert_eq!(set.reserve, Reserve::Bytes(4096));
    config.disk = Some(Size::Text("lots".into()));
    let err = config.disk_limits().unwrap_err();
    assert!(err.starts_with("limits.disk:"), "{err}");
}

#[test]
fn a_job_does_not_start_below_the_reserve() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(room_to_start(&[dir.path()], Reserve::Bytes(1)), Ok(()));
    assert_eq!(room_to_start(&[dir.path()], Reserve::Off), Ok(()));
    let err = room_to_start(&[dir.path()], Reserve::Bytes(u64::MAX / 2)).unwrap_err();
    assert!(
        err.contains(&dir.path().display().to_string())
            && err.contains("below the runner's reserve")
            && err.contains("limits.disk_reserve"),
        "{err}"
    );
}
