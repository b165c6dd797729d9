//! Benchmark of a job's locked dependencies (issue 52): `npm ci` of a real lock of >= 500
//! packages and `pip download --require-hashes` of >= 50 wheels, inside jobs (the runner
//! fetches the lock's artifacts into its cache, the job's proxy serves them), against the
//! same command on the host, in one run:
//!
//! - host, its package manager's cache warm (one run before): the floor;
//! - host, its cache empty: what a cold install costs anyway;
//! - a trusted job on a fresh state dir (the dependency cache cold), timed inside the job
//!   around the command itself, beside the runner's fetch before it (the result's `deps.ms`);
//! - a second trusted job on the same state (the dependency cache warm; the job's own npm or
//!   pip cache is always cold: its HOME is private);
//! - an untrusted job on that state (offline, served from the cache only).
//!
//! Targets: trusted cold <= 1.2x host cold; trusted warm <= 1.3x the floor; untrusted warm =
//! trusted warm within noise. The locks are made at bench time from the real registries
//! (nothing generated is committed); with no route to them the bench says so and exits 0.
//!
//! `cargo bench --bench deps` (root; the pinned opencode and srt: `scripts/setup`,
//! `QUEST_RUNNER_OPENCODE`, `_SRT` or npm/node_modules/.bin). `QUEST_RUNNER_BENCH_REPS`
//! (default 3) sets the repetitions of which each line is the median;
//! `QUEST_RUNNER_BENCH_DEPS=npm` (or `pip`) measures one ecosystem only.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use quest_runner_selftest::model_server::{ModelServer, Step};
use serde_json::{json, Value};

mod support;

use support::{git, median};

/// What the npm project depends on: together ~680 packages in the lock.
const PACKAGE_JSON: &str = r#"{"name":"bench","version":"1.0.0","dependencies":{
  "jest":"29.7.0","webpack":"5.94.0","eslint":"8.57.0",
  "@babel/preset-env":"7.25.4","webpack-dev-server":"5.1.0"}}"#;
/// What the Python requirements pin, with their dependencies: ~90 wheels, ~80 MB.
const PIP_PACKAGES: &[&str] = &["requests", "boto3", "jupyterlab"];
/// The system's Python, on the host and in the job alike (a job sees no operator's home, so
/// no pyenv): the lock is made for it.
const PYTHON: &str = "/usr/bin/python3";
/// npm's flags for an install that asks the registry for nothing else.
const NPM_QUIET: &str = "--no-audit --no-fund --no-update-notifier --ignore-scripts";
const MIN_NPM_PACKAGES: usize = 500;
const MIN_WHEELS: usize = 50;

fn reps() -> usize {
    std::env::var("QUEST_RUNNER_BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(3)
}

fn pinned(var: &str, name: &str) -> PathBuf {
    std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("npm/node_modules/.bin")
            .join(name)
    })
}

/// Whether `url` answers 200 from here.
fn answers(url: &str) -> bool {
    Command::new("curl")
        .args(["-s", "-m", "10", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(url)
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"200"))
}

/// One ecosystem's case: the project's files, the command that installs them (run in the
/// project's directory, on the host and in the job alike) and the variable naming the host's
/// cache of its package manager.
struct Case {
    label: String,
    files: Vec<(String, String)>,
    command: String,
    cache_var: &'static str,
}

/// Makes a [`Case`] in a directory of its own, or says why not.
type MakeCase = fn(&Path) -> Result<Case, String>;

