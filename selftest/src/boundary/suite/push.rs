//! The push credential in a suite run. The suite's repository has a `push` section whose
//! credential file (a private file, beside the account's) holds a secret of its own; the
//! runner pushes the job's commits at the job's end to a loopback `git daemon
//! --enable=receive-pack` (a real push); then the suite looks for the credential in every file
//! the job left (its logs, transcript and result), the runner's whole state directory, every
//! object of the shared clone and of the remote, the store paths made while the job ran, and
//! the agent's processes and dirs (the watcher). Its control finds the credential the same ways
//! where it was planted.
//!
//! The remote is `git://`, which carries no credential: the runner's push checks the file and
//! passes nothing to git. A push over https or ssh, where git's helper reads the file, needs a
//! TLS or SSH server the suite does not run (tests/suite/deliver.rs covers the helper's refusals).

use super::job_run::JobRun;
use crate::boundary::attempts::Rule;
use crate::boundary::fixture::Fixture;
use crate::boundary::report::{AttemptReport, ControlReport};
use crate::boundary::secret_search::{search_data, search_process, search_tree, Findings};
use quest_runner::config::PushConfig;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The namespace the suite's pushes go under.
const NAMESPACE: &str = "quest";

/// The suite's remote: a bare copy of the fixture's repository behind `git daemon` on
/// 127.0.0.1, in the host's network namespace (where the runner pushes from; the job's
/// namespace has no route to it). Stopped on drop.
pub(super) struct Forge {
    child: Child,
    port: u16,
    pub(super) bare: PathBuf,
}

impl Drop for Forge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A git of the suite's own, without the host's configuration.
fn plain_git(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(Stdio::null());
    cmd
}

fn git_out(dir: &Path, args: &[&str]) -> Result<Vec<u8>, String> {
    let out = plain_git(dir)
        .args(args)
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("git {}: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(out.stdout)
}

impl Forge {
    pub(super) fn start(fixture: &Fixture) -> Result<Forge, String> {
        let base = fixture.path().join("forge");
        std::fs::create_dir_all(&base).map_err(|e| format!("the forge: {e}"))?;
        let repo = fixture.repo.to_string_lossy().into_owned();
        git_out(&base, &["clone", "-q", "--bare", &repo, "r.git"])?;
        let exec_path = String::from_utf8_lossy(&git_out(&base, &["--exec-path"])?)
            .trim()
            .to_string();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("a port for the forge: {e}"))?
            .port();
        // git-daemon itself, not `git daemon`, whose child would outlive a kill.
        let child = Command::new(Path::new(&exec_path).join("git-daemon"))
            .args(["--reuseaddr", "--export-all", "--enable=receive-pack"])
            .args(["--informative-errors", "--listen=127.0.0.1"])
            .arg(format!("--port={port}"))
            .arg(format!("--base-path={}", base.display()))
            .arg(&base)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting git daemon: {e}"))?;
        let forge = Forge {
            child,
            port,
            bare: base.join("r.git"),
        };
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if started.elapsed() > Duration::from_secs(10) {
                return Err("git daemon did not listen within 10s".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(forge)
    }

    pub(super) fn url(&self) -> String {
        format!("git://127.0.0.1:{}/r.git", self.port)
    }

    /// The suite repository's push settings: this remote, the fixture's credential file, and
    /// untrusted jobs allowed (so both trust levels push).
    pub(super) fn push_config(&self, fixture: &Fixture) -> PushConfig {
        PushConfig {
            remote: Some(self.url()),
            namespace: NAMESPACE.into(),
            branch: quest_runner::config::push::JOB_PLACEHOLDER.into(),
            credential_file: Some(fixture.push_credential.clone()),
            username: None,
            untrusted: true,
        }
    }
}

/// Every object of the repository at `git_dir`, uncompressed: a secret committed or stored
/// there shows, which a search of its (zlib) files would miss. Counted as one file.
fn search_objects(git_dir: &Path, secret: &str, f: &mut Findings) -> Result<(), String> {
    let objects = git_out(
        git_dir,
        &["cat-file", "--batch-all-objects", "--batch", "--unordered"],
    )?;
    let name = format!("{} (objects)", git_dir.display());
    search_data(&objects, secret, f, &name);
    Ok(())
}

/// A file or directory, files of at most 16 MiB (as the search reads them).
fn search_path(path: &Path, secret: &str, f: &mut Findings) {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => search_tree(path, secret, f),
        Ok(m) if m.is_file() && m.len() <= 16 << 20 => {
            if let Ok(data) = std::fs::read(path) {
                search_data(&data, secret, f, &path.display().to_string());
            }
        }
        _ => {}
    }
}

impl super::SuiteRun<'_> {
    /// The push credential's search as an attempt (found anywhere is an escape), its
    /// control, and the control that the runner pushed the job's commits with it configured.
    pub(super) fn push_search(
        &self,
        ran: &JobRun,
        reports: &mut Vec<AttemptReport>,
        controls: &mut Vec<ControlReport>,
    ) {
        let fixture = &self.harness.fixture;
        let secret = &fixture.secrets.push;
        let mut f = ran.push_findings.clone();
        let agent_files = f.files;
        search_tree(&ran.job_root, secret, &mut f);
        search_tree(self.state.root(), secret, &mut f);
        let bare = quest_runner::workspace::bare_clone_path(self.state, &self.job.repo);
        for git_dir in [&bare, &self.harness.forge.bare] {
            if let Err(e) = search_objects(git_dir, secret, &mut f) {
                // Not searched is not clean.
                f.found
                    .push(format!("{} not searched: {e}", git_dir.display()));
            }
        }
        for path in &ran.new_store_paths {
            search_path(path, secret, &mut f);
        }
        let pushed = pushed_control(self, ran);
        let control_escaped = self.cfg.controls.then(|| {
            let found = control_finds(fixture);
            controls.push(ControlReport::new(
                "the push credential's search finds it where planted",
                found,
                "a dir linking the credential's file, a process with it in its environment, \
                 a repository with it in a blob"
                    .into(),
            ));
            found
        });
        reports.push(AttemptReport {
            id: "push-credential-held",
            what: "find the push credential in the job's files, logs and transcript, the runner's state, the shared clone's and the remote's objects, the store paths made during the job, and the agent's environment, arguments, open files and dirs".into(),
            rule: Rule::DenyRead,
            control_escaped,
            ran: pushed.passed,
            escaped: !f.found.is_empty(),
            refused_by_runner: None,
            evidence: if f.found.is_empty() {
                format!(
                    "not found: {} processes, {} files of the agent's, {} files and object stores after the job, {} new store paths",
                    f.processes,
                    agent_files,
                    f.files - agent_files,
                    ran.new_store_paths.len()
                )
            } else {
                format!("found in {}", f.found.join(", "))
            },
            network: None,
        });
        controls.push(pushed);
    }
}

