//! A job's work leaving the host, with real parts: the job's commits imported into the shared
//! clone by the runner's own verifying fetch (its workspace, without an agent), a real
//! `git daemon --enable=receive-pack` on 127.0.0.1 as the remote, fresh clones fetching what
//! was pushed, bundles and patches read back by `git fetch` and `git am`.

use crate::support;
use crate::support::postgres;

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use quest_runner::config::Config;
use quest_runner::job::{Job, Trust};
use quest_runner::run::{JobResult, Outcome};
use quest_runner::state::StateDir;
use quest_runner::workspace::Workspace;
use serde_json::Value;
use support::*;

fn job(id: &str, repo: &Path, rev: &str, trust: Trust) -> Job {
    Job {
        trust,
        ..workspace_job(id, repo, rev)
    }
}

/// A job that made `commits` commits: its workspace prepared by the runner, the commits made
/// in its checkout, brought into the shared clone by the runner (`refs/quest/jobs/<id>`), and
/// its result saved where `run` and `serve` save it. The workspace is gone afterwards.
async fn finished_job(state: &StateDir, job: &Job, commits: usize) -> JobResult {
    let ws = Workspace::prepare(state, job).await.unwrap();
    let checkout = ws.paths.checkout.clone();
    for n in 0..commits {
        std::fs::write(checkout.join(format!("f{n}")), format!("work {n}\n")).unwrap();
        git(&checkout, &["add", "."]);
        git(&checkout, &["commit", "-qm", &format!("agent commit {n}")]);
    }
    let (head, made) = ws.commits_since(&job.id, &job.rev).await.unwrap();
    drop(ws);
    let mut result = JobResult::new(job);
    result.outcome = Outcome::Succeeded;
    result.head = Some(head);
    result.commits = made;
    save(state, &result);
    result
}

fn save(state: &StateDir, result: &JobResult) {
    let file = quest_runner::workspace::job_root(state, &result.job_id).join("result.json");
    std::fs::write(file, serde_json::to_vec_pretty(result).unwrap()).unwrap();
}

fn saved(state: &StateDir, id: &str) -> Value {
    let file = quest_runner::workspace::job_root(state, id).join("result.json");
    serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap()
}

/// A port nothing listens on (yet).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `git daemon` serving (and accepting pushes to) every repository under `base`.
struct Daemon {
    child: Child,
    port: u16,
}

impl Daemon {
    fn start(base: &Path, port: u16) -> Daemon {
        // git-daemon itself, not `git daemon`, whose child would outlive a kill.
        let exec_path = PathBuf::from(git(base, &["--exec-path"]));
        let child = Command::new(exec_path.join("git-daemon"))
            .args([
                "--reuseaddr",
                "--export-all",
                "--enable=receive-pack",
                "--informative-errors",
                "--listen=127.0.0.1",
            ])
            .arg(format!("--port={port}"))
            .arg(format!("--base-path={}", base.display()))
            .arg(base)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .spawn()
            .unwrap();
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "git daemon did not listen"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Daemon { child, port }
    }

    fn url(&self, name: &str) -> String {
        format!("git://127.0.0.1:{}/{name}", self.port)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The origin as a forge holds it: a bare copy of the repository, under `base`.
fn forge_copy(repo: &Repo, base: &Path) -> PathBuf {
    let bare = base.join("r.git");
    git(
        base,
        &[
            "clone",
            "-q",
            "--bare",
            &repo.src().to_string_lossy(),
            "r.git",
        ],
    );
    bare
}

/// The key of `repo` in the config's `push`: the repository as its jobs name it.
fn src_key(repo: &Repo) -> String {
    repo.src().to_string_lossy().into_owned()
}

fn config_with_push(push: Value) -> Config {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(&path, serde_json::json!({ "push": push }).to_string()).unwrap();
    Config::load(&path, true).unwrap()
}

/// What a runner with `config` does at a job's end: the same call `run` and `serve` make.
async fn deliver(state: &StateDir, config: Config, result: &mut JobResult) {
    quest_runner::run::Runner::new(state.clone(), config)
        .deliver(result)
        .await;
    save(state, result);
}

fn runner_cmd(state: &Path, config: Option<&Path>) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_quest-runner"));
    cmd.arg("--state-dir").arg(state);
    if let Some(config) = config {
        cmd.arg("--config").arg(config);
    }
    cmd
}

/// What the tests stand on: a repository at one commit, its copy on a forge (the origin the
/// pushes go to), and a runner state directory.
struct Setup {
    repo: Repo,
    rev: String,
    forge: tempfile::TempDir,
    origin: PathBuf,
    state_dir: tempfile::TempDir,
    state: StateDir,
}

impl Setup {
    fn new() -> Setup {
        let repo = Repo::new();
        let rev = repo.commit_exact(&[("a", "a\n")]);
        let forge = tempfile::tempdir().unwrap();
        let origin = forge_copy(&repo, forge.path());
        let state_dir = tempfile::tempdir().unwrap();
        let state = StateDir::at(state_dir.path());
        Setup {
            repo,
            rev,
            forge,
            origin,
            state_dir,
            state,
        }
    }

