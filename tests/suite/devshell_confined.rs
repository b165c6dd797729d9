//! The devShell's nix inside the job's boundary (issue 23), with the real Nix: a revision's
//! flake inputs aimed at what the job may not read or reach. Each attempt runs twice: first
//! unconfined, as the runner ran nix before, where it must leak (the control: the hidden
//! bytes appear in `/nix/store`, or the loopback service is reached), then confined, where it
//! must fail with nothing of the hidden file in the store and no connection made.
//!
//! Runs as root with the local store (setup (a)) and, through `scripts/test-daemon`, as an
//! unprivileged user through a nix-daemon (setup (b)).

use crate::support;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use quest_runner::config::Config;
use quest_runner::devshell::network::NixNet;
use quest_runner::devshell::{DevShellError, DevShells, Request};
use quest_runner::job::Trust;
use quest_runner::sandbox::private::HiddenDir;
use quest_runner::sandbox::{self, HiddenFile, Platform, PolicyInputs, SandboxPolicy};
use quest_runner::state::StateDir;
use quest_runner::workspace::WorkspacePaths;
use support::*;

/// Each attempt runs at both trust levels: they differ only in what their policy allows, and
/// nix's confinement follows the policy.
const BOTH: [Trust; 2] = [Trust::Trusted, Trust::Untrusted];

const WRONG: &str = "sha256-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";

/// A runner's fixture: its state dir (a secret directory and another repository's clone in
/// it), an account's key file in a directory of its own, and the job's policy.
struct Fixture {
    _dir: tempfile::TempDir,
    state: PathBuf,
    key_file: PathBuf,
    policy: SandboxPolicy,
}

fn fixture() -> Fixture {
    world_of(Trust::Trusted)
}

fn world_of(trust: Trust) -> Fixture {
    let dir = tempfile::Builder::new()
        .prefix("qr-n23-")
        .tempdir()
        .unwrap();
    let state = dir.path().join("state");
    let accounts = dir.path().join("accounts");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::create_dir_all(&accounts).unwrap();
    let key_file = accounts.join("api-key");
    let job = dir.path().join("job");
    let ws = WorkspacePaths {
        checkout: job.join("checkout"),
        bare_clone: state.join("repos/this.git"),
        git_store: job.join("git"),
        worktree_admin: job.join("git/worktrees/checkout"),
        temp_dir: dir.path().join("tmp/quest-job-1"),
        job_dir: job.clone(),
        devshell_script: None,
        helper_tmp: dir.path().join("tmp/quest-srt-1"),
    };
    let private = vec![HiddenFile {
        what: "accounts.work.api_key_file".into(),
        file: key_file.clone(),
        dirs: vec![HiddenDir {
            dir: accounts,
            link: None,
        }],
    }];
    let policy = sandbox::plan(
        &ws,
        &PolicyInputs {
            platform: Platform::Linux,
            trust,
            extra_hosts: Vec::new(),
            full_access_hosts: Vec::new(),
            dependency_hosts: Vec::new(),
            state_dir: state.clone(),
            operator_home: None,
            private,
        },
    );
    Fixture {
        _dir: dir,
        state,
        key_file,
        policy,
    }
}

fn token() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("n23secret{nanos}{}", std::process::id())
}

/// A revision whose devShell names the input `evil` (given as flake.nix's attribute set and
/// the lock's `locked` entry) and carries `extra` in its derivation.
fn hostile_rev(repo: &Repo, evil: &str, locked: serde_json::Value, extra: &str) -> String {
    let system = system();
    let bash = fixture_bash();
    let flake = format!(
        r#"{{
  inputs.evil = {{ {evil} flake = false; }};
  outputs = {{ self, evil }}: {{
    devShells.{system}.default = derivation {{
      name = "confined-shell";
      system = "{system}";
      builder = "{BUILDER}";
      outputs = [ "out" ];
      args = [ "-c" "echo > $out" ];
      EVIL = "${{evil}}";
      {extra}
    }};
  }};
}}
"#
    );
    let mut lock: serde_json::Value = serde_json::from_str(&bash.lock_file()).unwrap();
    let mut original = locked.clone();
    for k in ["narHash", "rev"] {
        original.as_object_mut().unwrap().remove(k);
    }
    lock["nodes"]["evil"] =
        serde_json::json!({ "flake": false, "locked": locked, "original": original });
    lock["nodes"]["root"]["inputs"]["evil"] = "evil".into();
    let lock = serde_json::to_string_pretty(&lock).unwrap();
    repo.commit_exact(&[("flake.nix", &flake), ("flake.lock", &lock)])
}

/// Every store a build of the fixture can write, where its paths are on the host: the host's
/// (the unconfined control's) and each repository's under the state dir (a job's).
fn stores(w: &Fixture) -> Vec<PathBuf> {
    let mut out = vec![quest_runner::store_path::store_dir()];
    if let Ok(dirs) = std::fs::read_dir(w.state.join("devshell/stores")) {
        for dir in dirs.flatten() {
            out.push(quest_runner::devshell::repo_store::real_dir(&dir.path()));
        }
    }
    out
}

/// The paths in every store of the fixture.
fn store_names(w: &Fixture) -> BTreeSet<PathBuf> {
    stores(w)
        .iter()
        .flat_map(|dir| std::fs::read_dir(dir).into_iter().flatten().flatten())
        .map(|e| e.path())
        .collect()
}

/// Whether a store path made since `before` holds `needle` in a file's name or bytes.
fn store_gained(w: &Fixture, before: &BTreeSet<PathBuf>, needle: &str) -> Option<PathBuf> {
    for path in store_names(w).difference(before) {
        if path.to_string_lossy().ends_with(".chroot") {
            continue;
        }
        if let Some(found) = holds(path, needle.as_bytes()) {
            return Some(found);
        }
    }
    None
}

/// Whether the store path `path` (by its name) holds `needle` in any of `stores`.
fn held_in(stores: &[PathBuf], path: &str, needle: &[u8]) -> Option<PathBuf> {
    let name = Path::new(path).strip_prefix("/nix/store/").ok()?;
    stores.iter().find_map(|s| holds(&s.join(name), needle))
}

