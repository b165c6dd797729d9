//! A job's checkout layered on its revision's shared tree (issue 31, `workspace::overlay`), as
//! every job gets it (a runner that is not root in a namespace of the job's own, issue 42): ready without writing the revision's files, clean to
//! git by stat alone, everything the job writes (files, deletions, its commits) in its own
//! layer, the tree unchanged for the next job, and nothing left mounted or on disk at its end,
//! also when the runner died mid-job.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use quest_runner::state::StateDir;
use quest_runner::workspace::namespace::JobNamespace;
use quest_runner::workspace::{revision_tree, sweep_abandoned, Workspace};
use support::workspace_job as job;
use support::*;

fn root_or_skip() -> bool {
    let root = rustix::process::geteuid().is_root();
    if !root {
        eprintln!("skipped: a runner that is not root mounts no checkout in its own namespace");
    }
    root
}

/// Whether `path` is a mount point of this process's mount namespace.
fn mounted(path: &Path) -> bool {
    let path = path.to_string_lossy();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(&path))
}

/// The checkout as this process reads it: at its path for a root runner, through the
/// namespace that alone holds it for any other (`workspace::owned_mount`).
fn seen(ws: &Workspace) -> PathBuf {
    ws.checkout_view()
}

/// Whether the job's checkout is mounted where its processes start.
fn is_mounted(ws: &Workspace) -> bool {
    let checkout = ws.paths.checkout.to_string_lossy();
    match ws.namespace() {
        Some(ns) => mounts_seen_in(ns)
            .lines()
            .any(|l| l.split(' ').nth(4) == Some(&checkout)),
        None => mounted(&ws.paths.checkout),
    }
}

/// Git in the job's checkout, as its processes run it (in its namespace, if it has one).
fn git_at(ws: &Workspace, args: &[&str]) -> String {
    git_with(&ws.paths.checkout, ws.namespace(), args)
}

fn git_in(dir: &Path, args: &[&str]) -> String {
    git_with(dir, None, args)
}

