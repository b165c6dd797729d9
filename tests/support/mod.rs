//! Shared helpers of the integration tests: flake repositories made on the spot, the runner
//! binary on a private state directory, and a `nix` wrapper that counts evaluations.
//!
//! Everything here drives the real `git` and `nix`; nothing is mocked.

pub mod nix_eval;
pub mod postgres;
pub mod queue_jobs;
pub mod serve;
pub mod upstream;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use quest_runner_selftest::static_bash::BuilderInput;

pub fn system() -> String {
    format!("{}-linux", std::env::consts::ARCH)
}

pub fn git(dir: &Path, args: &[&str]) -> String {
    git_entering(dir, None, args)
}

/// [`git`] in a job's checkout as the job's processes see it: in the namespace that alone
/// holds it when the runner is not root (`workspace::owned_mount`).
pub fn git_in_job(ws: &quest_runner::workspace::Workspace, args: &[&str]) -> String {
    git_entering(&ws.paths.checkout, ws.namespace(), args)
}

fn git_entering(
    dir: &Path,
    ns: Option<&std::sync::Arc<quest_runner::workspace::namespace::JobNamespace>>,
    args: &[&str],
) -> String {
    let mut git = Command::new("git");
    // Entering goes back to the command's directory, so that is set first.
    git.current_dir(dir);
    if let Some(ns) = ns {
        ns.enter(&mut git);
    }
    let out = git
        .args([
            // A root runner's checkout is the agent's identity's from the start (its layer is
            // handed over before it is mounted).
            "-c",
            "safe.directory=*",
            "-c",
            "user.name=test",
            "-c",
            "user.email=test@example.invalid",
        ])
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The static bash every fixture flake builds with (see `quest_runner_selftest::static_bash`),
/// one copy per bash binary under Cargo's `target/tmp` (or `QUEST_RUNNER_TEST_SCRATCH`, for a
/// user who may not write there: scripts/test-daemon): shared by the tests of a checkout and
/// named by the binary's hash, so a run against another bash (the Debian 13 rootfs's) never
/// swaps the file under a running test.
pub fn fixture_bash() -> &'static BuilderInput {
    static INPUT: std::sync::OnceLock<BuilderInput> = std::sync::OnceLock::new();
    INPUT.get_or_init(|| {
        use sha2::Digest;
        let bash = quest_runner::binaries::find(quest_runner::binaries::Tool::BashStatic)
            .expect("a static bash (apt-get install bash-static, or QUEST_RUNNER_BASH_STATIC)");
        let digest = sha2::Sha256::digest(std::fs::read(&bash).unwrap());
        let scratch = std::env::var_os("QUEST_RUNNER_TEST_SCRATCH")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
        let dir = scratch.join(format!(
            "static-bash-{}",
            &quest_runner::util::hex::encode(digest)[..16]
        ));
        // Copied into each repository that commits a flake (`Repo::commit_exact`): a job's
        // nix reads nothing of the host and only its repository's store.
        BuilderInput::install_from(&bash, &dir).unwrap()
    })
}

/// The builder of fixture derivations: in scope inside [`flake`]'s `outputs`.
pub const BUILDER: &str = quest_runner_selftest::static_bash::BUILDER;

/// A shell command for a fixture's builder that waits `secs` seconds. The build sandbox has
/// no `sleep`: the static bash waits on a pipe nobody writes (`read -t`), a pipe it holds
/// both ends of through `/dev/fd`.
pub fn build_sleep(secs: u32) -> String {
    format!("exec 3<> <(:); read -t {secs} -u 3")
}

/// A source repository with a working tree, and a bare clone of it (what the runner reads).
pub struct Repo {
    pub dir: tempfile::TempDir,
}

impl Repo {
    pub fn new() -> Repo {
        let dir = tempfile::Builder::new()
            .prefix("qr-repo-")
            .tempdir()
            .unwrap();
        // Searchable, as a repository the runner reads is: a root runner's nix reads the
        // bare clone as the agent's identity (a runner's own clones are in its state dir,
        // which it makes searchable itself).
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        git(&dir.path().join("src"), &["init", "-q", "-b", "main"]);
        Repo { dir }
    }