/// Whether a file under `path` holds `needle`: regular files only, for a concurrent test's
/// build in progress has a `<drv>.chroot` in the store, with the build's `/dev` (a read of
/// its `ptmx` never returns).
fn holds(path: &Path, needle: &[u8]) -> Option<PathBuf> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if meta.is_dir() {
        let entries = std::fs::read_dir(path).ok()?;
        return entries.flatten().find_map(|e| holds(&e.path(), needle));
    }
    if !meta.is_file() {
        return None;
    }
    let bytes = std::fs::read(path).unwrap_or_default();
    bytes
        .windows(needle.len())
        .any(|w| w == needle)
        .then(|| path.to_path_buf())
}

fn config() -> Config {
    let mut config = Config::default();
    let options = &mut config.nix.options;
    options.insert("substituters".to_string(), String::new());
    config
}

/// The fixture's devShell cache, and a request for `rev` of `repo`.
fn shells_and_request(w: &Fixture, repo: &Repo, rev: &str) -> (Arc<DevShells>, Request) {
    let shells = Arc::new(DevShells::new(&StateDir::at(&w.state), &config()));
    let req = Request {
        repo: repo.bare(),
        rev: rev.to_string(),
        git_ref: Some("main".into()),
        attr: None,
    };
    (shells, req)
}

/// Builds the revision's devShell, confined to the fixture's policy or not.
fn build(w: &Fixture, repo: &Repo, rev: &str, confined: bool) -> Result<String, DevShellError> {
    let (shells, req) = shells_and_request(w, repo, rev);
    let policy = Arc::new(w.policy.clone());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let shell = rt.block_on(async {
        match confined {
            true => shells.get_confined(&req, policy, None).await,
            false => shells.get(&req).await,
        }
    })?;
    let script = shell
        .env
        .map(|e| std::fs::read_to_string(e.script).unwrap());
    Ok(script.unwrap_or_default())
}

/// What one attempt did: its build's answer, and where the secret showed up.
struct Seen {
    answer: Result<String, DevShellError>,
    leaked: Option<PathBuf>,
    /// Where the stores it could write are on the host.
    stores: Vec<PathBuf>,
}

fn attempt(w: &Fixture, repo: &Repo, rev: &str, secret: &str, confined: bool) -> Seen {
    let before = store_names(w);
    let answer = build(w, repo, rev, confined);
    let mut leaked = store_gained(w, &before, secret);
    let stores = stores(w);
    if let Ok(script) = &answer {
        // With the right hash the devShell names the copy: the job reads it through EVIL.
        if let Some(path) = script_value(script, "EVIL") {
            leaked = leaked.or_else(|| held_in(&stores, &path, secret.as_bytes()));
        }
    }
    Seen {
        answer,
        leaked,
        stores,
    }
}

fn script_value(script: &str, var: &str) -> Option<String> {
    let line = script
        .lines()
        .find(|l| l.starts_with(&format!("export {var}=")))?;
    let value = line.split_once('=')?.1;
    Some(value.trim_matches('\'').to_string())
}

/// The control leaked; the confined run failed, leaked nothing, and its error names no store
/// path holding the secret.
fn assert_refused(id: &str, control: Seen, confined: Seen, secret: &str) {
    let leak = control.leaked.clone();
    assert!(
        leak.is_some(),
        "{id}: the unconfined control did not leak: {:?}",
        control.answer.err()
    );
    println!("ESCAPED-before {id}: unconfined nix put the secret at {leak:?}");
    assert!(
        confined.leaked.is_none(),
        "{id}: confined nix leaked into {:?}",
        confined.leaked
    );
    let err = match confined.answer {
        Ok(script) => panic!("{id}: the confined build succeeded:\n{script}"),
        Err(e) => e.to_string(),
    };
    assert!(!err.contains(secret), "{id}: {err}");
    for path in err.split(|c: char| c.is_whitespace() || "'\"`".contains(c)) {
        if path.starts_with("/nix/store/") {
            assert!(
                held_in(&confined.stores, path, secret.as_bytes()).is_none(),
                "{path}"
            );
        }
    }
    println!("refused-after {id}: {}", first_line(&err));
}

