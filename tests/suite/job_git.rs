//! The runner's git on a job's git data, which the job wrote: its commits reach the shared
//! clone only as verified objects, and nothing it plants in its store or checkout runs a
//! program, redirects, or stalls the runner's git. Each attack is planted here directly (as
//! an unconfined job would), then the runner's own code reads the result; the boundary suite
//! runs the same attacks from inside both agents' sandboxes.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use quest_runner::git_objects::has_object;

use quest_runner::state::StateDir;
use quest_runner::workspace::job_git::JobGit;
use quest_runner::workspace::Workspace;
use support::workspace_job as job;
use support::*;

/// A prepared workspace of a one-commit repository, and where its state lives.
async fn workspace(files: &[(&str, &str)]) -> (Repo, tempfile::TempDir, Workspace, String) {
    let repo = Repo::new();
    let rev = repo.commit(files);
    let state_dir = tempfile::tempdir().unwrap();
    let ws = Workspace::prepare(
        &StateDir::at(state_dir.path()),
        &job("j", &repo.src(), &rev),
    )
    .await
    .unwrap();
    (repo, state_dir, ws, rev)
}

/// The path of a loose object in `objects`.
fn loose(objects: &Path, oid: &str) -> PathBuf {
    objects.join(&oid[..2]).join(&oid[2..])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_commits_reach_the_shared_clone_through_a_verifying_fetch() {
    let (_repo, _state, ws, rev) = workspace(&[("a", "a\n")]).await;
    let p = ws.paths.clone();
    std::fs::write(p.checkout.join("b"), "b\n").unwrap();
    git(&p.checkout, &["add", "b"]);
    git(&p.checkout, &["commit", "-qm", "agent"]);
    let made = git(&p.checkout, &["rev-parse", "HEAD"]);
    assert!(
        has_object(&p.git_store, &made).unwrap() && !has_object(&p.bare_clone, &made).unwrap(),
        "the job's commit is written into its own store, not the shared clone"
    );
    let (head, commits) = ws.commits_since("j", &rev).await.unwrap();
    assert_eq!(head, made);
    assert_eq!(commits, vec![made.clone()]);
    assert_eq!(
        git(&p.bare_clone, &["rev-parse", "refs/quest/jobs/j"]),
        made
    );
    assert_eq!(git(&p.bare_clone, &["show", &format!("{made}:b")]), "b");
}

/// A state directory reached through a link (`/var/lib` on another disk): git writes real
/// paths, and the store names the shared objects by theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_dir_behind_a_link_works() {
    let repo = Repo::new();
    let rev = repo.commit(&[("a", "a\n")]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("real")).unwrap();
    std::os::unix::fs::symlink("real", dir.path().join("link")).unwrap();
    let state = StateDir::at(dir.path().join("link/state"));
    let ws = Workspace::prepare(&state, &job("l", &repo.src(), &rev))
        .await
        .unwrap();
    let p = ws.paths.clone();
    let alternates = std::fs::read_to_string(p.git_store.join("objects/info/alternates")).unwrap();
    assert!(alternates.contains("/real/state/repos/"), "{alternates}");
    assert_eq!(
        std::fs::read_to_string(p.checkout.join("a")).unwrap(),
        "a\n"
    );
    assert_eq!(ws.commits_since("l", &rev).await.unwrap().0, rev);
}

/// Git does not check a loose object's hash when it reads one, but a fetch hashes what it
/// receives: an object whose content is not what its name says never reaches the shared clone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_that_is_not_what_its_name_says_is_refused() {
    let (_repo, _state, ws, rev) = workspace(&[("a", "a\n")]).await;
    let p = ws.paths.clone();
    std::fs::write(p.checkout.join("b"), "honest\n").unwrap();
    git(&p.checkout, &["add", "b"]);
    git(&p.checkout, &["commit", "-qm", "agent"]);
    let blob = git(&p.checkout, &["rev-parse", "HEAD:b"]);
    let evil = git(&p.checkout, &["hash-object", "-w", "--stdin"]);
    let objects = p.git_store.join("objects");
    let target = loose(&objects, &blob);
    std::fs::remove_file(&target).unwrap();
    std::fs::copy(loose(&objects, &evil), &target).unwrap();
    let err = ws.commits_since("j", &rev).await.unwrap_err().to_string();
    assert!(err.contains("could not be kept"), "{err}");
    assert!(!has_object(&p.bare_clone, &blob).unwrap());
    let refs = git(&p.bare_clone, &["for-each-ref", "refs/quest"]);
    assert!(refs.is_empty(), "no ref to what failed: {refs}");
}