    pub fn src(&self) -> PathBuf {
        self.dir.path().join("src")
    }

    pub fn bare(&self) -> PathBuf {
        self.dir.path().join("bare.git")
    }

    /// Commits `files` and refreshes the bare clone; returns the new revision. With a
    /// `flake.nix`, the lock of [`fixture_bash`] goes beside it.
    pub fn commit(&self, files: &[(&str, &str)]) -> String {
        let lock = fixture_bash().lock_file();
        let lock = files
            .iter()
            .any(|(name, _)| *name == "flake.nix")
            .then_some(("flake.lock", lock.as_str()));
        let files: Vec<(&str, &str)> = files.iter().copied().chain(lock).collect();
        self.commit_exact(&files)
    }

    /// Commits exactly `files` (no lock added) and refreshes the bare clone.
    pub fn commit_exact(&self, files: &[(&str, &str)]) -> String {
        if files.iter().any(|(name, _)| *name == "flake.nix") {
            fixture_bash().copy_into(&self.src()).unwrap();
        }
        for (name, content) in files {
            let path = self.src().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
        git(&self.src(), &["add", "-A"]);
        git(
            &self.src(),
            &["commit", "-q", "--allow-empty", "-m", "change"],
        );
        if self.bare().exists() {
            git(&self.bare(), &["fetch", "-q", "../src", "+main:main"]);
        } else {
            git(
                self.dir.path(),
                &["clone", "-q", "--bare", "src", "bare.git"],
            );
        }
        git(&self.src(), &["rev-parse", "HEAD"])
    }
}

/// A flake whose default devShell is a raw derivation (no nixpkgs is reachable) built by
/// [`fixture_bash`], with `extra` spliced into the derivation's attributes.
pub fn flake(extra: &str) -> String {
    flake_with(extra, "")
}

/// Like [`flake`], with `more_shells` added to `devShells.<system>` (e.g. `other = ...;`).
pub fn flake_with(extra: &str, more_shells: &str) -> String {
    let system = system();
    let inputs = fixture_bash().flake_inputs();
    format!(
        r#"{{
  {inputs}
  outputs = {{ self }}: {{
    devShells.{system}.default = derivation {{
      name = "test-shell";
      system = "{system}";
      builder = "{BUILDER}";
      outputs = [ "out" ];
      args = [ "-c" "echo > $out" ];
      {extra}
    }};
    devShells.{system}.other = derivation {{
      name = "other-shell";
      system = "{system}";
      builder = "{BUILDER}";
      outputs = [ "out" ];
      args = [ "-c" "echo > $out" ];
      OTHER_VAR = "other";
    }};
    {more_shells}
  }};
}}
"#
    )
}

/// The runner binary on its own state directory, with Nix told not to wait for an
/// unreachable binary cache.
pub struct Runner {
    pub state: tempfile::TempDir,
    pub nix: Option<PathBuf>,
}

impl Runner {
    pub fn new() -> Runner {
        let state = tempfile::Builder::new()
            .prefix("qr-state-")
            .tempdir()
            .unwrap();
        std::fs::write(
            state.path().join("config.json"),
            r#"{"nix":{"options":{"substituters":""}}}"#,
        )
        .unwrap();
        Runner { state, nix: None }
    }

    pub fn state(&self) -> &Path {
        self.state.path()
    }

    pub fn command(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_quest-runner"));
        cmd.arg("--state-dir").arg(self.state.path());
        cmd.env("RUST_LOG", "info");
        if let Some(nix) = &self.nix {
            cmd.env("QUEST_RUNNER_NIX", nix);
        }
        cmd
    }

    pub fn env_output(&self, repo: &Path, rev: &str, extra: &[&str]) -> Output {
        let mut cmd = self.command();
        cmd.args(["env", "--format", "json", "--repo"])
            .arg(repo)
            .args(["--rev", rev])
            .args(extra);
        cmd.output().unwrap()
    }

