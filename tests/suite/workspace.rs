//! The workspace against real git: a bare clone fetched from a path, the job's own git store
//! and worktree at the revision, a private temp dir; all removed when the workspace drops, and
//! what a killed runner left behind removed by the next sweep. The job's git data is hostile:
//! what it plants there (submodule filters, a rewritten `commondir`, corrupt objects, a FIFO
//! for HEAD) must not run, mislead or stall the runner's git, nor reach the shared clone.

use crate::support;

use std::path::Path;
use std::time::Duration;

use quest_runner::state::StateDir;
use quest_runner::workspace::{bare_clone_path, sweep_abandoned, Workspace};
use support::workspace_job as job;
use support::*;

#[tokio::test]
async fn prepare_lays_out_the_job_and_drop_removes_it() {
    let repo = Repo::new();
    let rev = repo.commit(&[("README.md", "hello\n")]);
    let state_dir = tempfile::tempdir().unwrap();
    let state = StateDir::at(state_dir.path());
    let ws = Workspace::prepare(&state, &job("w1", &repo.src(), &rev))
        .await
        .unwrap();
    let p = ws.paths.clone();
    let proxy_tmp = ws.proxy_tmp.clone();
    assert!(proxy_tmp.is_dir());
    assert_eq!(
        std::fs::read_to_string(ws.checkout_view().join("README.md")).unwrap(),
        "hello\n"
    );
    assert!(p.temp_dir.starts_with("/tmp"));
    let name = p
        .temp_dir
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(name.starts_with("quest-job-"));
    assert!(
        p.temp_dir.to_string_lossy().len() < 36,
        "short enough for CLAUDE_CODE_TMPDIR"
    );
    // The job's git data is its own, under its own directory; the shared clone has no
    // worktree of it and the store reads the shared objects through its alternates.
    let job_root = state_dir.path().join("jobs/w1").canonicalize().unwrap();
    assert_eq!(p.git_store, job_root.join("git"));
    assert_eq!(p.worktree_admin, job_root.join("git/worktrees/checkout"));
    assert!(!p.bare_clone.join("worktrees").exists());
    assert_eq!(
        std::fs::read_to_string(p.git_store.join("objects/info/alternates")).unwrap(),
        format!("{}\n", p.bare_clone.join("objects").display())
    );
    let head = git_in_job(&ws, &["rev-parse", "HEAD"]);
    assert_eq!(head, rev);
    assert!(
        ws.uncommitted().await.unwrap().is_empty(),
        "a clean checkout"
    );
    // Nix 2.8 can fetch the revision by this branch.
    let listed = git(&p.bare_clone, &["branch", "--list", &ws.nix_ref]);
    assert!(!listed.is_empty());
    // Git starts no maintenance of its own on the shared clone (an agent's commit would, in its
    // sandbox); the runner runs it after fetching.
    assert_eq!(git(&p.bare_clone, &["config", "gc.auto"]), "0");
    assert_eq!(git(&p.bare_clone, &["config", "maintenance.auto"]), "false");
    // A clone older runners let jobs write may hold a moved branch: set back by the next job.
    let other = repo.commit(&[("README.md", "other\n")]);
    git(&p.bare_clone, &["fetch", "-q", "origin", &other]);
    git(
        &p.bare_clone,
        &["update-ref", &format!("refs/heads/{}", ws.nix_ref), &other],
    );
    let again = Workspace::prepare(&state, &job("w1-again", &repo.src(), &rev))
        .await
        .unwrap();
    drop(again);
    let named = git(
        &p.bare_clone,
        &["rev-parse", &format!("refs/heads/{}", ws.nix_ref)],
    );
    assert_eq!(named, rev);
    // Nor can a FIFO (the runner would wait on it) or a symlink to an endless file (it would
    // read forever) where the ref file should be hang the next job.
    let ref_file = p.bare_clone.join("refs/heads").join(&ws.nix_ref);
    for trap in ["fifo", "symlink"] {
        std::fs::remove_file(&ref_file).unwrap();
        match trap {
            "fifo" => assert!(std::process::Command::new("mkfifo")
                .arg(&ref_file)
                .status()
                .unwrap()
                .success()),
            _ => std::os::unix::fs::symlink("/dev/zero", &ref_file).unwrap(),
        }
        let next_job = job(&format!("w1-{trap}"), &repo.src(), &rev);
        let next = Workspace::prepare(&state, &next_job);
        let next = tokio::time::timeout(Duration::from_secs(30), next)
            .await
            .unwrap_or_else(|_| panic!("the {trap} at the ref hung the next job"))
            .unwrap();
        drop(next);
        assert!(
            std::fs::symlink_metadata(&ref_file).unwrap().is_file(),
            "{trap}"
        );
        let named = git(
            &p.bare_clone,
            &["rev-parse", &format!("refs/heads/{}", ws.nix_ref)],
        );
        assert_eq!(named, rev, "{trap}");
    }
    // A clone set up by an older version (jobs wrote it; git's maintenance on) is checked and
    // set up again: maintenance off, this version's mark.
    git(&p.bare_clone, &["config", "--unset", "gc.auto"]);
    std::fs::remove_file(p.bare_clone.join("info/quest-runner")).unwrap();
    drop(
        Workspace::prepare(&state, &job("w1-old-clone", &repo.src(), &rev))
            .await
            .unwrap(),
    );
    assert_eq!(git(&p.bare_clone, &["config", "gc.auto"]), "0");
    assert!(p.bare_clone.join("info/quest-runner").is_file());
    // A second job with the same id is refused.
    let again = Workspace::prepare(&state, &job("w1", &repo.src(), &rev)).await;
    assert!(again.is_err());

    let (head, commits) = ws.commits_since("w1", &rev).await.unwrap();
    assert_eq!(head, rev);
    assert!(commits.is_empty());
    drop(ws);
    assert!(!p.git_store.exists(), "the job's store goes with the job");
    assert!(!p.checkout.exists());
    assert!(!p.temp_dir.exists());
    assert!(
        !p.helper_tmp.exists(),
        "srt's scratch dir goes with the job"
    );
    assert!(!proxy_tmp.exists(), "the proxy's TMPDIR goes with the job");
    assert!(
        p.bare_clone.exists(),
        "the bare clone is kept for the next job"
    );
}

