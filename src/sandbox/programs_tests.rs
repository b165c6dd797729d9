use super::*;
use crate::job::Trust;
use crate::sandbox::{plan, Platform, PolicyInputs};
use crate::workspace::WorkspacePaths;

fn policy(root: &Path) -> SandboxPolicy {
    let ws = WorkspacePaths {
        checkout: root.join("state/jobs/j1/checkout"),
        bare_clone: root.join("state/repos/r.git"),
        git_store: root.join("state/jobs/j1/git"),
        worktree_admin: root.join("state/jobs/j1/git/worktrees/checkout"),
        temp_dir: root.join("tmp/quest-job-abc"),
        job_dir: root.join("state/jobs/j1/runner"),
        helper_tmp: root.join("tmp/quest-srt-abc"),
        devshell_script: None,
    };
    plan(
        &ws,
        &PolicyInputs {
            platform: Platform::Linux,
            trust: Trust::Trusted,
            extra_hosts: vec![],
            full_access_hosts: vec![],
            dependency_hosts: Vec::new(),
            state_dir: root.join("state"),
            operator_home: Some(root.join("home")),
            private: vec![],
        },
    )
}

fn file(path: &Path, text: &str) -> PathBuf {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    path.to_path_buf()
}

/// A program installed in a hidden tree brings itself, never its neighbours (issue 40: a
/// launcher in the state dir let the agent read `config.json` and other jobs' files; one
/// beside a key in a home let it print the key).
#[test]
fn a_program_in_a_hidden_tree_brings_only_itself() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let policy = policy(&root);
    let in_state = file(&root.join("state/claude"), "#!/bin/sh\n");
    let config = file(&root.join("state/config.json"), "{}");
    let launcher = file(&root.join("home/bin/launcher"), "#!/bin/sh\n");
    let key = file(&root.join("home/bin/key"), "SECRET");
    let npm = file(
        &root.join("home/npm/lib/node_modules/pkg/cli.js"),
        "#!/usr/bin/env node\n",
    );
    for hidden in [&in_state, &config, &launcher, &key] {
        assert!(!policy.may_read(hidden), "{}", hidden.display());
    }
    let bound = roots(
        [in_state.as_path(), launcher.as_path(), npm.as_path()],
        &policy,
    );
    assert_eq!(
        bound,
        [in_state, launcher, root.join("home/npm/lib/node_modules")]
    );
    for neighbour in [&config, &key] {
        let brought: Vec<&PathBuf> = bound.iter().filter(|r| neighbour.starts_with(r)).collect();
        assert!(
            brought.is_empty(),
            "{} comes in with {brought:?}",
            neighbour.display()
        );
    }
}
