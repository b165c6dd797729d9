use super::*;

#[test]
fn the_layout_is_the_job_directory_and_the_planned_paths_show_the_temp_dirs_unnamed() {
    let state = StateDir::at("/state");
    let layout = JobLayout::of(&state, "j1", "https://example.invalid/r.git");
    assert_eq!(layout.root, Path::new("/state/jobs/j1"));
    assert_eq!(layout.checkout, Path::new("/state/jobs/j1/checkout"));
    assert_eq!(layout.git_store, Path::new("/state/jobs/j1/git"));
    assert_eq!(
        layout.worktree_admin,
        Path::new("/state/jobs/j1/git/worktrees/checkout")
    );
    assert_eq!(layout.runner_dir, Path::new("/state/jobs/j1/runner"));
    assert_eq!(layout.record(), Path::new("/state/jobs/j1/workspace.json"));
    assert_eq!(
        layout.bare_clone,
        bare_clone_path(&state, "https://example.invalid/r.git")
    );
    assert!(layout.bare_clone.starts_with("/state/repos"));

    let trusted = layout.planned(Path::new("/tmp"), true);
    assert_eq!(trusted.temp_dir, Path::new("/tmp/quest-job-XXXXXX"));
    assert_eq!(trusted.helper_tmp, Path::new("/tmp/quest-srt-XXXXXX"));
    assert_eq!(trusted.job_dir, layout.runner_dir);
    assert_eq!(
        trusted.devshell_script.as_deref(),
        Some(Path::new("/state/jobs/j1/runner/devshell.sh"))
    );
    assert_eq!(
        layout.planned(Path::new("/tmp"), false).devshell_script,
        None
    );
}