/// A submodule whose own config sets a clean filter (racily clean, so any status hashes it),
/// and a rewritten `commondir` naming a config with a filter for every file: the runner's
/// status and import run neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_filters_and_a_rewritten_commondir_run_nothing() {
    let (_repo, state, ws, rev) = workspace(&[("a", "a\n"), ("README.md", "r\n")]).await;
    let p = ws.paths.clone();
    let marker = state.path().join("filter-ran");
    let filter = format!("touch {}; cat", marker.display());

    let sub = p.checkout.join("sub");
    std::fs::create_dir(&sub).unwrap();
    git(&sub, &["init", "-q"]);
    std::fs::write(sub.join("f"), "f\n").unwrap();
    git(&sub, &["add", "f"]);
    git(&sub, &["commit", "-qm", "sub"]);
    git(&sub, &["config", "filter.qr.clean", &filter]);
    std::fs::write(sub.join(".gitattributes"), "* filter=qr\n").unwrap();
    git(&p.checkout, &["add", "sub"]);
    git(&p.checkout, &["commit", "-qm", "gitlink"]);

    let evil = p.worktree_admin.join("evil");
    std::fs::create_dir(&evil).unwrap();
    std::os::unix::fs::symlink(p.git_store.join("objects"), evil.join("objects")).unwrap();
    std::os::unix::fs::symlink(p.git_store.join("refs"), evil.join("refs")).unwrap();
    std::fs::copy(p.git_store.join("HEAD"), evil.join("HEAD")).unwrap();
    std::fs::write(
        evil.join("config"),
        format!("[core]\n\tfsmonitor = {filter}\n[filter \"qrx\"]\n\tclean = {filter}\n\tprocess = {filter}\n"),
    )
    .unwrap();
    std::fs::write(p.checkout.join(".gitattributes"), "* filter=qrx\n").unwrap();
    std::fs::write(
        p.worktree_admin.join("commondir"),
        format!("{}\n", evil.display()),
    )
    .unwrap();
    for file in [sub.join("f"), p.checkout.join("README.md")] {
        let status = std::process::Command::new("touch")
            .args(["-d", "2099-01-01"])
            .arg(&file)
            .status()
            .unwrap();
        assert!(status.success());
    }
    // Plain git, as the runner ran it before: both fire.
    // (`safe.directory`: a root runner's checkout belongs to the agent's identity.)
    let plain = std::process::Command::new("git")
        .current_dir(&p.checkout)
        .args(["-c", "safe.directory=*", "status", "--porcelain"])
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(marker.exists(), "the planted filters are real: {plain:?}");
    std::fs::remove_file(&marker).unwrap();

    let listed = ws.uncommitted().await.unwrap();
    let (head, _) = ws.commits_since("j", &rev).await.unwrap();
    assert!(!marker.exists(), "a planted filter ran on the host");
    assert!(listed.contains(&".gitattributes".to_string()), "{listed:?}");
    assert!(!listed.iter().any(|l| l.starts_with("sub")), "{listed:?}");
    assert_eq!(
        head,
        git(&p.bare_clone, &["rev-parse", "refs/quest/jobs/j"])
    );
}