fn git_with(dir: &Path, ns: Option<&std::sync::Arc<JobNamespace>>, args: &[&str]) -> String {
    let mut git = std::process::Command::new("git");
    // Entering goes back to the command's directory, so that is set first.
    git.current_dir(dir);
    if let Some(ns) = ns {
        ns.enter(&mut git);
    }
    let out = git
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args([
            "-c",
            "safe.directory=*",
            "-c",
            "user.name=j",
            "-c",
            "user.email=j@example.org",
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn jobs_at_one_revision_share_its_tree_and_write_only_their_own_layer() {
    let repo = Repo::new();
    let rev = repo.commit(&[("README.md", "hello\n"), ("src/lib.rs", "fn f() {}\n")]);
    let state_dir = tempfile::tempdir().unwrap();
    let state = StateDir::at(state_dir.path());
    let first = Workspace::prepare(&state, &job("l1", &repo.src(), &rev))
        .await
        .unwrap();
    let second = Workspace::prepare(&state, &job("l2", &repo.src(), &rev))
        .await
        .unwrap();
    let bare = first.paths.bare_clone.clone();
    let tree = revision_tree::tree_dir(&state, &bare, &rev).join("files");
    for ws in [&first, &second] {
        let layer = ws
            .layer
            .as_ref()
            .expect("the runner layers the checkout, root or not");
        assert_eq!(layer.lower, std::fs::canonicalize(&tree).unwrap());
        assert!(is_mounted(ws), "{}", ws.paths.checkout.display());
        // A runner that is not root has it mounted in the job's namespace alone.
        let root = rustix::process::geteuid().is_root();
        assert_eq!(ws.namespace().is_some(), !root);
        assert_eq!(mounted(&ws.paths.checkout), root);
        assert_eq!(ws.uncommitted().await.unwrap(), Vec::<String>::new());
        assert_eq!(
            std::fs::read_to_string(seen(ws).join("README.md")).unwrap(),
            "hello\n"
        );
    }
    // The first job edits, deletes, adds and commits; all of it lands in its layer.
    let c = &seen(&first);
    std::fs::write(c.join("README.md"), "edited\n").unwrap();
    std::fs::remove_file(c.join("src/lib.rs")).unwrap();
    std::fs::write(c.join("new.txt"), "new\n").unwrap();
    let status = first.uncommitted().await.unwrap();
    assert_eq!(status, ["README.md", "src/lib.rs", "new.txt"], "{status:?}");
    git_at(&first, &["add", "-A"]);
    git_at(&first, &["commit", "-q", "-m", "job's work"]);
    let (head, commits) = first.commits_since("l1", &rev).await.unwrap();
    assert_eq!(commits, std::slice::from_ref(&head));
    let upper = first.layer.clone().unwrap().upper;
    assert_eq!(
        std::fs::read_to_string(upper.join("README.md")).unwrap(),
        "edited\n"
    );
    // The shared tree and the other job saw none of it.
    assert_eq!(
        std::fs::read_to_string(tree.join("README.md")).unwrap(),
        "hello\n"
    );
    assert!(tree.join("src/lib.rs").is_file() && !tree.join("new.txt").exists());
    let other = &seen(&second);
    assert_eq!(
        std::fs::read_to_string(other.join("README.md")).unwrap(),
        "hello\n"
    );
    assert!(other.join("src/lib.rs").is_file() && !other.join("new.txt").exists());
    assert_eq!(second.uncommitted().await.unwrap(), Vec::<String>::new());
    // What the disk limit counts of the checkout is the job's layer.
    let trees = first.disk_trees();
    let counted = trees.iter().find(|t| t.label == "checkout").unwrap();
    assert_eq!(counted.path, upper);
    // Its end unmounts and removes its layer; the tree stays for the next job.
    let checkout = first.paths.checkout.clone();
    let layer_dir = upper.parent().unwrap().to_path_buf();
    drop(first);
    assert!(!mounted(&checkout) && !checkout.exists() && !layer_dir.exists());
    assert!(tree.join("README.md").is_file());
    let third = Workspace::prepare(&state, &job("l3", &repo.src(), &rev))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(seen(&third).join("README.md")).unwrap(),
        "hello\n"
    );
    // The first job's commit is in the shared clone, as from a full checkout.
    let kind = git_in(&bare, &["cat-file", "-t", &head]);
    assert_eq!(kind.trim(), "commit");
}

#[tokio::test]
async fn the_sweep_unmounts_what_a_killed_runner_left_mounted() {
    if !root_or_skip() {
        return;
    }
    let repo = Repo::new();
    let rev = repo.commit(&[("a", "a")]);
    let state_dir = tempfile::tempdir().unwrap();
    let state = StateDir::at(state_dir.path());
    let ws = Workspace::prepare(&state, &job("k1", &repo.src(), &rev))
        .await
        .unwrap();
    let checkout = ws.paths.checkout.clone();
    let layer = ws.layer.clone().unwrap();
    std::fs::write(checkout.join("written"), "by the job").unwrap();
    assert!(mounted(&checkout));
    // A runner killed with SIGKILL: nothing ran its cleanup, and the kernel closed its lock.
    std::mem::forget(ws);
    release_locks_of(&state_dir.path().join("jobs/k1/lock"));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut swept = sweep_abandoned(&state);
    while swept == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        swept = sweep_abandoned(&state);
    }
    assert_eq!(swept, 1);
    assert!(!mounted(&checkout) && !checkout.exists());
    assert!(!layer.upper.exists() && !layer.work.exists());
    assert!(layer.lower.join("a").is_file() && !layer.lower.join("written").exists());
}

#[tokio::test]
async fn gc_removes_the_trees_no_job_holds() {
    if !root_or_skip() {
        return;
    }
    let repo = Repo::new();
    let old = repo.commit(&[("a", "old")]);
    let new = repo.commit(&[("a", "new")]);
    let state_dir = tempfile::tempdir().unwrap();
    let state = StateDir::at(state_dir.path());
    drop(
        Workspace::prepare(&state, &job("g1", &repo.src(), &old))
            .await
            .unwrap(),
    );
    let running = Workspace::prepare(&state, &job("g2", &repo.src(), &new))
        .await
        .unwrap();
    let bare = running.paths.bare_clone.clone();
    let [old_tree, new_tree] = [&old, &new].map(|r| revision_tree::tree_dir(&state, &bare, r));
    assert!(old_tree.is_dir() && new_tree.is_dir());
    // A day's age keeps both: each was used just now.
    assert!(revision_tree::gc(&state, Duration::from_secs(86400)).is_empty());
    // No age: the tree of the job that ended goes, the running job's stays, and it still
    // reads its checkout.
    let removed = gc_removing(&state, 1);
    assert_eq!(removed.len(), 1, "{removed:?}");
    assert!(removed[0].ends_with(&old), "{removed:?}");
    assert!(!old_tree.exists() && new_tree.is_dir());
    let a = running.paths.checkout.join("a");
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "new");
    // Its end lets the tree go too; a job at a removed revision gets it written again.
    drop(running);
    let removed = gc_removing(&state, 1);
    assert_eq!(removed.len(), 1, "{removed:?}");
    assert!(!new_tree.exists());
    let again = Workspace::prepare(&state, &job("g3", &repo.src(), &old))
        .await
        .unwrap();
    let a = again.paths.checkout.join("a");
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "old");
    let leftovers: Vec<_> = std::fs::read_dir(old_tree.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(leftovers.len(), 1, "only the rewritten tree: {leftovers:?}");
}

