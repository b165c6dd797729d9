//! A job's locked dependencies (issue 52, `quest_runner::deps`), end to end with the real
//! opencode, srt, npm and pip against the real registries: the runner fetches what the
//! revision's locks pin (never the job), verifies each hash, keeps one cache, and serves each
//! job exactly its set through its proxy — offline for an untrusted revision.
//!
//! The registries are the real ones (small, real locks); a host with no route to them skips
//! these tests with one line, as `selftest --registries` does. The agent's commands reach
//! nothing but the job's proxy: the runner's front answers the locked set from the cache.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use quest_runner_selftest::model_server::{ModelServer, Step};
use serde_json::Value;
use support::*;

/// A real lock of two small packages, as npm 11 writes it with
/// `omit-lockfile-registry-resolved` (no `resolved`: the default registry's addresses).
const NPM_LOCK: &str = r#"{
  "name": "app",
  "version": "1.0.0",
  "lockfileVersion": 3,
  "requires": true,
  "packages": {
    "": {
      "name": "app",
      "version": "1.0.0",
      "dependencies": { "is-number": "7.0.0", "left-pad": "1.3.0" }
    },
    "node_modules/is-number": {
      "version": "7.0.0",
      "resolved": "https://registry.npmjs.org/is-number/-/is-number-7.0.0.tgz",
      "integrity": "sha512-41Cifkg6e8TylSpdtTpeLVMqvSBEVzTttHvERD741+pnZ8ANv0004MRL43QKPDlK9cGvNp6NZWZUBlbGXYxxng==",
      "license": "MIT",
      "engines": { "node": ">=0.12.0" }
    },
    "node_modules/left-pad": {
      "version": "1.3.0",
      "integrity": "sha512-XI5MPzVNApjAyhQzphX8BkmKsKUxD4LdyK24iZeQGinBN9yTQT3bFlCBy/aVx2HrNcqQGsdot8ghrjyrvMCoEA==",
      "license": "WTFPL"
    }
  }
}
"#;

const PACKAGE_JSON: &str =
    r#"{"name":"app","version":"1.0.0","dependencies":{"is-number":"7.0.0","left-pad":"1.3.0"}}"#;

/// six 1.16.0's wheel, pinned by hash (pip's `--require-hashes`).
const REQUIREMENTS: &str = "six==1.16.0 \\\n    --hash=sha256:8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254\n";

/// npm's flags for an install that asks the registry for nothing else.
const NPM_QUIET: &str = "--no-audit --no-fund --no-update-notifier --ignore-scripts";

/// Whether the registries answer here; a test that needs them says so and passes otherwise.
fn registries_reachable() -> bool {
    let ok = std::process::Command::new("curl")
        .args(["-s", "-m", "10", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg("https://registry.npmjs.org/left-pad")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"200"));
    if !ok {
        eprintln!("skipped: the npm registry does not answer from this host");
    }
    ok
}

fn pinned(var: &str, name: &str) -> PathBuf {
    match std::env::var_os(var) {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("npm/node_modules/.bin")
            .join(name),
    }
}

/// A runner with one opencode account pointed at `server`, untrusted revisions allowed.
fn runner_for(server: &ModelServer, secrets: &Path) -> Runner {
    let auth = secrets.join("auth.json");
    std::fs::write(
        &auth,
        serde_json::json!({"scripted": {"type": "api", "key": "sk-test"}}).to_string(),
    )
    .unwrap();
    let runner = Runner::new();
    let config = serde_json::json!({
        "nix": {"options": {"substituters": ""}},
        "allow_untrusted": true,
        "accounts": {"oc": {
            "agent": "opencode",
            "auth_file": auth,
            "model": "scripted/scripted",
            "config": {"provider": {"scripted": {
                "npm": "@ai-sdk/openai-compatible",
                "options": {"baseURL": format!("{}/v1", server.base_url())},
                "models": {"scripted": {"tool_call": true}},
            }}},
        }},
    });
    std::fs::write(runner.state().join("config.json"), config.to_string()).unwrap();
    runner
}

