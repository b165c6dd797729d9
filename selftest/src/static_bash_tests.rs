use super::*;

fn fake_bash(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("bash-static");
    std::fs::write(&path, body).unwrap();
    path
}

#[test]
fn installs_a_copy_and_locks_its_hash() {
    let tmp = tempfile::tempdir().unwrap();
    let bash = fake_bash(tmp.path(), "not an ELF file");
    let input = BuilderInput::install_from(&bash, &tmp.path().join("input")).unwrap();
    let copy = input.dir().join("bin/bash");
    assert_eq!(std::fs::read(&copy).unwrap(), b"not an ELF file");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777,
        0o555
    );

    assert_eq!(
        input.nar_hash(),
        quest_runner::nar::nar_hash(input.dir()).unwrap()
    );
    // The flake has no input: the builder is the repository's own copy.
    let lock: serde_json::Value = serde_json::from_str(&input.lock_file()).unwrap();
    assert_eq!(lock["nodes"]["root"], serde_json::json!({}));
    assert!(input.flake_inputs().is_empty());
    let repo = tmp.path().join("repo");
    input.copy_into(&repo).unwrap();
    assert_eq!(
        std::fs::read(repo.join(DIR).join("bin/bash")).unwrap(),
        b"not an ELF file"
    );
    std::fs::remove_dir_all(&repo).unwrap();
    // Nothing else was left beside the input.
    let names: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn an_identical_copy_is_kept_and_a_different_one_replaced() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("input");
    let bash = fake_bash(tmp.path(), "one");
    let first = BuilderInput::install_from(&bash, &dir).unwrap();
    let ino = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let before = ino(&dir.join("bin/bash"));
    let again = BuilderInput::install_from(&bash, &dir).unwrap();
    assert_eq!(ino(&dir.join("bin/bash")), before, "rewritten");
    assert_eq!(again.nar_hash(), first.nar_hash());

    let bash = fake_bash(tmp.path(), "two");
    let other = BuilderInput::install_from(&bash, &dir).unwrap();
    assert_eq!(std::fs::read(dir.join("bin/bash")).unwrap(), b"two");
    assert_ne!(other.nar_hash(), first.nar_hash());
}

#[test]
fn a_path_nix_would_misread_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let bash = fake_bash(tmp.path(), "x");
    for name in ["with space", "per%20cent", "quote\"d", "dollar${x}"] {
        let err = BuilderInput::install_from(&bash, &tmp.path().join(name)).unwrap_err();
        assert!(matches!(err, StaticBashError::UnsafePath { .. }), "{err}");
        assert!(err.to_string().contains(name), "{err}");
        assert!(!tmp.path().join(name).exists());
    }
}

#[test]
fn a_dynamically_linked_bash_is_refused_by_name() {
    // The test binary itself is a dynamically linked ELF executable.
    let exe = std::env::current_exe().unwrap();
    assert!(is_dynamically_linked(&exe).unwrap());
    let tmp = tempfile::tempdir().unwrap();
    let err = BuilderInput::install_from(&exe, &tmp.path().join("input")).unwrap_err();
    assert!(
        err.to_string().contains("QUEST_RUNNER_BASH_STATIC"),
        "{err}"
    );
    assert!(
        err.to_string().contains(&exe.display().to_string()),
        "{err}"
    );
}

#[test]
fn a_static_elf_is_recognised() {
    // Headers of a static executable: ELF64 LE, one PT_LOAD program header, no PT_INTERP.
    let mut elf = vec![0u8; 64 + 56];
    elf[..6].copy_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1]);
    elf[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
    elf[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
    elf[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
    elf[64..68].copy_from_slice(&1u32.to_le_bytes());
    assert!(!is_dynamic_elf(&elf));
    elf[64..68].copy_from_slice(&3u32.to_le_bytes());
    assert!(is_dynamic_elf(&elf));
    // A program header table past the end is not read.
    elf[0x20..0x28].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(!is_dynamic_elf(&elf));
}
