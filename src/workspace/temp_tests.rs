use super::*;
use std::path::Path;

#[test]
fn the_temp_parent_is_tmpdir_when_claude_code_accepts_a_temp_dir_in_it() {
    assert_eq!(choose_temp_parent(None).path, Path::new(TEMP_PARENT));
    assert_eq!(choose_temp_parent(None).why_not_tmpdir, None);

    let short = tempfile::Builder::new()
        .prefix("q")
        .tempdir_in("/tmp")
        .unwrap();
    let chosen = choose_temp_parent(Some(short.path().to_path_buf()));
    assert_eq!(chosen.path, short.path());
    assert_eq!(chosen.why_not_tmpdir, None);
    // The longest temp dir it makes is still one Claude Code takes.
    let longest = chosen.path.join(format!("{TEMP_PREFIX}XXXXXX"));
    assert!(longest.as_os_str().len() <= CLAUDE_TMPDIR_MAX);

    // Resolved first: a short link to a long directory is the long directory.
    let long = short.path().join("a-directory-name-long-enough");
    std::fs::create_dir(&long).unwrap();
    let chosen = choose_temp_parent(Some(long.clone()));
    assert_eq!(chosen.path, Path::new(TEMP_PARENT));
    let why = chosen.why_not_tmpdir.unwrap();
    assert!(
        why.contains("characters") && why.contains("CLAUDE_CODE_TMPDIR"),
        "{why}"
    );
    let link = short.path().join("l");
    std::os::unix::fs::symlink(&long, &link).unwrap();
    assert_eq!(choose_temp_parent(Some(link)).path, Path::new(TEMP_PARENT));

    let file = short.path().join("f");
    std::fs::write(&file, "").unwrap();
    for bad in [Path::new("/nonexistent-tmpdir"), Path::new("/"), &file] {
        let chosen = choose_temp_parent(Some(bad.to_path_buf()));
        assert_eq!(chosen.path, Path::new(TEMP_PARENT), "{}", bad.display());
        assert!(chosen.why_not_tmpdir.is_some(), "{}", bad.display());
    }
}