    /// Runs `env --format json` and expects success.
    pub fn env_json(&self, repo: &Path, rev: &str, extra: &[&str]) -> serde_json::Value {
        let out = self.env_output(repo, rev, extra);
        assert!(
            out.status.success(),
            "env failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("env prints JSON")
    }

    pub fn devshell_dir(&self, sub: &str) -> PathBuf {
        self.state.path().join("devshell/v1").join(sub)
    }

    /// Names in one of the cache's directories (entries, roots, locks, tmp).
    pub fn listing(&self, sub: &str) -> Vec<String> {
        match std::fs::read_dir(self.devshell_dir(sub)) {
            Ok(rd) => {
                let mut v: Vec<String> = rd
                    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect();
                v.sort();
                v
            }
            Err(_) => Vec::new(),
        }
    }

    /// Asserts that the cache holds nothing at all: no entry, root, lock or staged file.
    pub fn assert_nothing_cached(&self) {
        for sub in ["entries", "roots", "locks", "tmp"] {
            assert!(
                self.listing(sub).is_empty(),
                "{sub} is not empty: {:?}",
                self.listing(sub)
            );
        }
    }
}

/// The real `nix`: `QUEST_RUNNER_NIX` if the test run sets it, else `PATH`.
pub fn real_nix() -> PathBuf {
    if let Some(p) = std::env::var_os("QUEST_RUNNER_NIX") {
        return PathBuf::from(p);
    }
    which::which("nix").expect("nix on PATH")
}

/// A wrapper around the real `nix` that appends a line to `count_file` for every
/// `print-dev-env` it runs.
pub fn counting_nix(dir: &Path) -> (PathBuf, PathBuf) {
    let count = dir.join("nix-runs");
    let wrapper = dir.join("nix");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\ncase \" $* \" in *\" print-dev-env \"*) echo run >> '{}';; esac\nexec '{}' \"$@\"\n",
            count.display(),
            real_nix().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    (wrapper, count)
}

/// A `nix` in `dir` that starts the real one: a configured binary outside the system's
/// directories.
pub fn forwarding_nix(dir: &Path) -> PathBuf {
    let wrapper = dir.join("nix");
    let script = format!("#!/bin/sh\nexec '{}' \"$@\"\n", real_nix().display());
    std::fs::write(&wrapper, script).unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    wrapper
}

pub fn runs(count_file: &Path) -> usize {
    std::fs::read_to_string(count_file)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

/// Process `pid`'s command line, its arguments joined by spaces.
pub fn cmdline(pid: i32) -> String {
    String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default())
        .replace('\0', " ")
}

/// Waits (at most `within`) until no process's command line mentions `token`; returns the
/// survivors after SIGKILLing them (so that a failing test leaves nothing behind).
pub fn survivors(token: &str, within: std::time::Duration) -> Vec<String> {
    let deadline = std::time::Instant::now() + within;
    while !processes_with(token).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let left: Vec<u32> = processes_with(token);
    let described = left.iter().map(|p| cmdline(*p as i32)).collect();
    for pid in left {
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    described
}

pub fn assert_no_process_with(token: &str, what: &str, within: std::time::Duration) {
    let left = survivors(token, within);
    assert!(left.is_empty(), "{what} survived: {left:?}");
}

/// Pids of processes whose command line contains `token`.
pub fn processes_with(token: &str) -> Vec<u32> {
    quest_runner::procfs::pids()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(token))
        })
        .collect()
}

/// The account's key never reached the model in a request body, yet every request the model
/// saw carried `key`: the runner's gateway put it there, the agent held only the job's token.
/// `marker` is a part of the key that no other text has.
pub fn assert_only_the_gateway_sent_the_key(
    server: &quest_runner_selftest::model_server::ModelServer,
    marker: &str,
    key: &str,
) {
    for body in server.requests() {
        assert!(
            !body.to_string().contains(marker),
            "the key reached the model"
        );
    }
    let exchanges = server.exchanges();
    assert!(
        exchanges.iter().all(|e| e.key.as_deref() == Some(key)),
        "a request without the account's key: {:?}",
        exchanges
            .iter()
            .map(|e| (&e.path, &e.key))
            .collect::<Vec<_>>()
    );
}