    /// `git daemon` serving the forge.
    fn daemon(&self) -> Daemon {
        Daemon::start(self.forge.path(), free_port())
    }

    /// Job `id` of the repository, finished with `commits` commits (see [`finished_job`]).
    async fn finished(&self, id: &str, trust: Trust, commits: usize) -> JobResult {
        let job = job(id, &self.repo.src(), &self.rev, trust);
        finished_job(&self.state, &job, commits).await
    }

    /// The repository's key in the config's `push`.
    fn key(&self) -> String {
        src_key(&self.repo)
    }
}

/// `out` succeeded; its stderr otherwise.
fn assert_ok(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_and_patches_carry_the_commits_to_a_fresh_clone() {
    let s = Setup::new();
    let (repo, rev, state_dir) = (&s.repo, &s.rev, &s.state_dir);
    let result = s.finished("e1", Trust::Trusted, 2).await;
    let head = result.head.clone().unwrap();
    assert_eq!(result.commits.len(), 2);

    let out_dir = tempfile::tempdir().unwrap();
    let bundle = out_dir.path().join("e1.bundle");
    let out = runner_cmd(state_dir.path(), None)
        .args(["export", "e1", "--bundle"])
        .arg(&bundle)
        .output()
        .unwrap();
    assert_ok(&out);

    // A laptop's clone of the origin: the bundle needs the job's revision, which it has.
    let laptop = out_dir.path().join("laptop");
    git(
        out_dir.path(),
        &["clone", "-q", &repo.src().to_string_lossy(), "laptop"],
    );
    let verified = Command::new("git")
        .current_dir(&laptop)
        .args(["bundle", "verify"])
        .arg(&bundle)
        .output()
        .unwrap();
    assert!(
        verified.status.success(),
        "{}",
        String::from_utf8_lossy(&verified.stderr)
    );
    let bundle_arg = bundle.to_string_lossy().into_owned();
    git(
        &laptop,
        &[
            "fetch",
            "-q",
            &bundle_arg,
            "refs/quest/jobs/e1:refs/heads/agent",
        ],
    );
    assert_eq!(git(&laptop, &["rev-parse", "agent"]), head);
    assert_eq!(
        git(&laptop, &["rev-list", "--count", &format!("{rev}..agent")]),
        "2"
    );

    // The same file again is refused, and left as it was.
    let before = std::fs::read(&bundle).unwrap();
    let out = runner_cmd(state_dir.path(), None)
        .args(["export", "e1", "--bundle"])
        .arg(&bundle)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("exists already"), "{stderr}");
    assert_eq!(std::fs::read(&bundle).unwrap(), before);

    // Patches, applied with `git am` on the revision, give the job's tree.
    let patches = out_dir.path().join("patches");
    let out = runner_cmd(state_dir.path(), None)
        .args(["export", "e1", "--patch"])
        .arg(&patches)
        .output()
        .unwrap();
    assert_ok(&out);
    let listed: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(listed.len(), 2, "{listed:?}");
    git(&laptop, &["checkout", "-q", "-b", "applied", rev]);
    let mut am = vec!["am".to_string(), "-q".to_string()];
    am.extend(listed);
    let am: Vec<&str> = am.iter().map(String::as_str).collect();
    git(&laptop, &am);
    assert_eq!(
        git(&laptop, &["rev-parse", "applied^{tree}"]),
        git(&laptop, &["rev-parse", &format!("{head}^{{tree}}")])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_names_what_is_wrong() {
    let s = Setup::new();
    let state_dir = &s.state_dir;
    s.finished("none", Trust::Trusted, 0).await;
    let out_dir = tempfile::tempdir().unwrap();
    for (id, needle) in [
        ("none", "made no commits"),
        ("nosuchjob", "unknown job nosuchjob"),
        ("../x", "not a job id"),
    ] {
        let out = runner_cmd(state_dir.path(), None)
            .args(["export", id, "--bundle"])
            .arg(out_dir.path().join("b"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{id}: {stderr}");
        assert!(stderr.contains(needle), "{id}: {needle:?} in {stderr}");
        assert!(!out_dir.path().join("b").exists());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_commits_are_pushed_to_its_branch_and_fetched_by_a_fresh_clone() {
    let s = Setup::new();
    let daemon = s.daemon();
    let mut result = s.finished("p1", Trust::Trusted, 1).await;
    let head = result.head.clone().unwrap();
    // Keyed by the repository as the job names it; the remote is the forge's.
    let config = config_with_push(serde_json::json!({
        s.key(): {"remote": daemon.url("r.git"), "namespace": "quest", "branch": "job-{job}"}
    }));
    deliver(&s.state, config, &mut result).await;
    let push = result.push.clone().unwrap();
    assert!(push.pushed, "{push:?}");
    assert_eq!(push.branch, "refs/heads/quest/job-p1");
    assert_eq!(push.remote, daemon.url("r.git"));
    assert_eq!(push.commit, head);

    // Elsewhere: a fresh clone of the remote has the job's commit on its branch, and nothing
    // else was pushed (no tag, no other branch).
    let elsewhere = tempfile::tempdir().unwrap();
    git(
        elsewhere.path(),
        &["clone", "-q", &daemon.url("r.git"), "c"],
    );
    let clone = elsewhere.path().join("c");
    assert_eq!(git(&clone, &["rev-parse", "origin/quest/job-p1"]), head);
    assert_eq!(git(&clone, &["show", "origin/quest/job-p1:f0"]), "work 0");
    let refs = git(&s.origin, &["for-each-ref", "--format=%(refname)"]);
    assert_eq!(refs, "refs/heads/main\nrefs/heads/quest/job-p1", "{refs}");

    // `show` has the outcome.
    let out = runner_cmd(s.state_dir.path(), None)
        .args(["show", "p1"])
        .output()
        .unwrap();
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        shown["result"]["push"]["branch"], "refs/heads/quest/job-p1",
        "{shown:#}"
    );
    assert_eq!(shown["result"]["push"]["pushed"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_the_runner_did_not_make_is_not_overwritten() {
    let s = Setup::new();
    // Someone's branch, under the namespace, where the job's would go.
    git(&s.origin, &["update-ref", "refs/heads/quest/p2", &s.rev]);
    let daemon = s.daemon();
    let mut result = s.finished("p2", Trust::Trusted, 1).await;
    let config = config_with_push(serde_json::json!({
        s.key(): {"remote": daemon.url("r.git"), "namespace": "quest"}
    }));
    deliver(&s.state, config, &mut result).await;
    let push = result.push.clone().unwrap();
    assert!(!push.pushed, "{push:?}");
    let error = push.error.unwrap();
    assert!(error.contains("not overwritten"), "{error}");
    assert_eq!(git(&s.origin, &["rev-parse", "refs/heads/quest/p2"]), s.rev);
    // The commits are still where export and a retry find them.
    let bare = quest_runner::workspace::bare_clone_path(&s.state, &s.key());
    assert_eq!(
        git(&bare, &["rev-parse", "refs/quest/jobs/p2"]),
        result.head.unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_jobs_are_pushed_only_where_allowed() {
    let s = Setup::new();
    let daemon = s.daemon();
    let mut result = s.finished("u1", Trust::Untrusted, 1).await;
    let settings = |allow: bool| {
        config_with_push(serde_json::json!({
            s.key(): {"remote": daemon.url("r.git"), "namespace": "quest", "untrusted": allow}
        }))
    };
    deliver(&s.state, settings(false), &mut result).await;
    let push = result.push.clone().unwrap();
    assert!(
        !push.pushed && push.error.as_deref().unwrap().contains("untrusted"),
        "{push:?}"
    );
    assert!(git(&s.origin, &["for-each-ref", "refs/heads/quest"]).is_empty());
    deliver(&s.state, settings(true), &mut result).await;
    assert!(result.push.clone().unwrap().pushed, "{:?}", result.push);
    assert_eq!(
        git(&s.origin, &["rev-parse", "refs/heads/quest/u1"]),
        result.head.unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_that_is_down_is_reported_and_push_retries_once_it_is_up() {
    let s = Setup::new();
    let port = free_port();
    let url = format!("git://127.0.0.1:{port}/r.git");
    let mut result = s.finished("d1", Trust::Trusted, 1).await;
    let head = result.head.clone().unwrap();
    let push = serde_json::json!({ s.key(): {"remote": url, "namespace": "quest"} });
    let started = Instant::now();
    deliver(&s.state, config_with_push(push.clone()), &mut result).await;
    assert!(started.elapsed() < Duration::from_secs(30));
    let record = saved(&s.state, "d1")["push"].clone();
    assert_eq!(record["pushed"], false, "{record:#}");
    let error = record["error"].as_str().unwrap();
    assert!(error.contains("git push to git://127.0.0.1"), "{error}");

    // `quest-runner push` once the remote is up.
    let config_dir = tempfile::tempdir().unwrap();
    let config = config_dir.path().join("config.json");
    std::fs::write(&config, serde_json::json!({ "push": push }).to_string()).unwrap();
    let _daemon = Daemon::start(s.forge.path(), port);
    let out = runner_cmd(s.state_dir.path(), Some(&config))
        .args(["push", "d1"])
        .output()
        .unwrap();
    assert_ok(&out);
    let record = saved(&s.state, "d1")["push"].clone();
    assert_eq!(record["pushed"], true, "{record:#}");
    assert!(record.get("error").is_none(), "{record:#}");
    assert_eq!(git(&s.origin, &["rev-parse", "refs/heads/quest/d1"]), head);
    // Again: the branch it made is at its commit, so nothing changes and it succeeds.
    let out = runner_cmd(s.state_dir.path(), Some(&config))
        .args(["push", "d1"])
        .output()
        .unwrap();
    assert_ok(&out);
}

/// A branch template that could leave its namespace stops the config from loading, naming the
/// field: no command runs with it.
#[test]
fn a_template_outside_the_namespace_is_refused_at_load() {
    let state = tempfile::tempdir().unwrap();
    let config = state.path().join("config.json");
    for (push, field) in [
        (
            serde_json::json!({"r": {"namespace": "quest", "branch": "../../tags/{job}"}}),
            "push.r.branch",
        ),
        (
            serde_json::json!({"r": {"namespace": "quest", "branch": "main"}}),
            "push.r.branch",
        ),
        (
            serde_json::json!({"r": {"namespace": "../heads", "branch": "{job}"}}),
            "push.r.namespace",
        ),
        (
            serde_json::json!({"r": {"namespace": "q", "credential_file": "key"}}),
            "push.r.credential_file",
        ),
    ] {
        std::fs::write(&config, serde_json::json!({ "push": push }).to_string()).unwrap();
        let out = runner_cmd(state.path(), Some(&config))
            .args(["push", "j"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(&format!("{field}:")), "{field} in {stderr}");
    }
}

/// The push credential is a private file: a job's policy hides its directory from every
/// command, as it does an account's key, and the runner's push reads it without putting it
/// in the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_push_credential_is_hidden_from_jobs() {
    let keys = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let keys_dir = std::fs::canonicalize(keys.path())
        .unwrap()
        .join("push-keys");
    std::fs::create_dir(&keys_dir).unwrap();
    let token = keys_dir.join("token");
    let secret = format!("qr-push-token-{}", unique_token());
    std::fs::write(&token, &secret).unwrap();
    let s = Setup::new();
    let (repo, rev, state_dir) = (&s.repo, &s.rev, &s.state_dir);
    let config = state_dir.path().join("config.json");
    let push = serde_json::json!({ s.key(): {"namespace": "quest", "credential_file": token} });
    std::fs::write(&config, serde_json::json!({ "push": push }).to_string()).unwrap();
    let job_path = state_dir.path().join("job.json");
    let spec = serde_json::json!({
        "id": "c1", "repo": repo.src(), "rev": rev, "ref": "main", "trust": "trusted",
        "agent": "claude", "account": "main", "prompt": "p",
    });
    std::fs::write(&job_path, spec.to_string()).unwrap();
    let out = runner_cmd(state_dir.path(), None)
        .args(["policy", "--job"])
        .arg(&job_path)
        .output()
        .unwrap();
    assert_ok(&out);
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    let private = shown["policy"]["private"].as_array().unwrap();
    let hidden = private
        .iter()
        .find(|h| h["file"] == token.to_str().unwrap())
        .unwrap_or_else(|| panic!("the credential is not private: {private:?}"));
    assert_eq!(hidden["what"], format!("push.{}.credential_file", s.key()));
    // Its directory, or a denied directory above it (`/tmp`, when the target dir is there).
    let deny = &shown["policy"]["deny_read"];
    let denied: Vec<&str> = deny
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(denied.iter().any(|d| keys_dir.starts_with(d)), "{deny}");
    // What the job is handed (its settings, its environment) never holds the token itself.
    let all = String::from_utf8_lossy(&out.stdout);
    assert!(!all.contains(&secret), "the token is in the job's policy");

    // A push with it (to a local remote that takes no token): the token is in no record.
    let mut result = s.finished("c1", Trust::Trusted, 1).await;
    let config = config_with_push(serde_json::json!({
        s.key(): {"remote": s.origin, "namespace": "quest", "credential_file": token}
    }));
    deliver(&s.state, config, &mut result).await;
    assert!(result.push.clone().unwrap().pushed, "{:?}", result.push);
    let job_files = quest_runner::workspace::job_root(&s.state, "c1");
    assert_eq!(grep_tree(&job_files, &secret), Vec::<PathBuf>::new());
}

/// Every file under `dir` whose content holds `needle`.
fn grep_tree(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file()
                && String::from_utf8_lossy(&std::fs::read(&path).unwrap()).contains(needle)
            {
                found.push(path);
            }
        }
    }
    found
}

/// A token is never sent over plain http: the push is refused before git runs, and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_is_never_sent_over_plain_http() {
    let s = Setup::new();
    let state = &s.state;
    let secrets = tempfile::tempdir().unwrap();
    let token = secrets.path().join("token");
    std::fs::write(&token, "tok-PLAIN-HTTP\n").unwrap();
    let mut result = s.finished("h1", Trust::Trusted, 1).await;
    let settings = config_with_push(serde_json::json!({
        s.key(): {"remote": format!("http://127.0.0.1:{}/r.git", free_port()),
                         "namespace": "quest", "credential_file": token}
    }));
    deliver(state, settings, &mut result).await;
    let push = result.push.clone().unwrap();
    assert!(
        !push.pushed && push.error.as_deref().unwrap().contains("plain http"),
        "{push:?}"
    );
}

/// With the PostgreSQL queue, a job's commits are exported from any host: the bundle is stored
/// with the job's end, and a host that never ran the job (a state dir of its own) writes it
/// for `git fetch`; patches, which need the revision's objects, are refused there with the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_postgres_queue_a_bundle_is_exported_from_another_host() {
    use quest_runner::serve::JobSource;
    let pg = postgres::Postgres::start();
    let repo = Repo::new();
    let rev = repo.commit(&[("README.md", "hello\n")]);
    let queue_config = serde_json::json!({"postgres": pg.conninfo()});
    let config: Config = serde_json::from_value(serde_json::json!({
        "accounts": {"main": {"agent": "claude", "api_key_file": "/etc/quest-runner/k"}},
        "queue": queue_config,
    }))
    .unwrap();
    let target =
        quest_runner::serve::pg::target::PgTarget::from_config(config.queue.as_ref().unwrap())
            .unwrap();
    let ran_on = tempfile::tempdir().unwrap();
    let state = StateDir::at(ran_on.path());
    let queue = quest_runner::serve::pg::PgQueue::open(
        target.clone(),
        &state,
        &config,
        Duration::from_secs(30),
        Duration::from_secs(600),
    )
    .await
    .unwrap();
    let spec: quest_runner::job::JobSpec = serde_json::from_value(serde_json::json!({
        "id": "exported", "repo": repo.src().to_string_lossy(), "rev": rev, "ref": "main",
        "trust": "trusted", "agent": "claude", "account": "main", "prompt": "p",
    }))
    .unwrap();
    let client = quest_runner::serve::pg::admin::connect(&target)
        .await
        .unwrap();
    quest_runner::serve::pg::admin::submit(&client, spec, &config, Duration::from_secs(60))
        .await
        .unwrap();
    let claimed = queue.claim().await.unwrap().expect("the job is claimed");
    let result = finished_job(&state, &claimed.job, 2).await;
    let head = result.head.clone().unwrap();
    queue.finish(claimed, result).await.unwrap();
    // Another host: its own state dir, the same queue, no trace of the job.
    let other = tempfile::tempdir().unwrap();
    let other_config = other.path().join("config.json");
    std::fs::write(
        &other_config,
        serde_json::to_vec(&serde_json::json!({
            "accounts": {"main": {"agent": "claude", "api_key_file": "/etc/quest-runner/k"}},
            "queue": queue_config,
        }))
        .unwrap(),
    )
    .unwrap();
    let bundle = other.path().join("job.bundle");
    let out = runner_cmd(other.path(), None)
        .args(["export", "exported", "--bundle"])
        .arg(&bundle)
        .output()
        .unwrap();
    assert_ok(&out);
    assert!(!quest_runner::workspace::job_root(&StateDir::at(other.path()), "exported").exists());
    let fresh = other.path().join("fresh");
    git(
        other.path(),
        &["clone", "-q", &repo.src().to_string_lossy(), "fresh"],
    );
    git(
        &fresh,
        &[
            "fetch",
            "-q",
            &bundle.to_string_lossy(),
            "refs/quest/jobs/exported:refs/heads/work",
        ],
    );
    assert_eq!(git(&fresh, &["rev-parse", "work"]).trim(), head);
    let log = git(&fresh, &["log", "--format=%s", &format!("{rev}..work")]);
    assert_eq!(log.lines().count(), 2, "{log}");
    // Patches need the revision's objects: refused here, saying what to do instead.
    let out = runner_cmd(other.path(), None)
        .args(["export", "exported", "--patch"])
        .arg(other.path().join("patches"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--bundle"),
        "{out:?}"
    );
    // A job the queue has no bundle of is named as such.
    let out = runner_cmd(other.path(), None)
        .args(["export", "never-ran", "--bundle"])
        .arg(other.path().join("none.bundle"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no bundle"),
        "{out:?}"
    );
    println!("fetched {head} from a bundle exported on a host that never ran the job");
}

/// A loopback HTTPS forge: node terminates TLS (a certificate for `localhost` made here), asks
/// for Basic authentication with one user and token, and runs `git http-backend` for the
/// authenticated requests. Each request is logged with whether it was authenticated.
const HTTPS_FORGE: &str = r#"
const https = require('https'), fs = require('fs'), cp = require('child_process');
const env = process.env;
const want = 'Basic ' + Buffer.from(env.QR_USER + ':' + env.QR_TOKEN).toString('base64');
const options = {cert: fs.readFileSync(env.QR_CERT), key: fs.readFileSync(env.QR_KEY)};
const server = https.createServer(options, (req, res) => {
  const ok = req.headers['authorization'] === want;
  fs.appendFileSync(env.QR_LOG, `${req.method} ${req.url} ${ok ? 'authorized' : 'anonymous'}\n`);
  if (!ok) { res.writeHead(401, {'WWW-Authenticate': 'Basic realm="forge"'}); return res.end(); }
  const [path, query] = req.url.split('?');
  const cgi = cp.spawn('git', ['http-backend'], {env: {
    PATH: env.PATH, HOME: env.QR_ROOT, GIT_CONFIG_NOSYSTEM: '1', GIT_PROJECT_ROOT: env.QR_ROOT,
    GIT_HTTP_EXPORT_ALL: '1', PATH_INFO: path, QUERY_STRING: query || '',
    REQUEST_METHOD: req.method, CONTENT_TYPE: req.headers['content-type'] || '',
    HTTP_CONTENT_ENCODING: req.headers['content-encoding'] || '',
    HTTP_GIT_PROTOCOL: req.headers['git-protocol'] || '',
    REMOTE_USER: env.QR_USER, REMOTE_ADDR: '127.0.0.1'}});
  req.pipe(cgi.stdin);
  let head = Buffer.alloc(0), sent = false;
  cgi.stdout.on('data', chunk => {
    if (sent) return res.write(chunk);
    head = Buffer.concat([head, chunk]);
    let end = head.indexOf('\r\n\r\n'), skip = 4;
    if (end < 0) { end = head.indexOf('\n\n'); skip = 2; }
    if (end < 0) return;
    const headers = {}; let status = 200;
    for (const line of head.slice(0, end).toString().split(/\r?\n/)) {
      const i = line.indexOf(':'), k = line.slice(0, i), v = line.slice(i + 1).trim();
      if (k.toLowerCase() === 'status') status = parseInt(v); else headers[k] = v;
    }
    res.writeHead(status, headers); sent = true; res.write(head.slice(end + skip));
  });
  cgi.stdout.on('end', () => res.end());
});
server.listen(0, '127.0.0.1', () => console.log(server.address().port));
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
"#;

/// The HTTPS forge serving `root`, with `user` and `token`; stopped when dropped.
struct HttpsForge {
    port: u16,
    cert: PathBuf,
    log: PathBuf,
    child: Child,
}

impl HttpsForge {
    fn start(root: &Path, dir: &Path, user: &str, token: &str) -> HttpsForge {
        use std::io::BufRead;
        let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let (cert, key, log) = (
            dir.join("forge.pem"),
            dir.join("forge.key"),
            dir.join("forge.log"),
        );
        std::fs::write(&cert, made.cert.pem()).unwrap();
        std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
        let mut child = Command::new("node")
            .args(["-e", HTTPS_FORGE])
            .env("QR_CERT", &cert)
            .env("QR_KEY", &key)
            .env("QR_LOG", &log)
            .env("QR_ROOT", root)
            .env("QR_USER", user)
            .env("QR_TOKEN", token)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("node runs the forge");
        let mut line = String::new();
        let stdout = child.stdout.take().unwrap();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().expect("the forge's port");
        HttpsForge {
            port,
            cert,
            log,
            child,
        }
    }

    fn requests(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for HttpsForge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTPS push hands git the token through the credential helper the runner gives it: with no
/// credential the forge refuses every request (the control), with the token file it accepts
/// them and the job's branch is there for a fresh clone. The forge's certificate is trusted
/// through the operator's `GIT_SSL_CAINFO`, as an internal forge's would be.
#[tokio::test]
async fn an_https_push_gives_git_the_token_through_the_credential_helper() {
    let s = Setup::new();
    let mut result = s.finished("tls1", Trust::Trusted, 1).await;
    let head = result.head.clone().unwrap();
    let secrets = tempfile::tempdir().unwrap();
    let token = format!("tok-{}", unique_token());
    let token_file = secrets.path().join("token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let forge = HttpsForge::start(s.forge.path(), secrets.path(), "x-access-token", &token);
    let remote = format!("https://localhost:{}/r.git", forge.port);
    let push = |credential: Option<&Path>| {
        let mut settings = serde_json::json!({"remote": remote, "namespace": "quest"});
        if let Some(file) = credential {
            settings["credential_file"] = serde_json::json!(file);
        }
        let config = secrets.path().join("config.json");
        let text = serde_json::json!({"push": {s.key(): settings}});
        std::fs::write(&config, text.to_string()).unwrap();
        runner_cmd(s.state_dir.path(), Some(&config))
            .env("GIT_SSL_CAINFO", &forge.cert)
            .args(["push", "tls1"])
            .output()
            .unwrap()
    };
    result.push = None;
    save(&s.state, &result);
    // The control: no credential, and the forge lets nothing through.
    let refused = push(None);
    assert!(!refused.status.success(), "{refused:?}");
    let before = forge.requests();
    assert!(
        before.contains("anonymous") && !before.contains("authorized"),
        "{before}"
    );
    let pushed = push(Some(&token_file));
    assert_ok(&pushed);
    let requests = forge.requests();
    assert!(
        requests.contains("POST /r.git/git-receive-pack authorized"),
        "{requests}"
    );
    let fresh = secrets.path().join("fresh");
    git(
        secrets.path(),
        &["clone", "-q", &s.origin.to_string_lossy(), "fresh"],
    );
    let branch = git(&fresh, &["rev-parse", "origin/quest/tls1"]);
    assert_eq!(branch.trim(), head);
    // The token went only where git asked for it: not into the saved result.
    let saved = std::fs::read_to_string(
        quest_runner::workspace::job_root(&s.state, "tls1").join("result.json"),
    )
    .unwrap();
    assert!(!saved.contains(&token));
    println!("forge requests:\n{requests}");
}