#[tokio::test]
async fn the_agents_identity_writes_anywhere_in_its_layered_checkout() {
    if !root_or_skip() {
        return;
    }
    let repo = Repo::new();
    let rev = repo.commit(&[("README.md", "hello\n"), (".claude/keep", "")]);
    let state_dir = tempfile::tempdir().unwrap();
    let state = StateDir::at(state_dir.path());
    let ws = Workspace::prepare(&state, &job("a1", &repo.src(), &rev))
        .await
        .unwrap();
    quest_runner::run::confine::hand_over(&ws.paths).unwrap();
    // Searchable down to the checkout, as the runner's grant of traversal makes it for a job.
    let root = ws.paths.checkout.parent().unwrap();
    for dir in [state_dir.path(), root.parent().unwrap(), root] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711)).unwrap();
    }
    let id = quest_runner::sandbox::boundary::AGENT_ID.to_string();
    let c = ws.paths.checkout.display().to_string();
    let script = format!(
        "cd {c} && touch at-root && touch .claude/settings.local.json && echo more >> README.md \
         && mkdir -p new/dir && rm .claude/keep && echo wrote"
    );
    let out = std::process::Command::new("setpriv")
        .args([
            "--reuid",
            &id,
            "--regid",
            &id,
            "--clear-groups",
            "sh",
            "-c",
            &script,
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "wrote\n", "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn jobs_starting_together_at_a_new_revision_share_one_tree_and_leave_nothing_behind() {
    if !root_or_skip() {
        return;
    }
    let repo = Repo::new();
    let rev = repo.commit(&[("a", "a")]);
    let state_dir = tempfile::tempdir().unwrap();
    let state = std::sync::Arc::new(StateDir::at(state_dir.path()));
    // The shared clone first, as any job's fetch makes it.
    drop(
        Workspace::prepare(&state, &job("t0", &repo.src(), &rev))
            .await
            .unwrap(),
    );
    let bare = quest_runner::workspace::bare_clone_path(&state, &repo.src().to_string_lossy());
    let tree = revision_tree::tree_dir(&state, &bare, &rev);
    assert_eq!(gc_removing(&state, 1).len(), 1);
    let tasks: Vec<_> = (0..4)
        .map(|i| {
            let (state, src, rev) = (state.clone(), repo.src(), rev.clone());
            tokio::spawn(async move {
                Workspace::prepare(&state, &job(&format!("t{}", i + 1), &src, &rev)).await
            })
        })
        .collect();
    let mut inodes = Vec::new();
    let mut held = Vec::new();
    for task in tasks {
        let ws = task.await.unwrap().unwrap();
        use std::os::unix::fs::MetadataExt;
        inodes.push(
            std::fs::metadata(&ws.layer.as_ref().unwrap().lower)
                .unwrap()
                .ino(),
        );
        held.push(ws);
    }
    inodes.dedup();
    assert_eq!(inodes.len(), 1, "one tree for all four");
    let names: Vec<_> = std::fs::read_dir(tree.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        std::slice::from_ref(&rev),
        "no temp dir or lock left beside the tree"
    );
}

/// The mount points a command started in `ns` sees, as its own `mountinfo` lists them.
fn mounts_seen_in(ns: &std::sync::Arc<JobNamespace>) -> String {
    let mut cat = std::process::Command::new("cat");
    cat.arg("/proc/self/mountinfo");
    ns.enter(&mut cat);
    let out = cat.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// bubblewrap as the job's processes start it (`/` bound recursively, every mount in it then
/// remounted read-only), in `ns` or, without one, in the runner's namespace.
fn bwrap_starts(ns: Option<&std::sync::Arc<JobNamespace>>, checkout: &Path) -> Result<(), String> {
    let mut cmd = std::process::Command::new("bwrap");
    let c = checkout.to_string_lossy();
    cmd.args(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"])
        .args(["--bind", &c, &c, "sh", "-c", "echo ran > \"$0\"/proof", &c])
        .current_dir("/");
    if let Some(ns) = ns {
        ns.enter(&mut cmd);
    }
    let out = cmd.output().map_err(|e| e.to_string())?;
    match out.status.success() {
        true => Ok(()),
        false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}

/// Other jobs' checkouts come and go while a job's processes start: the job's mount
/// namespace holds its own checkout and none of theirs, so bubblewrap, which copies and
/// remounts every mount it finds, never meets one vanishing (as it did in the runner's
/// namespace: "Unable to apply mount flags: remount .../<other>/checkout", ~3% of starts in
/// `serve_pg`). The same starts in the runner's namespace are the control, counted and shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_namespace_holds_no_other_checkout_while_others_start_and_end() {
    if !root_or_skip() {
        return;
    }
    let repo = Repo::new();
    let rev = repo.commit(&[("README.md", "hello\n")]);
    let state_dir = tempfile::tempdir().unwrap();
    let state = std::sync::Arc::new(StateDir::at(state_dir.path()));
    let src = repo.src();
    let prepare = move |id: String| {
        let (state, src, rev) = (state.clone(), src.clone(), rev.clone());
        async move {
            Workspace::prepare(&state, &job(&id, &src, &rev))
                .await
                .unwrap()
        }
    };
    let mine = prepare("mine".into()).await;
    let mut standing = Vec::new();
    for i in 0..24 {
        standing.push(prepare(format!("standing{i}")).await);
    }
    let made = std::time::Instant::now();
    let ns = JobNamespace::new(Some(&mine.paths.checkout), None).unwrap();
    let made = made.elapsed();
    let seen = mounts_seen_in(&ns);
    let host = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    for other in &standing {
        let point = format!(" {} ", other.paths.checkout.display());
        assert!(
            host.contains(&point),
            "the control: mounted in the runner's namespace"
        );
        assert!(
            !seen.contains(&point),
            "another job's checkout in the job's namespace"
        );
    }
    assert!(seen.contains(&format!(" {} ", mine.paths.checkout.display())));
    // Jobs end and start throughout; the job's processes start meanwhile.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn: Vec<_> = (0..2)
        .map(|task| {
            let (stop, prepare) = (stop.clone(), prepare.clone());
            tokio::spawn(async move {
                let mut cycles = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    drop(prepare(format!("churn{task}-{cycles}")).await);
                    cycles += 1;
                }
                cycles
            })
        })
        .collect();
    let checkout = mine.paths.checkout.clone();
    let starts = tokio::task::spawn_blocking(move || {
        let mut both = (Vec::new(), Vec::new());
        for _ in 0..150 {
            both.0.push(bwrap_starts(Some(&ns), &checkout));
            both.1.push(bwrap_starts(None, &checkout));
        }
        both
    })
    .await
    .unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut cycles = 0;
    for task in churn {
        cycles += task.await.unwrap();
    }
    let failed =
        |r: &[Result<(), String>]| r.iter().filter_map(|r| r.clone().err()).collect::<Vec<_>>();
    let (inside, control) = (failed(&starts.0), failed(&starts.1));
    println!(
        "the job's namespace made in {:.1} ms beside 24 other checkouts; {cycles} jobs started \
         and ended meanwhile; bubblewrap failed {} of 150 starts in the job's namespace, {} of \
         150 in the runner's (control){}",
        made.as_secs_f64() * 1000.0,
        inside.len(),
        control.len(),
        control
            .first()
            .map(|e| format!(": {e}"))
            .unwrap_or_default()
    );
    assert!(cycles > 0, "no job ended while the starts ran");
    assert!(inside.is_empty(), "{inside:?}");
    // The starts ran, and wrote through to the job's own layer.
    let upper = &mine.layer.as_ref().unwrap().upper;
    assert_eq!(
        std::fs::read_to_string(upper.join("proof")).unwrap(),
        "ran\n"
    );
}

/// A new revision near a tree the clone has costs what it changes: its tree is a delta (the
/// changed and added files, a whiteout for the removed one) over the cached tree, a job's
/// checkout stacks the two and sees exactly the new revision, clean to git, and `gc` keeps the
/// base while the delta lies on it.
#[tokio::test]
async fn a_revision_near_a_cached_one_writes_only_what_changed() {
    let repo = Repo::new();
    let mut files: Vec<(String, String)> = (0..12)
        .map(|i| (format!("dir/f{i}"), format!("file {i}\n")))
        .collect();
    files.push(("a".into(), "a\n".into()));
    files.push(("b".into(), "b\n".into()));
    let as_refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, c)| (n.as_str(), c.as_str()))
        .collect();
    let first = repo.commit(&as_refs);
    let state_dir = tempfile::tempdir().unwrap();
    let state = StateDir::at(state_dir.path());
    drop(
        Workspace::prepare(&state, &job("d1", &repo.src(), &first))
            .await
            .unwrap(),
    );
    std::fs::remove_file(repo.src().join("b")).unwrap();
    let second = repo.commit(&[("a", "changed\n"), ("dir/new", "new\n")]);
    let ws = Workspace::prepare(&state, &job("d2", &repo.src(), &second))
        .await
        .unwrap();
    let bare = ws.paths.bare_clone.clone();
    let tree = revision_tree::tree_dir(&state, &bare, &second);
    let base = revision_tree::tree_dir(&state, &bare, &first);
    assert_eq!(
        std::fs::read_to_string(tree.join("base")).unwrap().trim(),
        first
    );
    // The delta holds what changed and nothing else.
    let mut written: Vec<String> = walk(&tree.join("delta"));
    written.sort();
    assert_eq!(
        written,
        ["a", "b (whiteout)", "dir", "dir/new"],
        "{written:?}"
    );
    let layer = ws.layer.as_ref().unwrap();
    assert_eq!(layer.lower, tree.join("delta").canonicalize().unwrap());
    assert_eq!(layer.below, [base.join("files").canonicalize().unwrap()]);
    let c = &seen(&ws);
    assert_eq!(std::fs::read_to_string(c.join("a")).unwrap(), "changed\n");
    assert_eq!(std::fs::read_to_string(c.join("dir/new")).unwrap(), "new\n");
    assert_eq!(
        std::fs::read_to_string(c.join("dir/f3")).unwrap(),
        "file 3\n"
    );
    assert!(!c.join("b").exists());
    assert_eq!(ws.uncommitted().await.unwrap(), Vec::<String>::new());
    assert_eq!(git_at(&ws, &["rev-parse", "HEAD"]).trim(), second);
    // Held, neither goes; unheld, the delta goes first and then its base.
    assert!(revision_tree::gc(&state, Duration::ZERO).is_empty());
    drop(ws);
    let removed = gc_removing(&state, 2);
    assert_eq!(removed.len(), 2, "{removed:?}");
    assert!(!tree.exists() && !base.exists());
}