/// How long a test waits for a stopped build's processes to be gone (see
/// [`survivors_after`]).
pub const BUILD_REAPED: std::time::Duration = std::time::Duration::from_secs(30);

/// Waits up to `limit` for every process whose command line holds `token` to end, and
/// returns the survivors' command lines (empty when all ended). The bound is generous on
/// purpose: a loaded host (the whole suite on two cores) takes seconds to reap a killed
/// build, and what a test proves is that the build stopped long before its 300 s ran out.
pub fn survivors_after(token: &str, limit: std::time::Duration) -> Vec<String> {
    let deadline = std::time::Instant::now() + limit;
    while !processes_with(token).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    processes_with(token)
        .into_iter()
        .filter_map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            Some(format!(
                "{pid}: {}",
                String::from_utf8_lossy(&cmdline).replace('\0', " ")
            ))
        })
        .collect()
}

/// Nix build directories (and fetcher checkouts) named with `token` that are still on disk:
/// in /tmp itself, or in the private TMPDIR the runner gives each nix run (`quest-nix-*`).
pub fn nix_scratch_left(token: &str) -> Vec<PathBuf> {
    let tmp = std::env::temp_dir();
    let listing = |dir: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    let mut left = Vec::new();
    for entry in listing(&tmp) {
        let name = entry
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if name.contains(token) {
            left.push(entry.clone());
        }
        if name.starts_with("quest-nix-") {
            left.extend(
                listing(&entry)
                    .into_iter()
                    .filter(|p| p.to_string_lossy().contains(token)),
            );
        }
    }
    left
}

pub fn unique_token() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("qrtok{}x{nanos}", std::process::id())
}

/// A devShell dependency whose build hangs: its builder renames itself `sleep-<token>` and
/// waits 300 s, so a test can wait for the build to be under way ([`SlowBuild::started`]) and
/// then interrupt it. The build sandbox shows the build nothing of the host, so the test
/// watches for the process, not for a file the build writes.
pub struct SlowBuild {
    pub token: String,
    /// The attribute to splice into [`flake`].
    pub extra: String,
}

impl SlowBuild {
    pub fn new() -> SlowBuild {
        let token = unique_token();
        let extra = format!(
            r#"slow = derivation {{ name = "slow-{token}"; system = "{system}"; builder = "{BUILDER}";
          args = [ "-c" "exec -a sleep-{token} {BUILDER} -c '{wait}'" ]; }};"#,
            system = system(),
            wait = build_sleep(300),
        );
        SlowBuild { token, extra }
    }

    /// The builder's name once it waits.
    pub fn builder_name(&self) -> String {
        format!("sleep-{}", self.token)
    }

    /// Whether the build is under way: a process named [`Self::builder_name`] runs. (Its
    /// command line is renamed by the `exec` itself, so this is never true a moment early.)
    pub fn started(&self) -> bool {
        !processes_named(&self.builder_name()).is_empty()
    }

    /// Watches, until the returned value is dropped, for the build to start: for a test that
    /// cannot poll while the build runs.
    pub fn watch(&self) -> BuildWatch {
        use std::sync::atomic::{AtomicBool, Ordering};
        let seen = std::sync::Arc::new(AtomicBool::new(false));
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let thread = {
            let (seen, done, name) = (seen.clone(), done.clone(), self.builder_name());
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) && !seen.load(Ordering::Relaxed) {
                    seen.store(!processes_named(&name).is_empty(), Ordering::Relaxed);
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            })
        };
        BuildWatch {
            seen,
            done,
            thread: Some(thread),
        }
    }
}