/// What one job came to: its result and its commands' outputs as the model saw them.
struct Ran {
    result: Value,
    outputs: Vec<String>,
    took: Duration,
    network_log: String,
}

/// Runs job `id` of `rev` at `trust` whose agent runs each of `commands` in turn.
fn run_job(repo: &Repo, rev: &str, id: &str, trust: &str, commands: &[&str]) -> (Runner, Ran) {
    let runner_dir = tempfile::tempdir().unwrap();
    let runner = Runner::new();
    let ran = run_job_with(&runner, runner_dir.path(), repo, rev, id, trust, commands);
    (runner, ran)
}

fn run_job_with(
    runner: &Runner,
    secrets: &Path,
    repo: &Repo,
    rev: &str,
    id: &str,
    trust: &str,
    commands: &[&str],
) -> Ran {
    let steps = commands.iter().map(|c| Step::bash(*c)).collect();
    let server = ModelServer::start(steps).expect("model server");
    let configured = runner_for(&server, secrets);
    // The account's config, on this runner's state.
    std::fs::copy(
        configured.state().join("config.json"),
        runner.state().join("config.json"),
    )
    .unwrap();
    let job = serde_json::json!({
        "id": id,
        "repo": repo.src().to_string_lossy(),
        "rev": rev,
        "ref": "main",
        "trust": trust,
        "agent": "opencode",
        "account": "oc",
        "prompt": "Install the dependencies.",
        "timeout": "4m",
    });
    let job_file = secrets.join(format!("{id}.json"));
    std::fs::write(&job_file, job.to_string()).unwrap();
    let tmpdir = tempfile::Builder::new()
        .prefix("qr")
        .tempdir_in("/tmp")
        .unwrap();
    let mut cmd = runner.command();
    cmd.env(
        "QUEST_RUNNER_OPENCODE",
        pinned("QUEST_RUNNER_OPENCODE", "opencode"),
    )
    .env("QUEST_RUNNER_SRT", pinned("QUEST_RUNNER_SRT", "srt"))
    .env("TMPDIR", tmpdir.path())
    .args(["run", "--job"])
    .arg(&job_file);
    let started = Instant::now();
    let out = tokio::task::block_in_place(|| cmd.output().unwrap());
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let result: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {stdout}\n--- stderr ---\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let outputs = server.tool_results().into_iter().map(|r| r.text).collect();
    let network_log =
        std::fs::read_to_string(runner.state().join(format!("jobs/{id}/network.log")))
            .unwrap_or_default();
    eprintln!(
        "job {id}: {took:?}\n{result:#}\n--- network.log ---\n{network_log}\n--- stderr (tail) ---\n{}",
        tail(&String::from_utf8_lossy(&out.stderr), 3000)
    );
    Ran {
        result,
        outputs,
        took,
        network_log,
    }
}

fn tail(text: &str, n: usize) -> &str {
    let start = text.len().saturating_sub(n);
    let start = (start..text.len())
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(text.len());
    &text[start..]
}