#[tokio::test]
async fn an_unknown_revision_is_named() {
    let repo = Repo::new();
    repo.commit(&[("a", "a")]);
    let state_dir = tempfile::tempdir().unwrap();
    let state = StateDir::at(state_dir.path());
    let absent = "0123456789abcdef0123456789abcdef01234567";
    let err = Workspace::prepare(&state, &job("w2", &repo.src(), absent))
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains(absent), "{err}");
}

#[tokio::test]
async fn sweep_cleans_what_a_killed_runner_left() {
    let repo = Repo::new();
    let rev = repo.commit(&[("a", "a")]);
    let state_dir = tempfile::tempdir().unwrap();
    let state = StateDir::at(state_dir.path());
    let ws = Workspace::prepare(&state, &job("w3", &repo.src(), &rev))
        .await
        .unwrap();
    let p = ws.paths.clone();
    let proxy_tmp = ws.proxy_tmp.clone();
    // A live job is not swept.
    assert_eq!(sweep_abandoned(&state), 0);
    assert!(p.checkout.exists());
    // Simulate a runner killed with SIGKILL: nothing ran its cleanup.
    std::mem::forget(ws);
    // The forgotten lock file handle still holds the lock in this process; a dead runner's
    // would be closed. Release it the way the kernel would.
    release_locks_of(&state_dir.path().join("jobs/w3/lock"));
    // A child that another test's thread forks holds a copy of the lock until it execs (the
    // descriptor is close-on-exec), so the lock may still be taken for a moment.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut swept = sweep_abandoned(&state);
    while swept == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        swept = sweep_abandoned(&state);
    }
    assert_eq!(swept, 1);
    assert!(!p.checkout.exists());
    assert!(!p.git_store.exists());
    assert!(!p.temp_dir.exists());
    assert!(!p.helper_tmp.exists());
    assert!(!proxy_tmp.exists());
}

/// A state dir whose bare clone of `repo` exists, as on a runner that has run one job.
async fn state_after_one_job(repo: &Repo, rev: &str) -> (tempfile::TempDir, StateDir) {
    let state_dir = tempfile::tempdir().unwrap();
    let state = StateDir::at(state_dir.path());
    let first = Workspace::prepare(&state, &job("first", &repo.src(), rev)).await;
    drop(first.unwrap());
    (state_dir, state)
}