fn secret_dir(w: &Fixture, secret: &str) -> PathBuf {
    let dir = w.state.join(format!(
        "secret-{}",
        secret.len() + secret.as_bytes()[secret.len() - 1] as usize
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("id_key"), secret).unwrap();
    dir
}

fn path_input(dir: &Path, hash: &str) -> (String, serde_json::Value) {
    let d = dir.display().to_string();
    let nix = format!(r#"type = "path"; path = "{d}";"#);
    (
        nix,
        serde_json::json!({ "type": "path", "path": d, "narHash": hash }),
    )
}

#[test]
fn path_input_to_a_hidden_directory_wrong_hash() {
    for trust in BOTH {
        path_input_to_a_hidden_directory_wrong_hash_at(trust);
    }
}

fn path_input_to_a_hidden_directory_wrong_hash_at(trust: Trust) {
    let w = world_of(trust);
    let repo = Repo::new();
    let (control, confined) = (token(), token());
    let seen = |secret: &str, on: bool| {
        let (nix, locked) = path_input(&secret_dir(&w, secret), WRONG);
        let rev = hostile_rev(&repo, &nix, locked, "");
        attempt(&w, &repo, &rev, secret, on)
    };
    let before = seen(&control, false);
    let after = seen(&confined, true);
    assert_refused(
        &format!("path-wrong-hash ({trust:?})"),
        before,
        after,
        &confined,
    );
}

#[test]
fn path_input_to_a_hidden_directory_right_hash() {
    for trust in BOTH {
        path_input_to_a_hidden_directory_right_hash_at(trust);
    }
}

fn path_input_to_a_hidden_directory_right_hash_at(trust: Trust) {
    let w = world_of(trust);
    let repo = Repo::new();
    let (control, confined) = (token(), token());
    let seen = |secret: &str, on: bool| {
        let dir = secret_dir(&w, secret);
        let hash = quest_runner::nar::nar_hash(&dir).unwrap();
        let (nix, locked) = path_input(&dir, &hash);
        let rev = hostile_rev(&repo, &nix, locked, "");
        attempt(&w, &repo, &rev, secret, on)
    };
    let before = seen(&control, false);
    assert!(
        before.answer.is_ok(),
        "the control: {:?}",
        before.answer.err()
    );
    let after = seen(&confined, true);
    assert_refused(
        &format!("path-right-hash ({trust:?})"),
        before,
        after,
        &confined,
    );
}

#[test]
fn git_input_to_a_repository_the_job_may_not_read() {
    for trust in BOTH {
        git_input_to_a_repository_the_job_may_not_read_at(trust);
    }
}

fn git_input_to_a_repository_the_job_may_not_read_at(trust: Trust) {
    let w = world_of(trust);
    let repo = Repo::new();
    let (control, confined) = (token(), token());
    let seen = |secret: &str, on: bool| {
        let other = w
            .state
            .join(format!("repos/other-{}", &secret[secret.len() - 4..]));
        std::fs::create_dir_all(&other).unwrap();
        git(&other, &["init", "-q", "-b", "main"]);
        std::fs::write(other.join("private.txt"), secret).unwrap();
        git(&other, &["add", "-A"]);
        git(&other, &["commit", "-q", "-m", "private"]);
        let rev = git(&other, &["rev-parse", "HEAD"]);
        let url = format!("file://{}", other.display());
        let nix = format!(r#"type = "git"; url = "{url}"; ref = "main";"#);
        let locked = serde_json::json!({
            "type": "git", "url": url, "ref": "main", "rev": rev, "narHash": WRONG,
        });
        let rev = hostile_rev(&repo, &nix, locked, "");
        attempt(&w, &repo, &rev, secret, on)
    };
    let before = seen(&control, false);
    let after = seen(&confined, true);
    assert_refused(
        &format!("git-other-repo ({trust:?})"),
        before,
        after,
        &confined,
    );
}

#[test]
fn file_input_aimed_at_the_account_key() {
    for trust in BOTH {
        file_input_aimed_at_the_account_key_at(trust);
    }
}

fn file_input_aimed_at_the_account_key_at(trust: Trust) {
    let w = world_of(trust);
    let repo = Repo::new();
    let (control, confined) = (token(), token());
    let seen = |secret: &str, on: bool| {
        std::fs::write(&w.key_file, secret).unwrap();
        let (nix, locked) = path_input(&w.key_file, WRONG);
        let rev = hostile_rev(
            &repo,
            &nix,
            locked,
            &format!("SALT = \"{}\";", &secret[secret.len() - 6..]),
        );
        attempt(&w, &repo, &rev, secret, on)
    };
    let before = seen(&control, false);
    let after = seen(&confined, true);
    assert_refused(
        &format!("file-account-key ({trust:?})"),
        before,
        after,
        &confined,
    );
}

/// Issue 38, nix as root: a `path:` input through `/proc/1/root`. A root nix whose PID 1 still
/// sits in the runner's mount namespace reads the host's whole tree that way, around every
/// hidden tree; a nix that is the job's identity, in a PID namespace of its own, cannot.
#[test]
fn path_input_through_proc_1_root() {
    if !rustix::process::geteuid().is_root() {
        // The control needs root: an unprivileged runner's nix never had the route.
        println!("path-proc-root: not root, so no nix of this runner is root; nothing to try");
        return;
    }
    for trust in BOTH {
        path_input_through_proc_1_root_at(trust);
    }
}

fn path_input_through_proc_1_root_at(trust: Trust) {
    let w = world_of(trust);
    let repo = Repo::new();
    let seen = |secret: &str, through: &str, on: bool| {
        let dir = secret_dir(&w, secret);
        let hash = quest_runner::nar::nar_hash(&dir).unwrap();
        let path = Path::new(through).join(dir.strip_prefix("/").unwrap());
        let (nix, locked) = path_input(&path, &hash);
        let rev = hostile_rev(&repo, &nix, locked, "");
        attempt(&w, &repo, &rev, secret, on)
    };
    // The control reads through its own process's root: a root nix reads any process's
    // (this host's PID 1 is not the runner's, so `/proc/1` is not the route here; it is inside
    // a PID namespace whose first process bubblewrap's is, in the runner's mount namespace).
    for through in ["/proc/1/root", "/proc/self/root"] {
        let (control, confined) = (token(), token());
        let before = seen(&control, "/proc/self/root", false);
        assert!(
            before.answer.is_ok(),
            "the control: {:?}",
            before.answer.err()
        );
        let after = seen(&confined, through, true);
        assert_refused(
            &format!("path-proc-root {through} ({trust:?})"),
            before,
            after,
            &confined,
        );
    }
}

/// The operator's token planted in the runner's environment, as an `EnvironmentFile` puts it.
const PLANTED: &str = "QUEST_TEST_OPERATOR_TOKEN";

/// Issue 38, the runner's environment: `builtins.fetchurl` of `/proc/self/environ`. Nix copies what
/// it fetches into the store before it compares the hash, so a nix that carries the runner's
/// environment puts it where the next job reads it.
#[test]
fn file_input_at_the_clients_own_environment() {
    static PLANT: std::sync::Once = std::sync::Once::new();
    let secret = token();
    // Once, before any of this test's nix runs; every nix this process starts carries it.
    PLANT.call_once(|| std::env::set_var(PLANTED, &secret));
    let secret = std::env::var(PLANTED).unwrap();
    for trust in BOTH {
        let w = world_of(trust);
        let repo = Repo::new();
        let harmless = repo.dir.path().join("harmless");
        std::fs::create_dir_all(&harmless).unwrap();
        let hash = quest_runner::nar::nar_hash(&harmless).unwrap();
        let seen = |on: bool| {
            let (nix, locked) = path_input(&harmless, &hash);
            // The wrong hash: nix has copied the file into the store when it says so. A salt
            // of its own per run: each copy is a new store path.
            let extra = format!(
                "ENVIRON = builtins.fetchurl {{ url = \"file:///proc/self/environ?{}\"; \
                 sha256 = \"{}\"; }};",
                token(),
                "0".repeat(64)
            );
            let rev = hostile_rev(&repo, &nix, locked, &extra);
            attempt(&w, &repo, &rev, &secret, on)
        };
        let before = seen(false);
        let after = seen(true);
        assert_refused(&format!("env-environ ({trust:?})"), before, after, &secret);
    }
}

/// A loopback service for the network attempts: it records the first line of every request
/// it gets and answers each with a small body, for at most a minute.
struct Service {
    port: u16,
    got: Arc<Mutex<Vec<String>>>,
}

fn service() -> Service {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let got = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&got);
    std::thread::spawn(move || {
        let until = Instant::now() + Duration::from_secs(60);
        while Instant::now() < until {
            let Ok((mut conn, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            };
            conn.set_nonblocking(false).unwrap();
            conn.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let mut buf = [0u8; 512];
            let n = conn.read(&mut buf).unwrap_or(0);
            let text = String::from_utf8_lossy(&buf[..n]);
            seen.lock()
                .unwrap()
                .push(text.lines().next().unwrap_or("").to_string());
            let _ = conn.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nrole\n");
        }
    });
    Service { port, got }
}

fn reached(service: &Service, what: &str) -> bool {
    std::thread::sleep(Duration::from_millis(200));
    let got = service.got.lock().unwrap();
    got.iter().any(|l| l.contains(what))
}

#[test]
fn tarball_input_aimed_at_a_loopback_service() {
    for trust in BOTH {
        tarball_input_aimed_at_a_loopback_service_at(trust);
    }
}

fn tarball_input_aimed_at_a_loopback_service_at(trust: Trust) {
    let w = world_of(trust);
    let repo = Repo::new();
    let svc = service();
    let seen = |tag: &str, on: bool| {
        let url = format!(
            "http://127.0.0.1:{}/latest/meta-data/iam/security-credentials/{tag}",
            svc.port
        );
        let nix = format!(r#"type = "tarball"; url = "{url}";"#);
        let locked = serde_json::json!({ "type": "tarball", "url": url, "narHash": WRONG });
        let rev = hostile_rev(&repo, &nix, locked, "");
        let answer = build(&w, &repo, &rev, on);
        (answer, reached(&svc, tag))
    };
    let (answer, before) = seen("control", false);
    assert!(
        before,
        "the unconfined control never reached the service: {answer:?}"
    );
    println!("ESCAPED-before tarball-loopback ({trust:?}): unconfined nix sent GET to 127.0.0.1");
    let (answer, after) = seen("confined", true);
    assert!(!after, "confined nix reached the loopback service");
    let err = answer
        .expect_err("the confined build succeeded")
        .to_string();
    println!(
        "refused-after tarball-loopback ({trust:?}): {}",
        first_line(&err)
    );
}

/// Nix's own words of an error: its first line after the command the runner names.
fn first_line(text: &str) -> &str {
    let line = text.lines().next().unwrap_or("");
    let line = line.split_once(" failed: ").map_or(line, |(_, e)| e);
    &line[..line.len().min(200)]
}

/// A revision whose devShell needs a fixed-output derivation (named uniquely, so it is never
/// in the store yet) whose builder connects to `port` and says `GET /fod-<tag>`.
fn fod_rev(repo: &Repo, port: u16, tag: &str) -> String {
    let system = system();
    let fod = format!(
        r#"FOD = derivation {{
        name = "fod-{tag}-{}"; system = "{system}"; builder = "{BUILDER}";
        outputHashMode = "flat"; outputHashAlgo = "sha256";
        outputHash = "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=";
        args = [ "-c" "set -e; exec 3<>/dev/tcp/127.0.0.1/{port}; echo 'GET /fod-{tag}' >&3; : > $out" ];
      }};"#,
        token(),
    );
    repo.commit(&[("flake.nix", &flake(&fod))])
}

/// A fixed-output derivation in the devShell's closure whose builder connects to the
/// service. Nix gives fixed-output builds the network of whoever builds them: in both setups
/// that is the daemon the runner started for the run, in the job's network, so the builder
/// finds no service.
#[test]
fn fixed_output_builder_aimed_at_a_loopback_service() {
    let w = fixture();
    let repo = Repo::new();
    let svc = service();
    let seen = |tag: &str, on: bool| {
        let rev = fod_rev(&repo, svc.port, tag);
        let answer = build(&w, &repo, &rev, on);
        (answer, reached(&svc, &format!("GET /fod-{tag}")))
    };
    let (answer, before) = seen("control", false);
    assert!(
        before,
        "the unconfined control's builder never reached the service: {answer:?}"
    );
    println!("ESCAPED-before fod-loopback: an unconfined fixed-output builder reached 127.0.0.1");
    let (answer, after) = seen("confined", true);
    assert!(
        !after,
        "a confined fixed-output builder reached the service"
    );
    let err = answer
        .expect_err("the confined build succeeded")
        .to_string();
    println!("refused-after fod-loopback: {}", first_line(&err));
}

/// An untrusted revision gets its devShell, confined the same way, with substitutes and
/// sandboxed builds only: a fixed-output derivation it would have to build is refused, with
/// the reason, before its builder runs.
#[test]
fn untrusted_revisions_get_their_devshell_without_fixed_output_builds() {
    let w = world_of(Trust::Untrusted);
    let repo = Repo::new();
    let rev = repo.commit(&[("flake.nix", &flake(r#"GREETING = "untrusted";"#))]);
    let script = build(&w, &repo, &rev, true).unwrap();
    assert!(script.contains("export GREETING='untrusted'"), "{script}");
    let svc = service();
    let rev = fod_rev(&repo, svc.port, "untrusted");
    let err = build(&w, &repo, &rev, true).expect_err("built").to_string();
    assert!(!reached(&svc, "GET /fod-untrusted"));
    assert!(
        err.contains("untrusted revision's builds get no network"),
        "{err}"
    );
    println!("refused-after untrusted-fod: {}", first_line(&err));
}

/// Confinement changes nothing for a plain revision: its devShell builds and is a hit after.
#[test]
fn a_plain_revision_builds_confined() {
    let w = fixture();
    let repo = Repo::new();
    let rev = repo.commit(&[("flake.nix", &flake(r#"GREETING = "confined";"#))]);
    let script = build(&w, &repo, &rev, true).unwrap();
    assert!(script.contains("export GREETING='confined'"), "{script}");
    let again = build(&w, &repo, &rev, true).unwrap();
    assert_eq!(script, again);
}

/// The job's hook (`serve`'s rlimits and its placement in the job's cgroup) reaches both
/// processes that act for the job: the confined client, which evaluates, and the daemon's
/// launcher, whose tree builds. Shown by what the hook was handed; the VM test shows the
/// cgroup's limit firing on a build (scripts/vm-guest, "build-pids").
#[test]
fn the_jobs_hook_reaches_its_nix_and_its_daemon() {
    let w = fixture();
    let repo = Repo::new();
    let rev = repo.commit(&[("flake.nix", &flake(r#"GREETING = "hooked";"#))]);
    let (shells, req) = shells_and_request(&w, &repo, &rev);
    let seen: Arc<Mutex<Vec<String>>> = Default::default();
    let record = seen.clone();
    let hook: quest_runner::process::CommandHook =
        Arc::new(move |cmd: &mut std::process::Command| {
            let line: Vec<String> = std::iter::once(cmd.get_program())
                .chain(cmd.get_args())
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            record.lock().unwrap().push(line.join(" "));
        });
    let rt = tokio::runtime::Runtime::new().unwrap();
    let shell = rt
        .block_on(shells.get_for_job(&req, Arc::new(w.policy.clone()), None, Some(hook)))
        .expect("the devShell builds");
    assert!(shell.env.is_some());
    let seen = seen.lock().unwrap().clone();
    let daemon = seen.iter().any(|l| l.contains("nix-daemon"));
    let client = seen.iter().any(|l| l.contains("print-dev-env"));
    assert!(daemon && client, "the hook saw: {seen:#?}");
}

/// A confined miss dropped mid-build stops nix, its namespace and its builder, and leaves no
/// lock or staged entry; the cache then builds the next revision as before.
#[test]
fn a_dropped_confined_build_leaves_nothing() {
    let w = fixture();
    let repo = Repo::new();
    let slow = SlowBuild::new();
    let rev = repo.commit(&[("flake.nix", &flake(&slow.extra))]);
    let shells = Arc::new(DevShells::new(&StateDir::at(&w.state), &config()));
    let req = Request {
        repo: repo.bare(),
        rev,
        git_ref: Some("main".into()),
        attr: None,
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let build = {
            let (shells, policy) = (Arc::clone(&shells), Arc::new(w.policy.clone()));
            tokio::spawn(async move { shells.get_confined(&req, policy, None).await })
        };
        let deadline = Instant::now() + Duration::from_secs(180);
        while !slow.started() {
            assert!(Instant::now() < deadline, "the slow builder never started");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        build.abort();
        let _ = build.await;
    });
    let survivors = survivors_after(&slow.token, BUILD_REAPED);
    assert!(survivors.is_empty(), "the build survived: {survivors:?}");
    let layout = shells.layout();
    for dir in [layout.tmp(), layout.locks()] {
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
        assert!(left.is_empty(), "{} not empty: {left:?}", dir.display());
    }
    // Nor in the repository's store: the builder's sandbox directory, its locks, its output.
    let left = left_in_repository_stores(&w, &slow.token);
    assert!(left.is_empty(), "left in the store: {left:?}");
    let rev = repo.commit(&[("flake.nix", &flake(r#"AFTER = "drop";"#))]);
    let script = build(&w, &repo, &rev, true).unwrap();
    assert!(script.contains("export AFTER='drop'"));
}

/// The job's proxy, as `run` starts it for a trusted job whose allowlist holds `allowed`, and
/// how the devShell's nix reaches it (`nix.network = "proxy"`, the default).
struct JobNetwork {
    proxy: Option<quest_runner::netproxy::job::JobNetwork>,
    net: NixNet,
    log: PathBuf,
    policy: SandboxPolicy,
    rt: tokio::runtime::Runtime,
}

fn job_network(w: &Fixture, allowed: &str) -> JobNetwork {
    let mut policy = w.policy.clone();
    policy.allowed_hosts.push(allowed.to_string());
    let job_dir = w.state.join("jobs/n23");
    let temp = w.state.join("jobs/n23-tmp");
    std::fs::create_dir_all(&temp).unwrap();
    std::fs::create_dir_all(&job_dir).unwrap();
    if let Some(ca) = &policy.ca {
        std::fs::create_dir_all(ca.bundle.parent().unwrap()).unwrap();
    }
    let env: Vec<(String, String)> = std::env::vars().collect();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let proxy = rt
        .block_on(quest_runner::netproxy::job::start(
            &mut policy,
            quest_runner::netproxy::job::JobNet {
                job_id: "n23",
                timeout: Duration::from_secs(300),
                result_dir: &job_dir,
                job_dir: &job_dir,
                temp_dir: &temp,
                bind: None,
                adjust: None,
                env_source: &env,
                deps: None,
            },
        ))
        .unwrap()
        .expect("a trusted policy with hosts runs a proxy");
    let net = NixNet {
        proxy_port: policy.proxy_port.unwrap(),
        ca_bundle: policy.ca.as_ref().map(|ca| ca.bundle.clone()),
        socket_dir: job_dir.join("nix-net"),
        runner: env!("CARGO_BIN_EXE_quest-runner").into(),
        adjust: None,
    };
    JobNetwork {
        proxy: Some(proxy),
        net,
        log: job_dir.join("network.log"),
        policy,
        rt,
    }
}

impl JobNetwork {
    fn build(&self, w: &Fixture, repo: &Repo, rev: &str) -> Result<String, DevShellError> {
        let (shells, req) = shells_and_request(w, repo, rev);
        let (policy, net) = (Arc::new(self.policy.clone()), Some(self.net.clone()));
        self.rt
            .block_on(shells.get_confined(&req, policy, net))
            .map(|shell| shell.key)
    }

    fn log_lines(&self, needle: &str) -> Vec<String> {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        log.lines()
            .filter(|l| l.contains(needle))
            .map(String::from)
            .collect()
    }
}

impl Drop for JobNetwork {
    fn drop(&mut self) {
        if let Some(proxy) = self.proxy.take() {
            self.rt.block_on(proxy.stop());
        }
    }
}

fn tarball_rev(repo: &Repo, port: u16, tag: &str) -> String {
    let url = format!("http://127.0.0.1:{port}/inputs/{tag}.tar.gz");
    let nix = format!(r#"type = "tarball"; url = "{url}";"#);
    let locked = serde_json::json!({ "type": "tarball", "url": url, "narHash": WRONG });
    hostile_rev(repo, &nix, locked, "")
}

/// The devShell's nix on the job's network: a flake input from a host on the job's allowlist
/// is fetched through the job's proxy (the request reaches the host, and the job's network log
/// says allowed); one from a host off it, which unconfined nix reaches, is refused by the
/// decider and logged, and never reaches its host. Nothing else is reachable from nix's
/// namespace: the one address in it is the proxy.
#[test]
fn inputs_are_fetched_through_the_job_proxy() {
    let w = fixture();
    let repo = Repo::new();
    let (allowed, other) = (service(), service());
    let job = job_network(&w, &format!("127.0.0.1:{}", allowed.port));

    let rev = tarball_rev(&repo, allowed.port, "allowed");
    let answer = job.build(&w, &repo, &rev);
    assert!(
        reached(&allowed, "/inputs/allowed.tar.gz"),
        "nix's fetch of an allowed host never reached it: {answer:?}"
    );
    let logged = job.log_lines("/inputs/allowed.tar.gz");
    assert!(
        logged.iter().any(|l| l.ends_with(" allowed")),
        "the job's network log: {logged:?}"
    );
    println!("allowed: {}", logged[0]);

    let rev = tarball_rev(&repo, other.port, "control");
    let control = build(&w, &repo, &rev, false);
    assert!(
        reached(&other, "/inputs/control.tar.gz"),
        "the unconfined control never reached the host off the allowlist: {control:?}"
    );
    println!(
        "ESCAPED-before off-allowlist: unconfined nix fetched from 127.0.0.1:{}",
        other.port
    );
    let rev = tarball_rev(&repo, other.port, "refused");
    let err = job.build(&w, &repo, &rev).expect_err("built").to_string();
    assert!(!reached(&other, "/inputs/refused.tar.gz"), "{err}");
    let refused = job.log_lines(&format!("127.0.0.1:{}", other.port));
    assert!(
        refused.iter().any(|l| l.contains(" refused 403 ")),
        "no refusal in the job's network log: {refused:?}"
    );
    assert!(err.contains("extra_hosts"), "{err}");
    println!("refused-after off-allowlist: {}", refused[0]);
}

/// `nix-store --add` of a directory holding `secret`: a store path as any user can make one.
fn store_add(w: &Fixture, name: &str, secret: &str) -> PathBuf {
    let dir = w.state.join(format!("add-{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("file"), secret).unwrap();
    let out = std::process::Command::new("nix-store")
        .arg("--add")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// Defence in depth for the store: a job's namespace shows the store paths of its devShell's
/// closure, not every path any user added (the store is world-readable). The control: the
/// same namespace without the view reads the other path; the permitted read succeeds in the
/// view.
#[test]
fn the_job_sees_its_devshell_closure_not_the_whole_store() {
    use quest_runner::sandbox::boundary::{plan, Identity, OwnFiles, Tools};
    let w = fixture();
    let (needed, other) = (token(), token());
    let (needed_path, other_path) = (
        store_add(&w, "needed", &needed),
        store_add(&w, "other", &other),
    );
    let store = quest_runner::store_path::store_dir();
    let programs = [PathBuf::from("/usr/bin/cat")];
    let view =
        quest_runner::sandbox::store::view(&store, std::slice::from_ref(&needed_path), &programs)
            .expect("nothing the test runs is in the store");
    let run = |view: Option<Vec<PathBuf>>, path: &Path| {
        let mut policy = w.policy.clone();
        policy.store_view = view.map(|paths| quest_runner::sandbox::store::StoreView {
            real: None,
            paths,
            host: Vec::new(),
        });
        let tools = Tools {
            bwrap: which::which("bwrap").unwrap(),
            setpriv: PathBuf::new(),
        };
        let own = OwnFiles::default();
        let confined = plan(
            &policy,
            &own,
            Identity::Runner,
            None,
            &tools,
            (Path::new("/"), None),
        );
        let file = path.join("file");
        let args = confined.args(Path::new("/usr/bin/cat"), &[file.display().to_string()]);
        let out = std::process::Command::new(&confined.program)
            .args(&args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(
        run(None, &other_path),
        other,
        "the control: the whole store"
    );
    println!(
        "ESCAPED-before store-view: the job's namespace read {}",
        other_path.display()
    );
    assert_eq!(
        run(Some(view.clone()), &needed_path),
        needed,
        "the closure is readable"
    );
    assert_eq!(
        run(Some(view), &other_path),
        "",
        "another store path was readable"
    );
    println!(
        "refused-after store-view: {} is absent",
        other_path.display()
    );
}

/// Tenancy of the store (issue 38): repository B names a store path of repository A by its
/// hash — a fixed-output derivation whose output is A's path (a file A's flake copied into
/// the store), so Nix takes it as already built — and reads it while evaluating. No file of
/// the host is read and no path rule applies: only a store that does not hold A's path stops
/// it. The control: both built unconfined, in the one host store, B's devShell carries A's
/// secret. Confined, each repository builds in its own store and B's build has to run the
/// derivation, which fails (trusted) or is refused before it starts (untrusted).
#[test]
fn another_repositorys_store_path_named_by_hash() {
    for trust in BOTH {
        another_repositorys_store_path_named_by_hash_at(trust);
    }
}

fn another_repositorys_store_path_named_by_hash_at(trust: Trust) {
    let secret = token();
    let system = system();
    let a = Repo::new();
    let a_rev = a.commit(&[
        ("flake.nix", &flake(r#"SECRET_FILE = "${./secret.txt}";"#)),
        ("secret.txt", &secret),
    ]);
    let copy = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(copy.path(), &secret).unwrap();
    let hash = quest_runner::nar::nar_hash(copy.path()).unwrap();
    let b = Repo::new();
    let b_rev = b.commit(&[(
        "flake.nix",
        &flake(&format!(
            r#"LEAK = builtins.readFile (derivation {{
        name = "secret.txt"; system = "{system}"; builder = "{BUILDER}";
        args = [ "-c" "exit 1" ];
        outputHashMode = "recursive"; outputHashAlgo = "sha256"; outputHash = "{hash}";
      }});"#
        )),
    )]);
    let run = |confined: bool| {
        let w = world_of(trust);
        let a_script = build(&w, &a, &a_rev, confined).expect("repository A builds");
        let a_path = script_value(&a_script, "SECRET_FILE").expect("A names its file");
        let seen = attempt(&w, &b, &b_rev, &secret, confined);
        let leaked = match &seen.answer {
            Ok(script) => script_value(script, "LEAK").filter(|v| v.contains(&secret)),
            Err(_) => None,
        };
        (a_path, seen, leaked)
    };
    let id = format!("store-tenancy ({trust:?})");
    let (a_path, control, leaked) = run(false);
    assert!(
        leaked.is_some(),
        "{id}: the unconfined control did not read A's {a_path}: {:?}",
        control.answer.as_ref().err()
    );
    println!("ESCAPED-before {id}: B's devShell read A's {a_path} by its hash");
    let (a_path, confined, leaked) = run(true);
    assert!(leaked.is_none(), "{id}: B read A's {a_path} confined");
    let err = match confined.answer {
        Ok(script) => panic!("{id}: B's confined build succeeded:\n{script}"),
        Err(e) => e.to_string(),
    };
    assert!(!err.contains(&secret), "{id}: {err}");
    println!("refused-after {id}: {}", first_line(&err));
}

/// An untrusted revision's build within the job's disk limits (issue 38): a builder writing
/// one file larger than `limits.disk` is stopped at once (RLIMIT_FSIZE on the daemon, which
/// its builders inherit); one writing outputs, or scratch files, each under the limit but
/// past it together, or more files than `limits.disk_files`, is stopped by the job's disk
/// watchdog, which counts the daemon's build directories and what the build adds to the
/// repository's store. Each error names the limit and what held the bytes, and nothing of the
/// build is left in the store: no output, no sandbox directory, no lock. The control: the same
/// builds with no disk limit succeed, in the same confinement.
#[test]
fn builds_stop_at_the_jobs_disk_limits() {
    let system = system();
    // 64 KiB in `$x`, from bash's builtins only (the build sandbox has nothing else); a build
    // that goes on after writing, as a large one would, until the watchdog stops it.
    const X: &str = "x=x; for i in {1..16}; do x=$x$x; done";
    const HOLD: &str = "h=$((SECONDS+10)); while [ $SECONDS -lt $h ]; do :; done";
    let derivation = |tag: &str, script: &str, attrs: &str| {
        format!(
            r#"BIG = derivation {{ name = "big-{tag}-{}"; system = "{system}"; builder = "{BUILDER}";
        args = [ "-c" "set -e; {X}; {script}; {HOLD}; [ -e $out ] || echo > $out" ]; {attrs} }};"#,
            token()
        )
    };
    let mib =
        |to: &str, n: u32| format!("for i in {{1..{}}}; do printf '%s' $x; done > {to}", n * 16);
    let repo = Repo::new();
    let commit = |extra: String| repo.commit(&[("flake.nix", &flake(&extra))]);
    // Well above what nix's own scratch holds (its fetches' caches: 1–4 MiB here), so what
    // fires is what the build wrote.
    const BYTES: u64 = 16 << 20;
    let cases = [
        (
            "output",
            commit(derivation("out", &mib("$out", 32), "")),
            // The kernel's RLIMIT_FSIZE, or the watchdog when its walk sees the output past
            // the limit first: both are the limit, and either may come first.
            &[
                "larger than limits.disk (16 MiB)",
                "limits.disk (16 MiB): repository store",
            ][..],
        ),
        (
            "outputs",
            // Four outputs of 8 MiB (the sandbox has no `mkdir` for a directory of files).
            commit(derivation(
                "outs",
                &format!("for o in $out $o1 $o2 $o3; do {}; done", mib("$o", 8)),
                r#"outputs = [ "out" "o1" "o2" "o3" ];"#,
            )),
            &["limits.disk (16 MiB): repository store"][..],
        ),
        (
            "scratch",
            commit(derivation(
                "tmp",
                &format!("for f in {{1..8}}; do {}; done", mib("$TMPDIR/big$f", 4)),
                "",
            )),
            &["limits.disk (16 MiB): nix build dirs"][..],
        ),
        (
            "files",
            commit(derivation(
                "files",
                "for f in {1..3000}; do : > $TMPDIR/f$f; done",
                "",
            )),
            &["limits.disk_files (1,000): nix build dirs"][..],
        ),
    ];
    // Each refusal names the limit and, first, what held the most.
    for (what, rev, named) in &cases {
        for limited in [false, true] {
            let w = world_of(Trust::Untrusted);
            let mut config = config();
            config.limits.disk.limit = None;
            config.limits.disk.files = None;
            if limited && *what == "files" {
                config.limits.disk.files = Some(1000);
            } else if limited {
                config.limits.disk.limit = Some(BYTES);
            }
            let shells = Arc::new(DevShells::new(&StateDir::at(&w.state), &config));
            let req = Request {
                repo: repo.bare(),
                rev: rev.clone(),
                git_ref: Some("main".into()),
                attr: None,
            };
            let rt = tokio::runtime::Runtime::new().unwrap();
            let answer = rt.block_on(shells.get_confined(&req, Arc::new(w.policy.clone()), None));
            if !limited {
                answer.unwrap_or_else(|e| panic!("{what}: the control failed: {e}"));
                println!("ESCAPED-before disk-{what}: built with no disk limit");
                continue;
            }
            let err = answer.expect_err("a build over the disk limit succeeded");
            assert!(
                matches!(err, DevShellError::LimitFired { .. }),
                "{what}: {err:?}"
            );
            let err = err.to_string();
            assert!(
                err.starts_with("the disk limit fired: ") && named.iter().any(|n| err.contains(n)),
                "{what}: {err}"
            );
            let left = left_in_repository_stores(&w, "-big-");
            assert!(left.is_empty(), "{what}: left in the store: {left:?}");
            println!("refused-after disk-{what}: {}", first_line(&err));
        }
    }
}

/// A job's build that fails, or is stopped at `limits.disk`, writes nothing to the host's
/// store (issue 55): each repository has its own, and a job's build writes only there and in
/// its counted scratch. Nix 2.8 moved a failed build's outputs out of its sandbox to their
/// logical path, the host's `/nix/store/<hash>-<name>`, unregistered and uncounted: a 1 GiB
/// file there after a build stopped at a 1 GiB limit. Two untrusted revisions, each with a
/// devShell that needs one output: one written and then failed (`exit 1`), one larger than
/// the limit (64 MiB against 16 MiB, in one write: the kernel's RLIMIT_FSIZE stops it, or the
/// job's disk watchdog first). The host's store directory is polled from the test's own mount
/// namespace, the host's, while each builds; no name of the output may appear there during
/// the build or after it, nor anything of the build stay in the repository's store.
#[test]
fn a_failed_or_stopped_build_writes_nothing_to_the_hosts_store() {
    let cases = [
        ("failed", "echo x > $out; exit 1"),
        (
            "disk",
            // 64 MiB from bash's builtins (the build sandbox has nothing else).
            "x=x; for i in {1..26}; do x=$x$x; done; printf '%s' $x > $out",
        ),
    ];
    for (what, script) in cases {
        let name = format!("h55-{what}-{}", token());
        let (err, seen) = build_watching_the_hosts_store(&name, script);
        assert!(
            seen.is_empty(),
            "{what}: the job's build wrote to the host's store: {seen:?} ({err})"
        );
        if what == "disk" {
            assert!(matches!(err, DevShellError::LimitFired { .. }), "{err:?}");
        }
        println!(
            "refused-after host-store-{what}: {}",
            first_line(&err.to_string())
        );
    }
}

/// Builds, confined to an untrusted job's policy with `limits.disk` 16 MiB, a revision whose
/// devShell needs a derivation named `name` built by `script`, which must fail; returns the
/// error and the host's store paths named with `name` seen during the build, after it, and
/// left in the repository's store.
fn build_watching_the_hosts_store(name: &str, script: &str) -> (DevShellError, BTreeSet<PathBuf>) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let system = system();
    let extra = format!(
        r#"BIG = derivation {{ name = "{name}"; system = "{system}"; builder = "{BUILDER}";
        args = [ "-c" "{script}" ]; }};"#
    );
    let repo = Repo::new();
    let rev = repo.commit(&[("flake.nix", &flake(&extra))]);
    let w = world_of(Trust::Untrusted);
    let mut config = config();
    config.limits.disk.limit = Some(16 << 20);
    config.limits.disk.files = None;
    let shells = Arc::new(DevShells::new(&StateDir::at(&w.state), &config));
    let req = Request {
        repo: repo.bare(),
        rev,
        git_ref: Some("main".into()),
        attr: None,
    };
    let named = {
        let (name, store) = (name.to_string(), quest_runner::store_path::store_dir());
        move || -> Vec<PathBuf> {
            let entries = std::fs::read_dir(&store).into_iter().flatten().flatten();
            entries
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().contains(&name))
                .collect()
        }
    };
    let done = Arc::new(AtomicBool::new(false));
    let poller = {
        let (done, named) = (done.clone(), named.clone());
        std::thread::spawn(move || {
            let mut seen = BTreeSet::new();
            while !done.load(Ordering::Relaxed) {
                seen.extend(named());
                std::thread::sleep(Duration::from_millis(10));
            }
            seen
        })
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let answer = rt.block_on(shells.get_confined(&req, Arc::new(w.policy.clone()), None));
    done.store(true, Ordering::Relaxed);
    let mut seen = poller.join().unwrap();
    let err = answer.expect_err("the failing build succeeded");
    std::thread::sleep(Duration::from_secs(1));
    seen.extend(named());
    // What a test before the fix left is not this test's to keep.
    for path in &seen {
        let _ = std::fs::remove_file(path).or_else(|_| std::fs::remove_dir_all(path));
    }
    let left = left_in_repository_stores(&w, name);
    assert!(
        left.is_empty(),
        "{name}: left in the repository's store: {left:?}"
    );
    (err, seen)
}

/// What a stopped build left in the fixture's repository stores: sandbox directories, locks,
/// and paths named with `needle` other than derivations.
fn left_in_repository_stores(w: &Fixture, needle: &str) -> Vec<PathBuf> {
    let stores = stores(w);
    store_names(w)
        .into_iter()
        .filter(|p| !p.starts_with(&stores[0]))
        .filter(|p| {
            let name = p.to_string_lossy();
            name.ends_with(".chroot")
                || name.ends_with(".lock")
                || name.contains(needle) && !name.ends_with(".drv")
        })
        .collect()
}

/// `cache gc` collects the repository stores: a devShell whose entry it removed is gone from
/// its repository's store, while one still cached stays.
#[test]
fn cache_gc_collects_the_repository_stores() {
    use quest_runner::devshell::GcPolicy;
    let w = fixture();
    let repo = Repo::new();
    let old = repo.commit(&[("flake.nix", &flake(&format!("OLD = \"{}\";", token())))]);
    let new = repo.commit(&[("flake.nix", &flake(&format!("NEW = \"{}\";", token())))]);
    let (shells, _) = shells_and_request(&w, &repo, &old);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut built = Vec::new();
    for rev in [&old, &new] {
        let (_, req) = shells_and_request(&w, &repo, rev);
        let shell = rt
            .block_on(shells.get_confined(&req, Arc::new(w.policy.clone()), None))
            .unwrap();
        let env = shell.env.unwrap();
        let store = quest_runner::devshell::repo_store::RepoStore::at(env.store.unwrap());
        built.push(store.real_path(&env.store_path));
        // Entries are ordered by their creation second.
        std::thread::sleep(Duration::from_millis(1100));
    }
    assert!(built.iter().all(|p| p.exists()));
    let report = shells
        .gc(&GcPolicy {
            max_entries: Some(1),
            older_than: None,
        })
        .unwrap();
    assert_eq!(report.stores_collected, 1, "{report:?}");
    assert!(report.stores_failed.is_empty(), "{report:?}");
    assert!(
        !built[0].exists(),
        "the removed entry's devShell is still in its store"
    );
    assert!(built[1].exists(), "the kept entry's devShell was collected");
}