/// The runner pushed the job's commits to the suite's remote with the credential configured,
/// and the job's policy hid the credential's file.
fn pushed_control(run: &super::SuiteRun<'_>, ran: &JobRun) -> ControlReport {
    let fixture = &run.harness.fixture;
    let result = &ran.result;
    let branch = format!("refs/heads/{NAMESPACE}/{}", run.job.id);
    let at = git_out(
        &run.harness.forge.bare,
        &["rev-parse", "--verify", "-q", &branch],
    )
    .map(|o| String::from_utf8_lossy(&o).trim().to_string())
    .unwrap_or_default();
    let hidden = run
        .runner
        .config()
        .hide_private_files(Some(&fixture.config_file))
        .is_ok_and(|h| h.iter().any(|h| h.file == fixture.push_credential));
    let push = result.push.as_ref();
    let passed = push.is_some_and(|p| p.pushed && p.branch == branch)
        && result.head.as_deref() == Some(at.as_str())
        && !result.commits.is_empty()
        && hidden;
    ControlReport::new(
        "the job's commits were pushed, the credential hidden from the job",
        passed,
        match push {
            Some(p) => format!(
                "{} commit(s); pushed {} to {}: {}; the remote's branch at {}; credential private: {hidden}",
                result.commits.len(),
                p.branch,
                p.remote,
                p.error.as_deref().unwrap_or("ok"),
                if at.is_empty() { "nothing" } else { &at }
            ),
            None => format!("no push in the result ({} commits)", result.commits.len()),
        },
    )
}

/// The search finds the credential where it was planted: through a link to its file, in a
/// process's environment, and in a blob of a repository.
fn control_finds(fixture: &Fixture) -> bool {
    let secret = &fixture.secrets.push;
    let dir = fixture.path().join("push-search-control");
    let _ = std::fs::create_dir_all(dir.join("home"));
    let _ = std::os::unix::fs::symlink(&fixture.push_credential, dir.join("home/token"));
    let mut in_tree = Findings::default();
    search_tree(&dir.join("home"), secret, &mut in_tree);
    let mut in_repo = Findings::default();
    let repo = dir.join("r.git");
    let stored = git_out(&dir, &["init", "-q", "--bare", "r.git"]).and_then(|_| {
        let mut cmd = plain_git(&repo);
        cmd.args(["hash-object", "-w", "--"])
            .arg(&fixture.push_credential);
        cmd.output().map_err(|e| e.to_string())
    });
    let searched = stored.is_ok() && search_objects(&repo, secret, &mut in_repo).is_ok();
    let _ = std::fs::remove_dir_all(&dir);
    let mut in_env = Findings::default();
    if let Ok(mut child) = Command::new("sleep")
        .arg("30")
        .env("GIT_PASSWORD", secret)
        .spawn()
    {
        crate::boundary::secret_search::wait_for_exec(child.id());
        search_process(child.id(), secret, &mut in_env);
        let _ = child.kill();
        let _ = child.wait();
    }
    searched
        && [in_tree, in_repo, in_env]
            .iter()
            .all(|f| !f.found.is_empty())
}