/// A FIFO where git expects the HEAD or the index would block the runner's git for ever: it
/// is stopped at its limit, and the job's end goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_for_head_or_index_stops_at_the_limit() {
    let (_repo, state, ws, _rev) = workspace(&[("a", "a\n")]).await;
    let p = ws.paths.clone();
    let mut git_data = JobGit::at(&state.path().join("jobs/j").canonicalize().unwrap());
    git_data.limit = Duration::from_secs(2);
    for name in ["index", "HEAD"] {
        let path = p.worktree_admin.join(name);
        std::fs::remove_file(&path).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(made.success());
        let started = std::time::Instant::now();
        let err = match name {
            "index" => git_data.status().await.map(|_| ()),
            _ => git_data.head().await.map(|_| ()),
        }
        .unwrap_err()
        .to_string();
        assert!(err.contains("did not finish"), "{name}: {err}");
        assert!(started.elapsed() < Duration::from_secs(10), "{name}");
    }
    // In the objects the import reads: it stops at the limit too, and it never waited for
    // the shared clone's lock (which other jobs of the repository need) while it stalled.
    let head = git(&p.bare_clone, &["rev-parse", "refs/heads/main"]);
    for fifo in ["HEAD", "index"] {
        std::fs::remove_file(p.worktree_admin.join(fifo)).unwrap();
    }
    std::fs::write(p.worktree_admin.join("HEAD"), format!("{head}\n")).unwrap();
    git(&p.checkout, &["read-tree", "HEAD"]);
    std::fs::write(p.checkout.join("b"), "b\n").unwrap();
    git(&p.checkout, &["add", "b"]);
    git(&p.checkout, &["commit", "-qm", "agent"]);
    let made = git(&p.checkout, &["rev-parse", "HEAD"]);
    let object = loose(&p.git_store.join("objects"), &made);
    std::fs::remove_file(&object).unwrap();
    assert!(std::process::Command::new("mkfifo")
        .arg(&object)
        .status()
        .unwrap()
        .success());
    let locked = std::sync::atomic::AtomicBool::new(false);
    let lock = async {
        locked.store(true, std::sync::atomic::Ordering::SeqCst);
        Ok::<_, quest_runner::workspace::WorkspaceError>(())
    };
    let started = std::time::Instant::now();
    let err = git_data
        .import(&p.bare_clone, &made, "refs/quest/jobs/j", lock)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("did not finish"), "import: {err}");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        !locked.load(std::sync::atomic::Ordering::SeqCst),
        "the lock was taken"
    );
    drop(ws);
    assert!(!p.git_store.exists());
}

/// A job can leave any number of files: the runner keeps at most a mebibyte of the listing,
/// and says where it stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_of_endless_files_is_cut() {
    let (_repo, _state, ws, _rev) = workspace(&[("a", "a\n")]).await;
    let many = ws.paths.checkout.join("many");
    std::fs::create_dir(&many).unwrap();
    let long = "x".repeat(200);
    for n in 0..6000 {
        std::fs::write(many.join(format!("{long}{n}")), "").unwrap();
    }
    let listed = ws.uncommitted().await.unwrap();
    assert_eq!(
        listed.last().unwrap(),
        quest_runner::workspace::job_git::LISTING_CUT
    );
    assert!(
        listed.len() > 1000 && listed.len() < 6000,
        "{}",
        listed.len()
    );
    let kept: usize = listed.iter().map(|l| l.len() + 4).sum();
    assert!(kept <= (1 << 20) + 200, "{kept}");
    assert!(listed[..listed.len() - 1]
        .iter()
        .all(|l| l.starts_with("many/") && l.len() > 205));
}