/// The cache's objects on `runner`'s state directory.
fn cached_objects(runner: &Runner) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let root = runner.state().join("deps/objects");
    for algo in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        for fan in std::fs::read_dir(algo.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            for f in std::fs::read_dir(fan.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                out.push(f.path());
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_revision_installs_its_locked_npm_and_pip_dependencies_offline() {
    if !registries_reachable() {
        return;
    }
    let repo = Repo::new();
    let rev = repo.commit(&[
        ("package.json", PACKAGE_JSON),
        ("package-lock.json", NPM_LOCK),
        ("py/requirements.txt", REQUIREMENTS),
    ]);
    let (runner, ran) = run_job(
        &repo,
        &rev,
        "deps-untrusted",
        "untrusted",
        &[
            &format!("npm ci {NPM_QUIET} && node -e 'console.log(\"PAD=\" + require(\"left-pad\")(\"x\", 3, \"-\"))'"),
            "python3 -m pip download --no-cache-dir --require-hashes -r py/requirements.txt -d /tmp/wheels \
             && ls /tmp/wheels && echo PIP-OK",
            // The control: a package no lock names, refused at once.
            &format!("start=$(date +%s); npm install {NPM_QUIET} is-odd@3.0.1; echo \"EXIT=$? SECS=$(( $(date +%s) - start ))\""),
        ],
    );
    let r = &ran.result;
    assert_eq!(r["outcome"], "succeeded", "{r:#}");
    let deps = &r["deps"];
    assert_eq!(deps["artifacts"], 3, "{r:#}");
    assert_eq!(deps["refused"], 0, "{r:#}");
    assert!(ran.outputs[0].contains("PAD=--x"), "{:?}", ran.outputs);
    assert!(
        ran.outputs[1].contains("six-1.16.0-py2.py3-none-any.whl")
            && ran.outputs[1].contains("PIP-OK"),
        "{:?}",
        ran.outputs
    );
    // The unlocked package: refused by the rule, in seconds, not at the job's timeout.
    let refused = &ran.outputs[2];
    assert!(refused.contains("not_locked"), "{refused}");
    let secs: u64 = refused
        .rsplit("SECS=")
        .next()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(u64::MAX);
    assert!(secs < 30, "{refused}");
    assert!(!refused.contains("EXIT=0"), "{refused}");
    assert!(
        ran.network_log.contains("served locked"),
        "{}",
        ran.network_log
    );
    assert!(
        ran.network_log.contains("refused 403 not_locked"),
        "{}",
        ran.network_log
    );
    // Everything reached came from the cache: no line went upstream for the job.
    assert!(!ran.network_log.contains(" allowed"), "{}", ran.network_log);
    assert_eq!(cached_objects(&runner).len(), 3);
    assert!(deps["served"].as_u64().unwrap() >= 3, "{r:#}");
    eprintln!("the untrusted job took {:?}", ran.took);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_trusted_job_is_served_from_the_cache_and_reaches_the_registry_for_the_rest() {
    if !registries_reachable() {
        return;
    }
    let repo = Repo::new();
    let rev = repo.commit(&[
        ("package.json", PACKAGE_JSON),
        ("package-lock.json", NPM_LOCK),
    ]);
    let secrets = tempfile::tempdir().unwrap();
    let runner = Runner::new();
    let install = format!("npm ci {NPM_QUIET} && ls node_modules && echo NPM-OK");
    let first = run_job_with(
        &runner,
        secrets.path(),
        &repo,
        &rev,
        "deps-t1",
        "trusted",
        &[&install],
    );
    assert_eq!(first.result["outcome"], "succeeded", "{:#}", first.result);
    assert_eq!(first.result["deps"]["fetched"], 2, "{:#}", first.result);
    assert!(first.outputs[0].contains("NPM-OK"), "{:?}", first.outputs);
    let second = run_job_with(
        &runner,
        secrets.path(),
        &repo,
        &rev,
        "deps-t2",
        "trusted",
        &[
            &install,
            // What no lock names still comes from the registry, as before, for a trusted job.
            &format!("npm view {NPM_QUIET} is-odd@3.0.1 version && echo VIEW-OK"),
        ],
    );
    let r = &second.result;
    assert_eq!(r["outcome"], "succeeded", "{r:#}");
    assert_eq!(r["deps"]["fetched"], 0, "nothing fetched again: {r:#}");
    assert_eq!(r["deps"]["artifacts"], 2, "{r:#}");
    assert!(second.outputs[0].contains("NPM-OK"), "{:?}", second.outputs);
    assert!(
        second.outputs[1].contains("3.0.1") && second.outputs[1].contains("VIEW-OK"),
        "{:?}",
        second.outputs
    );
    let log = &second.network_log;
    for tarball in [
        "/left-pad/-/left-pad-1.3.0.tgz",
        "/is-number/-/is-number-7.0.0.tgz",
    ] {
        assert!(
            log.lines()
                .any(|l| l.contains(tarball) && l.ends_with("served locked")),
            "{tarball} not served from the cache:\n{log}"
        );
    }
    assert!(
        log.lines()
            .any(|l| l.contains("/is-odd") && l.ends_with(" allowed")),
        "{log}"
    );
    assert_eq!(cached_objects(&runner).len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_served_only_its_own_locks_and_nothing_unverified_is_kept() {
    if !registries_reachable() {
        return;
    }
    let secrets = tempfile::tempdir().unwrap();
    let runner = Runner::new();
    // Job A's lock names left-pad and is-number: both end up in the shared cache.
    let a = Repo::new();
    let a_rev = a.commit(&[
        ("package.json", PACKAGE_JSON),
        ("package-lock.json", NPM_LOCK),
    ]);
    let left_pad = "https://registry.npmjs.org/left-pad/-/left-pad-1.3.0.tgz";
    let fetch = |url: &str| format!("curl -s -m 20 -o /dev/null -w 'HTTP=%{{http_code}}\\n' {url}");
    let ran_a = run_job_with(
        &runner,
        secrets.path(),
        &a,
        &a_rev,
        "deps-a",
        "untrusted",
        &[&fetch(left_pad)],
    );
    assert_eq!(ran_a.result["outcome"], "succeeded", "{:#}", ran_a.result);
    // The control: A's own lock names it, and A is served it.
    assert!(ran_a.outputs[0].contains("HTTP=200"), "{:?}", ran_a.outputs);
    let before = cached_objects(&runner);
    assert_eq!(before.len(), 2);

    // Job B locks is-number only, one entry with a hash that is not the artifact's, a link
    // where a lock should be, and a lock that is not one.
    let wrong = NPM_LOCK.replace(
        "XI5MPzVNApjAyhQzphX8BkmKsKUxD4LdyK24iZeQGinBN9yTQT3bFlCBy/aVx2HrNcqQGsdot8ghrjyrvMCoEA==",
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==",
    );
    let wrong = wrong
        .replace("left-pad/-/left-pad-1.3.0", "left-pad/-/left-pad-1.2.0")
        .replace(
            "\"node_modules/left-pad\": {\n      \"version\": \"1.3.0\"",
            "\"node_modules/left-pad\": {\n      \"version\": \"1.2.0\"",
        );
    let b = Repo::new();
    std::fs::create_dir_all(b.src().join("linked")).unwrap();
    std::os::unix::fs::symlink(
        "../package-lock.json",
        b.src().join("linked/package-lock.json"),
    )
    .unwrap();
    let b_rev = b.commit(&[
        ("package-lock.json", &wrong),
        (
            "broken/package-lock.json",
            "{\"lockfileVersion\": 3, \"packages\": ",
        ),
    ]);
    let ran_b = run_job_with(
        &runner,
        secrets.path(),
        &b,
        &b_rev,
        "deps-b",
        "untrusted",
        &[
            // In the shared cache, but named by A's lock alone.
            &fetch(left_pad),
            // B's own, verified artifact: served.
            &fetch("https://registry.npmjs.org/is-number/-/is-number-7.0.0.tgz"),
            &fetch("https://registry.npmjs.org/left-pad/-/left-pad-1.2.0.tgz"),
        ],
    );
    let r = &ran_b.result;
    assert_eq!(r["outcome"], "succeeded", "{r:#}");
    assert!(
        ran_b.outputs[0].contains("HTTP=403"),
        "A's artifact served to B: {:?}",
        ran_b.outputs
    );
    assert!(ran_b.outputs[1].contains("HTTP=200"), "{:?}", ran_b.outputs);
    assert!(ran_b.outputs[2].contains("HTTP=403"), "{:?}", ran_b.outputs);
    let problems = r["deps"]["problems"].to_string();
    assert!(
        problems.contains("not the sha512-"),
        "the mismatch is named: {r:#}"
    );
    assert!(
        problems.contains("symbolic link"),
        "the link is named: {r:#}"
    );
    assert!(
        problems.contains("broken/package-lock.json is not an npm lockfile"),
        "{r:#}"
    );
    assert_eq!(r["deps"]["artifacts"], 1, "{r:#}");
    // Nothing of the mismatched download was kept, in the cache or beside it.
    assert_eq!(cached_objects(&runner), before);
    let tmp: Vec<_> = std::fs::read_dir(runner.state().join("deps/tmp"))
        .unwrap()
        .collect();
    assert!(tmp.is_empty(), "{tmp:?}");
}