/// See [`SlowBuild::watch`].
pub struct BuildWatch {
    seen: std::sync::Arc<std::sync::atomic::AtomicBool>,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl BuildWatch {
    pub fn seen(&self) -> bool {
        self.seen.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for BuildWatch {
    fn drop(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Pids of processes whose `argv[0]` is `name`.
pub fn processes_named(name: &str) -> Vec<u32> {
    quest_runner::procfs::pids()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| cmdline.split(|b| *b == 0).next() == Some(name.as_bytes()))
        })
        .collect()
}

/// A one-commit repository and a scripted model whose one tool call starts a command named
/// `hang-<token>` that never ends by itself (a later conversation finds the script used up):
/// the job every stop, kill and recovery test needs.
/// A command's request to a registry on a trusted job's allowlist, answered (by the job's
/// proxy: no registry answers in the tests' network namespaces) before the command goes on:
/// the job's proxy, which starts at its first connection, has started by then.
pub const REACH_A_REGISTRY: &str = "curl -s -m 20 -o /dev/null https://registry.npmjs.org/";

pub struct Hanging {
    pub token: String,
    pub repo: Repo,
    pub rev: String,
    pub server: quest_runner_selftest::model_server::ModelServer,
}

impl Hanging {
    pub fn new() -> Hanging {
        Hanging::after("true")
    }

    /// The command runs `before`, then hangs.
    pub fn after(before: &str) -> Hanging {
        use quest_runner_selftest::model_server::{ModelServer, Step};
        let token = unique_token();
        let repo = Repo::new();
        let rev = repo.commit(&[("README.md", "x")]);
        let server = ModelServer::start_isolated_if_root(vec![Step::bash(format!(
            "{before}; (exec -a hang-{token} tail -f /dev/null)"
        ))])
        .expect("model server");
        Hanging {
            token,
            repo,
            rev,
            server,
        }
    }
}

/// A Claude job attempt's private temp dir (its HOME and TMPDIR), as the job's sandbox
/// settings in `job_dir` name it.
pub fn claude_job_temp_dir(job_dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(job_dir.join("runner/srt.json")).unwrap();
    let settings: serde_json::Value = serde_json::from_str(&text).unwrap();
    settings["filesystem"]["allowWrite"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| PathBuf::from(v.as_str().unwrap()))
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("quest-job-"))
        })
        .expect("a quest-job temp dir")
}

/// A trusted claude job of `repo` at `rev` (on branch `main`), for the tests that prepare
/// workspaces directly.
pub fn workspace_job(id: &str, repo: &Path, rev: &str) -> quest_runner::job::Job {
    use quest_runner::job::{AgentKind, Job, Trust};
    Job {
        id: id.into(),
        repo: repo.to_string_lossy().into_owned(),
        rev: rev.into(),
        git_ref: Some("main".into()),
        trust: Trust::Trusted,
        agent: AgentKind::Claude,
        account: "a".into(),
        prompt: "p".into(),
        timeout: std::time::Duration::from_secs(60),
    }
}

/// Closes every descriptor of this process open on `path`, as process death would (a job
/// lock held by a `Workspace` the test forgot, to play a runner killed outright).
pub fn release_locks_of(path: &Path) {
    let target = std::fs::canonicalize(path).unwrap();
    for fd in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        if std::fs::read_link(fd.path()).ok().as_deref() == Some(target.as_path()) {
            let n: i32 = fd.file_name().to_string_lossy().parse().unwrap();
            unsafe { libc::close(n) };
        }
    }
}

/// A port free on 127.0.0.1 now (the listener is closed before the port is handed on).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One HTTP/1.1 GET with bounded timeouts: the status code and the body.
pub fn get(addr: std::net::SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    use std::time::Duration;
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw)?;
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = raw
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Ok((status, body))
}

/// Makes the runner's library, run inside this test binary, start the runner's own binary for
/// its job shell and executor modes (opencode's commands go through them), which this binary
/// is not. Once per process: every caller sets the same value, and a variable set while other
/// threads start children is best set only once.
pub fn runner_runs_jobshell() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::env::set_var(
            quest_runner::jobshell::SELF_VAR,
            env!("CARGO_BIN_EXE_quest-runner"),
        )
    });
}

/// Whether process `pid` still runs: a zombie does not. The tests' binary becomes a subreaper
/// once a test runs the runner in-process (it is the subreaper of its agents' orphans), so
/// the orphans of a runner a test kills are re-parented to it and stay zombies, never reaped.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command's closing parenthesis: `pid (comm) S ...`.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}