/// Jobs of one repository start and end side by side (serve's concurrency), each with its own
/// store on the one shared clone. Rounds of concurrent prepares and drops must all succeed and
/// leave no worktree in the shared clone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn jobs_of_one_repository_prepare_and_end_side_by_side() {
    let repo = Repo::new();
    let rev = repo.commit(&[("a", "a")]);
    let (_state_dir, state) = state_after_one_job(&repo, &rev).await;
    for round in 0..10 {
        let mut tasks = Vec::new();
        for n in 0..8 {
            let state = state.clone();
            let job = job(&format!("r{round}-{n}"), &repo.src(), &rev);
            tasks.push(tokio::spawn(async move {
                let ws = Workspace::prepare(&state, &job).await?;
                // Stagger the ends so drops overlap the next job's add.
                tokio::time::sleep(Duration::from_millis(n * 7)).await;
                let head = git_in_job(&ws, &["rev-parse", "HEAD"]);
                drop(ws);
                Ok::<_, quest_runner::workspace::WorkspaceError>(head)
            }));
        }
        for task in tasks {
            let head = task
                .await
                .unwrap()
                .unwrap_or_else(|e| panic!("round {round}: {e}"));
            assert_eq!(head, rev);
        }
    }
    let bare = bare_clone_path(&state, &repo.src().to_string_lossy());
    let left: Vec<_> = std::fs::read_dir(bare.join("worktrees"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "worktrees left: {left:?}");
}

/// A job at a new revision fetches into the bare clone (holding its lock) while other jobs of
/// the repository come and go, reading the shared objects through their stores' alternates:
/// every job gets its workspace, none waits forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fetching_a_new_revision_while_other_jobs_come_and_go() {
    let repo = Repo::new();
    let first = repo.commit(&[("a", "0")]);
    let (_state_dir, state) = state_after_one_job(&repo, &first).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut churn = Vec::new();
    for c in 0..3 {
        let (state, stop, job_repo, rev) = (state.clone(), stop.clone(), repo.src(), first.clone());
        churn.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let ws = Workspace::prepare(&state, &job(&format!("c{c}-{n}"), &job_repo, &rev))
                    .await
                    .unwrap_or_else(|e| panic!("churn job: {e}"));
                drop(ws);
                n += 1;
            }
            n
        }));
    }
    for round in 0..8 {
        let rev = repo.commit(&[("a", &round.to_string())]);
        let ws = Workspace::prepare(&state, &job(&format!("new{round}"), &repo.src(), &rev))
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(git_in_job(&ws, &["rev-parse", "HEAD"]), rev);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for task in churn {
        assert!(task.await.unwrap() > 0, "the churn ran");
    }
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// `git diff-files --quiet` on `files` with `index`: clean only when every entry's stat data
/// matches, since diff-files reports an entry whose stat differs without reading it. Run as
/// `as_agent` (the agent's identity, through setpriv) when given; `git_dir` is any repository
/// that identity may read (diff-files needs no objects).
fn stat_clean(git_dir: &Path, files: &Path, index: &Path, as_agent: bool) -> bool {
    let mut cmd = if as_agent {
        let mut c = std::process::Command::new("setpriv");
        let id = quest_runner::sandbox::boundary::AGENT_ID.to_string();
        c.args(["--reuid", &id, "--regid", &id, "--clear-groups", "git"]);
        c
    } else {
        std::process::Command::new("git")
    };
    cmd.env("GIT_DIR", git_dir)
        .env("GIT_WORK_TREE", files)
        .env("GIT_INDEX_FILE", index)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args(["--no-optional-locks", "diff-files", "--quiet"])
        .status()
        .unwrap()
        .success()
}

/// A revision's shared tree (issue 31's next step, not yet used by jobs): written once from the
/// shared clone, outside any job's reach, with an index whose stat data describes it as it is
/// (owned by the agent's identity when the runner is root).
#[tokio::test]
async fn a_revision_tree_is_written_once_and_its_index_describes_it() {
    use quest_runner::workspace::revision_tree;
    use std::os::unix::fs::MetadataExt;
    let repo = Repo::new();
    let rev = repo.commit(&[("README.md", "hello\n"), ("src/lib.rs", "fn f() {}\n")]);
    let (_state_dir, state) = state_after_one_job(&repo, &rev).await;
    let bare = bare_clone_path(&state, &repo.src().to_string_lossy());
    let hand_over = is_root().then_some(quest_runner::run::confine::chown_tree);
    let tree = revision_tree::ensure(&state, &bare, &rev, hand_over)
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(tree.files.join("src/lib.rs")).unwrap(),
        "fn f() {}\n"
    );
    assert!(!tree.files.join(".git").exists(), "no git data in the tree");
    let trees = state.root().join(revision_tree::TREES_DIR);
    assert_eq!(std::fs::metadata(&trees).unwrap().mode() & 0o777, 0o700);
    let leftovers: Vec<_> = std::fs::read_dir(tree.files.parent().unwrap().parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        leftovers.len(),
        1,
        "only the tree, no temp dir: {leftovers:?}"
    );
    if is_root() {
        let owner = std::fs::metadata(tree.files.join("README.md"))
            .unwrap()
            .uid();
        assert_eq!(owner, quest_runner::sandbox::boundary::AGENT_ID);
    }
    // Written once: a second job at the revision finds it as it was.
    let ino = std::fs::metadata(tree.files.join("README.md"))
        .unwrap()
        .ino();
    let again = revision_tree::ensure(&state, &bare, &rev, hand_over)
        .await
        .unwrap();
    assert_eq!(again, tree);
    assert_eq!(
        std::fs::metadata(again.files.join("README.md"))
            .unwrap()
            .ino(),
        ino
    );
    assert!(stat_clean(&bare, &tree.files, &tree.index, false));
    // Not vacuous: a file whose stat changed (its content did not) is reported.
    let touched = std::fs::File::options()
        .write(true)
        .open(tree.files.join("README.md"))
        .unwrap();
    touched
        .set_modified(std::time::SystemTime::now() + Duration::from_secs(5))
        .unwrap();
    assert!(!stat_clean(&bare, &tree.files, &tree.index, false));
}