/// The revision trees' gc, run again until it has removed `want` trees (for at most 5 s): a
/// job's hold is a lock on an open file, and a process another test of the binary forks
/// meanwhile holds a copy of it until its exec, so a tree may stay held a moment after its
/// job is dropped.
fn gc_removing(state: &StateDir, want: usize) -> Vec<String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut removed = revision_tree::gc(state, Duration::ZERO);
    while removed.len() < want && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        removed.extend(revision_tree::gc(state, Duration::ZERO));
    }
    removed
}

/// The entries under `dir`, relative, a whiteout (overlayfs' 0/0 character device) marked.
fn walk(dir: &Path) -> Vec<String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let meta = entry.metadata().unwrap();
        if meta.file_type().is_char_device() && meta.rdev() == 0 {
            out.push(format!("{name} (whiteout)"));
        } else if meta.is_dir() {
            out.push(name.clone());
            out.extend(
                walk(&entry.path())
                    .into_iter()
                    .map(|n| format!("{name}/{n}")),
            );
        } else {
            out.push(name);
        }
    }
    out
}

/// A delta tree whose base went (removed by hand, or a disk restored in part) is set aside and
/// the revision's tree written again: jobs at it still start, with the right files.
#[tokio::test]
async fn a_delta_whose_base_is_gone_is_written_again() {
    if !root_or_skip() {
        return;
    }
    let repo = Repo::new();
    let files: Vec<(String, String)> = (0..8)
        .map(|i| (format!("f{i}"), format!("{i}\n")))
        .collect();
    let as_refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, c)| (n.as_str(), c.as_str()))
        .collect();
    let first = repo.commit(&as_refs);
    let second = repo.commit(&[("f0", "changed\n")]);
    let state_dir = tempfile::tempdir().unwrap();
    let state = StateDir::at(state_dir.path());
    for (id, rev) in [("g1", &first), ("g2", &second)] {
        drop(
            Workspace::prepare(&state, &job(id, &repo.src(), rev))
                .await
                .unwrap(),
        );
    }
    let bare = quest_runner::workspace::bare_clone_path(&state, &repo.src().to_string_lossy());
    let tree = revision_tree::tree_dir(&state, &bare, &second);
    assert!(tree.join("delta").is_dir());
    std::fs::remove_dir_all(revision_tree::tree_dir(&state, &bare, &first)).unwrap();
    let ws = Workspace::prepare(&state, &job("g3", &repo.src(), &second))
        .await
        .unwrap();
    let c = &ws.paths.checkout;
    assert_eq!(std::fs::read_to_string(c.join("f0")).unwrap(), "changed\n");
    assert_eq!(std::fs::read_to_string(c.join("f7")).unwrap(), "7\n");
    assert!(
        tree.join("files").is_dir(),
        "written whole: no base is left"
    );
    assert_eq!(ws.uncommitted().await.unwrap(), Vec::<String>::new());
}