/// Makes `package-lock.json` of [`PACKAGE_JSON`] with npm against the real registry.
fn npm_case(dir: &Path) -> Result<Case, String> {
    std::fs::create_dir_all(dir).expect("npm dir");
    std::fs::write(dir.join("package.json"), PACKAGE_JSON).expect("package.json");
    let out = Command::new("npm")
        .args(["install", "--package-lock-only"])
        .args(NPM_QUIET.split(' '))
        .current_dir(dir)
        .env("npm_config_cache", dir.join(".lock-cache"))
        // npm's default: each entry's tarball address in the lock, as most locks have it
        // (this host's npmrc omits them, and npm ci would then ask the registry for every
        // package's metadata, on the host and in the job alike).
        .env("npm_config_omit_lockfile_registry_resolved", "false")
        .output()
        .map_err(|e| format!("npm: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "npm install --package-lock-only failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let lock = std::fs::read_to_string(dir.join("package-lock.json")).expect("lock");
    let parsed: Value = serde_json::from_str(&lock).expect("lock is JSON");
    let n = parsed["packages"]
        .as_object()
        .map_or(0, |p| p.keys().filter(|k| !k.is_empty()).count());
    if n < MIN_NPM_PACKAGES {
        return Err(format!(
            "the lock has {n} packages, fewer than {MIN_NPM_PACKAGES}"
        ));
    }
    Ok(Case {
        label: format!("npm ci ({n} packages)"),
        files: vec![
            ("package.json".into(), PACKAGE_JSON.into()),
            ("package-lock.json".into(), lock),
        ],
        command: format!("npm ci {NPM_QUIET}"),
        cache_var: "npm_config_cache",
    })
}

/// Downloads the wheels of [`PIP_PACKAGES`] and writes `requirements.txt` pinning each by
/// its sha256, as `pip-compile --generate-hashes` would (one file per requirement).
fn pip_case(dir: &Path) -> Result<Case, String> {
    use sha2::Digest;
    let wheels = dir.join("wheels");
    let out = Command::new(PYTHON)
        .args([
            "-m",
            "pip",
            "download",
            "-q",
            "--only-binary",
            ":all:",
            "-d",
        ])
        .arg(&wheels)
        .args(PIP_PACKAGES)
        .env_remove("PIP_FIND_LINKS")
        .env("PIP_CACHE_DIR", dir.join("lock-cache"))
        .output()
        .map_err(|e| format!("pip: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "pip download failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(&wheels).expect("wheels") {
        let path = entry.expect("wheel").path();
        let file = path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .to_string();
        // `name-version-tags.whl`: the name's `_` stand for any of `-_.`.
        let mut parts = file.splitn(3, '-');
        let (Some(name), Some(version)) = (parts.next(), parts.next()) else {
            return Err(format!("{file} is not a wheel's name"));
        };
        let hash = sha2::Sha256::digest(std::fs::read(&path).expect("read wheel"));
        lines.push(format!(
            "{}=={version} \\\n    --hash=sha256:{}\n",
            name.replace('_', "-"),
            hex(&hash)
        ));
    }
    lines.sort();
    let n = lines.len();
    if n < MIN_WHEELS {
        return Err(format!("{n} wheels, fewer than {MIN_WHEELS}"));
    }
    std::fs::remove_dir_all(&wheels).expect("remove wheels");
    Ok(Case {
        label: format!("pip download ({n} wheels)"),
        files: vec![("requirements.txt".into(), lines.concat())],
        command: format!(
            "rm -rf dl && {PYTHON} -m pip download -q --require-hashes --no-deps \
             -r requirements.txt -d dl"
        ),
        cache_var: "PIP_CACHE_DIR",
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `case`'s files into `dir` (a project on the host, or a repository's tree).
fn write_files(case: &Case, dir: &Path) {
    std::fs::create_dir_all(dir).expect("project dir");
    for (name, text) in &case.files {
        std::fs::write(dir.join(name), text).expect("project file");
    }
}

/// Runs `case`'s command on the host in `project` with its cache at `cache`; its wall time.
fn host_run(case: &Case, project: &Path, cache: &Path) -> Duration {
    let started = Instant::now();
    let out = Command::new("bash")
        .args(["-c", &case.command])
        .current_dir(project)
        .env(case.cache_var, cache)
        .env_remove("PIP_FIND_LINKS")
        .stdin(Stdio::null())
        .output()
        .expect("bash");
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "host {}: {}",
        case.command,
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

/// The runner's binary and agents, and where the bench keeps its files.
struct Bench {
    work: PathBuf,
    runner: PathBuf,
    opencode: PathBuf,
    srt: PathBuf,
    jobs: usize,
}

/// One job's measures: the command as timed inside the job, the runner's fetch before it
/// (`deps.ms`), what it fetched and served, and the whole `quest-runner run`.
struct JobRun {
    command: Duration,
    deps_ms: u64,
    fetched: u64,
    fetched_bytes: u64,
    served: u64,
    whole: Duration,
}

impl Bench {
    /// A fresh state directory: the dependency cache (and every other) empty.
    fn new_state(&self, name: &str) -> PathBuf {
        let state = self.work.join(name);
        std::fs::create_dir_all(&state).expect("state");
        state
    }

    /// A repository whose one commit is `case`'s project; its working tree and revision.
    fn repo(&self, case: &Case, name: &str) -> (PathBuf, String) {
        let src = self.work.join(name);
        write_files(case, &src);
        git(&src, &["init", "-q", "-b", "main"]);
        git(&src, &["add", "-A"]);
        git(&src, &["commit", "-q", "-m", "bench"]);
        let rev = git(&src, &["rev-parse", "HEAD"]);
        (src, rev)
    }

    /// Runs a job of `rev` at `trust` on `state` whose agent runs `case`'s command once,
    /// timed inside the job around the command alone.
    fn job(&mut self, state: &Path, repo: &Path, rev: &str, trust: &str, case: &Case) -> JobRun {
        self.jobs += 1;
        let id = format!("bench-{}", self.jobs);
        let timed = format!(
            "unset PIP_FIND_LINKS; s=$(date +%s%N); ( {} ) > .bench.log 2>&1; rc=$?; \
             e=$(date +%s%N); echo \"BENCH rc=$rc ns=$((e - s))\"; tail -n 5 .bench.log",
            case.command
        );
        // The tool's own timeout (opencode's default is 2 minutes) well above a cold install.
        let step = Step::Tool {
            name: "bash".into(),
            input: json!({"command": timed, "description": "install", "timeout": 1_200_000}),
        };
        let server = ModelServer::start(vec![step]).expect("model server");
        self.configure(state, &server);
        let job = json!({
            "id": id, "repo": repo, "rev": rev, "ref": "main", "trust": trust,
            "agent": "opencode", "account": "oc", "prompt": "Install the dependencies.",
            "timeout": "30m",
        });
        let file = self.work.join(format!("{id}.json"));
        std::fs::write(&file, job.to_string()).expect("job file");
        let tmp = tempfile::Builder::new()
            .prefix("qr")
            .tempdir_in("/tmp")
            .expect("tmp");
        let mut cmd = Command::new(&self.runner);
        cmd.arg("--state-dir")
            .arg(state)
            .args(["run", "--job"])
            .arg(&file)
            .env("RUST_LOG", "warn")
            .env("QUEST_RUNNER_OPENCODE", &self.opencode)
            .env("QUEST_RUNNER_SRT", &self.srt)
            .env("TMPDIR", tmp.path())
            .stdin(Stdio::null());
        let started = Instant::now();
        let out = tokio::task::block_in_place(|| cmd.output()).expect("quest-runner run");
        let whole = started.elapsed();
        let result: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
        });
        let said = server
            .tool_results()
            .into_iter()
            .map(|r| r.text)
            .collect::<Vec<_>>()
            .join("\n");
        let ns = said
            .split("BENCH rc=0 ns=")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|s| s.parse::<u64>().ok());
        let Some(ns) = ns.filter(|_| result["outcome"] == "succeeded") else {
            panic!("{trust} job {id} failed: {said}\n{result:#}");
        };
        let deps = &result["deps"];
        let n = |k: &str| deps[k].as_u64().unwrap_or(0);
        JobRun {
            command: Duration::from_nanos(ns),
            deps_ms: n("ms"),
            fetched: n("fetched"),
            fetched_bytes: n("fetched_bytes"),
            served: n("served"),
            whole,
        }
    }

    /// `state`'s config: one opencode account pointed at `server`, untrusted jobs allowed.
    fn configure(&self, state: &Path, server: &ModelServer) {
        let auth = self.work.join("auth.json");
        std::fs::write(&auth, r#"{"scripted":{"type":"api","key":"sk-bench"}}"#).expect("auth");
        let config = json!({
            "nix": {"options": {"substituters": ""}},
            "allow_untrusted": true,
            "accounts": {"oc": {
                "agent": "opencode", "auth_file": auth, "model": "scripted/scripted",
                "config": {"provider": {"scripted": {
                    "npm": "@ai-sdk/openai-compatible",
                    "options": {"baseURL": format!("{}/v1", server.base_url())},
                    "models": {"scripted": {"tool_call": true}},
                }}},
            }},
        });
        std::fs::write(state.join("config.json"), config.to_string()).expect("config");
    }
}

/// Each measure's samples, one per repetition.
#[derive(Default)]
struct Samples {
    host_warm: Vec<Duration>,
    host_cold: Vec<Duration>,
    cold: Vec<JobRun>,
    warm: Vec<JobRun>,
    untrusted: Vec<JobRun>,
}

/// Measures `case` [`reps`] times, alternating the host's runs and the jobs'.
fn measure(bench: &mut Bench, case: &Case, key: &str) -> Samples {
    let project = bench.work.join(format!("{key}-host"));
    write_files(case, &project);
    let warm_cache = bench.work.join(format!("{key}-warm-cache"));
    host_run(case, &project, &warm_cache); // warms the floor's cache
    let (repo, rev) = bench.repo(case, &format!("{key}-repo"));
    let mut s = Samples::default();
    for rep in 0..reps() {
        s.host_warm.push(host_run(case, &project, &warm_cache));
        let cold_cache = bench.work.join(format!("{key}-cold-cache-{rep}"));
        s.host_cold.push(host_run(case, &project, &cold_cache));
        let _ = std::fs::remove_dir_all(&cold_cache);
        let state = bench.new_state(&format!("{key}-state-{rep}"));
        s.cold.push(bench.job(&state, &repo, &rev, "trusted", case));
        s.warm.push(bench.job(&state, &repo, &rev, "trusted", case));
        s.untrusted
            .push(bench.job(&state, &repo, &rev, "untrusted", case));
        let _ = std::fs::remove_dir_all(&state);
    }
    s
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

fn met(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}

fn report(case: &Case, s: &Samples) {
    let cmd = |v: &[JobRun]| median(v.iter().map(|r| r.command).collect());
    let fetch = |v: &[JobRun]| median(v.iter().map(|r| Duration::from_millis(r.deps_ms)).collect());
    let whole = |v: &[JobRun]| median(v.iter().map(|r| r.whole).collect());
    let (floor, host_cold) = (median(s.host_warm.clone()), median(s.host_cold.clone()));
    let (cold, warm, untrusted) = (cmd(&s.cold), cmd(&s.warm), cmd(&s.untrusted));
    let cold_fetch = fetch(&s.cold);
    println!(
        "{}: host warm {:.1} s (floor) | host cold {:.1} s | trusted cold {:.1} s = {:.2}x host cold (target <= 1.2x: {}) | trusted warm {:.1} s = {:.2}x floor (target <= 1.3x: {}) | untrusted warm {:.1} s = {:.2}x trusted warm",
        case.label,
        secs(floor),
        secs(host_cold),
        secs(cold),
        ratio(cold, host_cold),
        met(ratio(cold, host_cold) <= 1.2),
        secs(warm),
        ratio(warm, floor),
        met(ratio(warm, floor) <= 1.3),
        secs(untrusted),
        ratio(untrusted, warm),
    );
    let first = &s.cold[0];
    println!(
        "  runner's fetch before the job (deps.ms): cold {:.1} s ({} fetched, {:.0} MB; cold fetch + command {:.1} s = {:.2}x host cold), warm {:.2} s, untrusted {:.2} s; served per job {} / {} / {}; whole job cold {:.1} s, warm {:.1} s, untrusted {:.1} s",
        secs(cold_fetch),
        first.fetched,
        first.fetched_bytes as f64 / 1e6,
        secs(cold_fetch + cold),
        ratio(cold_fetch + cold, host_cold),
        secs(fetch(&s.warm)),
        secs(fetch(&s.untrusted)),
        first.served,
        s.warm[0].served,
        s.untrusted[0].served,
        secs(whole(&s.cold)),
        secs(whole(&s.warm)),
        secs(whole(&s.untrusted)),
    );
    let list = |v: Vec<Duration>| {
        v.iter()
            .map(|d| format!("{:.1}", secs(*d)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let each = |v: &[JobRun]| list(v.iter().map(|r| r.command).collect());
    println!(
        "  each repetition (s): host warm [{}], host cold [{}], trusted cold [{}], trusted warm [{}], untrusted warm [{}]",
        list(s.host_warm.clone()),
        list(s.host_cold.clone()),
        each(&s.cold),
        each(&s.warm),
        each(&s.untrusted),
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if !answers("https://registry.npmjs.org/left-pad") || !answers("https://pypi.org/simple/six/") {
        println!(
            "deps bench: the npm registry or PyPI does not answer from this host; nothing measured"
        );
        return;
    }
    let work = tempfile::tempdir().expect("temp dir");
    let mut bench = Bench {
        work: work.path().to_path_buf(),
        runner: PathBuf::from(env!("CARGO_BIN_EXE_quest-runner")),
        opencode: pinned("QUEST_RUNNER_OPENCODE", "opencode"),
        srt: pinned("QUEST_RUNNER_SRT", "srt"),
        jobs: 0,
    };
    let reps = reps();
    println!("deps bench: median of {reps} (QUEST_RUNNER_BENCH_REPS); the job measures timed inside the job around the command");
    let only = std::env::var("QUEST_RUNNER_BENCH_DEPS").unwrap_or_else(|_| "npm,pip".into());
    let makers: [(&str, MakeCase); 2] = [("npm", npm_case), ("pip", pip_case)];
    for (key, make) in makers {
        if !only.split(',').any(|k| k == key) {
            continue;
        }
        match make(&work.path().join(format!("{key}-lock"))) {
            Ok(case) => {
                let samples = measure(&mut bench, &case, key);
                report(&case, &samples);
            }
            Err(why) => {
                println!("deps bench: no {key} lock made ({why}); nothing measured for {key}")
            }
        }
    }
}