/// The overlay a job would get (measured by `cargo bench --bench workspace`; not yet what jobs
/// get): as the agent's identity, git finds the tree clean by stat alone, what it writes lands
/// in its upper layer only, and the tree itself stays out of its reach.
#[tokio::test]
async fn through_an_overlay_the_agent_sees_the_tree_clean_and_writes_only_its_layer() {
    use quest_runner::workspace::revision_tree;
    use std::os::unix::fs::PermissionsExt;
    if !is_root() {
        eprintln!("skipped: mounting an overlay and the agent's identity need root");
        return;
    }
    let repo = Repo::new();
    let rev = repo.commit(&[("README.md", "hello\n")]);
    let (state_dir, state) = state_after_one_job(&repo, &rev).await;
    // Searchable by anyone down to the trees directory, so the modes of the runner's own
    // directories above the tree (owner only) are what stop the agent.
    std::fs::set_permissions(state_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bare = bare_clone_path(&state, &repo.src().to_string_lossy());
    let hand_over = Some(quest_runner::run::confine::chown_tree);
    let tree = revision_tree::ensure(&state, &bare, &rev, hand_over)
        .await
        .unwrap();
    let job = tempfile::tempdir().unwrap();
    std::fs::set_permissions(job.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let [upper, work, merged, gitdir] = ["upper", "work", "merged", "git"].map(|d| {
        let p = job.path().join(d);
        std::fs::create_dir(&p).unwrap();
        p
    });
    quest_runner::run::confine::chown_tree(&upper).unwrap();
    git(&gitdir, &["init", "-q", "--bare"]);
    quest_runner::run::confine::chown_tree(&gitdir).unwrap();
    let index = job.path().join("index");
    std::fs::copy(&tree.index, &index).unwrap();
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        tree.files.display(),
        upper.display(),
        work.display()
    );
    let mounted = std::process::Command::new("mount")
        .args(["-t", "overlay", "overlay", "-o", &opts])
        .arg(&merged)
        .status()
        .unwrap();
    assert!(mounted.success());
    let as_agent = |script: &str| {
        let id = quest_runner::sandbox::boundary::AGENT_ID.to_string();
        std::process::Command::new("setpriv")
            .args(["--reuid", &id, "--regid", &id, "--clear-groups"])
            .args(["sh", "-c", script])
            .status()
            .unwrap()
            .success()
    };
    let clean = stat_clean(&gitdir, &merged, &index, true);
    let wrote = as_agent(&format!("echo more >> {}/README.md", merged.display()));
    let direct = as_agent(&format!("echo more >> {}/README.md", tree.files.display()));
    let _ = rustix::mount::unmount(&merged, rustix::mount::UnmountFlags::DETACH);
    assert!(
        clean,
        "the tree's index is clean through the overlay, by stat"
    );
    assert!(wrote, "the agent writes through the overlay");
    assert_eq!(
        std::fs::read_to_string(upper.join("README.md")).unwrap(),
        "hello\nmore\n"
    );
    assert!(!direct, "the tree itself is out of the agent's reach");
    assert_eq!(
        std::fs::read_to_string(tree.files.join("README.md")).unwrap(),
        "hello\n"
    );
}