/// A shared clone an older runner let jobs write: what a job could plant beside the objects
/// (a replace ref, a commit-graph, worktree entries) is removed and every object hashed
/// again. Sound, it is kept with its refs; with a rewritten object, it is set aside for the
/// operator and the repository cloned again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clone_jobs_could_write_is_verified_before_use() {
    let repo = Repo::new();
    let rev = repo.commit(&[("a", "honest\n")]);
    let state_dir = tempfile::tempdir().unwrap();
    let state = StateDir::at(state_dir.path());
    drop(
        Workspace::prepare(&state, &job("first", &repo.src(), &rev))
            .await
            .unwrap(),
    );
    let bare = quest_runner::workspace::bare_clone_path(&state, &repo.src().to_string_lossy());
    let make_older = |bare: &Path| {
        std::fs::remove_file(bare.join("info/quest-runner")).unwrap();
        std::fs::create_dir_all(bare.join("worktrees/old-job")).unwrap();
    };

    // Sound, but with a replace ref swapping the file's blob.
    make_older(&bare);
    git(&bare, &["update-ref", "refs/quest/jobs/old", &rev]);
    let blob = git(&bare, &["rev-parse", &format!("{rev}:a")]);
    let evil = {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "echo evil | git --git-dir {} hash-object -w --stdin",
                bare.display()
            ))
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    git(
        &bare,
        &["update-ref", &format!("refs/replace/{blob}"), &evil],
    );
    git(
        &bare,
        &[
            "-c",
            "core.commitGraph=true",
            "commit-graph",
            "write",
            "--reachable",
        ],
    );
    let ws = Workspace::prepare(&state, &job("second", &repo.src(), &rev))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.paths.checkout.join("a")).unwrap(),
        "honest\n"
    );
    drop(ws);
    assert!(!bare.join("refs/replace").exists());
    assert!(!bare.join("worktrees").exists());
    assert!(!bare.join("objects/info/commit-graph").exists());
    assert_eq!(
        git(&bare, &["rev-parse", "refs/quest/jobs/old"]),
        rev,
        "refs kept"
    );

    // Its blob overwritten (git reads loose objects without checking their hash).
    make_older(&bare);
    let target = loose(&bare.join("objects"), &blob);
    std::fs::remove_file(&target).unwrap();
    std::fs::copy(loose(&bare.join("objects"), &evil), &target).unwrap();
    let ws = Workspace::prepare(&state, &job("third", &repo.src(), &rev))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.paths.checkout.join("a")).unwrap(),
        "honest\n"
    );
    drop(ws);
    let aside: Vec<String> = std::fs::read_dir(state_dir.path().join("repos"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".unverified-"))
        .collect();
    assert_eq!(aside.len(), 1, "set aside for the operator: {aside:?}");
}

/// `gc` deletes the refs that keep removed jobs' commits in the shared clone — those of every
/// job whose directory is gone — and never one of a job whose directory is there, nor a ref
/// whose name is no job id (not the runner's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refs_of_removed_jobs_are_deleted_from_the_shared_clone() {
    use quest_runner::workspace::{bare_clone_path, forget_removed_jobs, job_root};
    let repo = Repo::new();
    let rev = repo.commit(&[("a", "a\n")]);
    let state_dir = tempfile::tempdir().unwrap();
    let state = StateDir::at(state_dir.path());
    let mut made = Vec::new();
    for id in ["kept", "removed"] {
        let ws = Workspace::prepare(&state, &job(id, &repo.src(), &rev))
            .await
            .unwrap();
        std::fs::write(ws.paths.checkout.join(id), "x\n").unwrap();
        git(&ws.paths.checkout, &["add", id]);
        git(&ws.paths.checkout, &["commit", "-qm", id]);
        let (head, commits) = ws.commits_since(id, &rev).await.unwrap();
        assert_eq!(commits.len(), 1);
        made.push(head);
    }
    let bare = bare_clone_path(&state, &repo.src().to_string_lossy());
    git(&bare, &["update-ref", "refs/quest/jobs/not/a-job", &rev]);
    std::fs::remove_dir_all(job_root(&state, "removed")).unwrap();

    let deleted = forget_removed_jobs(&state).await.unwrap();
    assert_eq!(deleted, ["refs/quest/jobs/removed"]);
    let refs = git(
        &bare,
        &[
            "for-each-ref",
            "--format=%(refname) %(objectname)",
            "refs/quest/jobs/",
        ],
    );
    assert_eq!(
        refs,
        format!(
            "refs/quest/jobs/kept {}\nrefs/quest/jobs/not/a-job {rev}",
            made[0]
        )
    );
    // The removed job's commit is no longer reachable: git's gc may now drop it.
    let reachable = git(&bare, &["rev-list", "--all"]);
    assert!(!reachable.contains(&made[1]), "{reachable}");
    assert!(reachable.contains(&made[0]));
    assert!(forget_removed_jobs(&state).await.unwrap().is_empty());
}
