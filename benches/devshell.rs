//! Benchmark of the devShell cache, per process, against its baselines in the same run.
//!
//! - floor: a process that only reads the cached script (`cat`);
//! - hit: `quest-runner env` on a cache hit (target: within 1.5x of the floor);
//! - warm nix: `nix print-dev-env` with Nix's own eval cache filled (target: the hit at least
//!   5x faster);
//! - misses: 8 concurrent `quest-runner env` processes on one new revision against one miss
//!   (target: within 1.5x).
//!
//! Run with `scripts/release-cargo bench --bench devshell`, which builds the binary the README
//! ships (a static PIE on Linux with glibc; plain `cargo bench` measures a dynamically linked
//! one, whose loader alone costs ~0.3 ms here). Figures are medians; only ratios are compared,
//! so the machine's speed cancels out. The hit is compared with the floor pair by pair (each
//! round runs both back to back, in alternating order, and the ratio is the median of the
//! rounds' ratios): on a 2-core VM the cost of a process start drifts by 2x over a minute,
//! which two separate medians would attribute to whichever side ran at the worse time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod support;

use support::{median, ms, SampleRepo};

const ROUNDS: usize = 40;
const PAIR_ROUNDS: usize = 200;
const MISS_ROUNDS: usize = 5;

fn main() {
    // The job's proxy (below) finds srt in this process's environment.
    support::pinned::export(&[quest_runner::binaries::Tool::Srt]);
    let work = tempfile::tempdir().expect("temp dir");
    let repo = SampleRepo::new(work.path());
    let state = work.path().join("state");
    std::fs::create_dir_all(&state).expect("state dir");
    std::fs::write(
        state.join("config.json"),
        r#"{"nix":{"options":{"substituters":""}}}"#,
    )
    .expect("config");
    let runner = PathBuf::from(env!("CARGO_BIN_EXE_quest-runner"));
    let nix = which::which("nix").expect("nix on PATH");

    let rev = repo.commit("warm");
    let env_cmd = |rev: &str| {
        let mut c = Command::new(&runner);
        c.arg("--state-dir")
            .arg(&state)
            .args(["env", "--repo"])
            .arg(repo.bare())
            .args(["--rev", rev])
            .env("RUST_LOG", "warn");
        c
    };
    let json = output(env_cmd(&rev).args(["--format", "json"]));
    let answer: serde_json::Value = serde_json::from_slice(&json).expect("json");
    let script = answer["script"].as_str().expect("script").to_string();
    let url = answer["url"].as_str().expect("url").to_string();
    let nix_cmd = || {
        let mut c = Command::new(&nix);
        c.args([
            "--extra-experimental-features",
            "nix-command flakes",
            "--option",
            "substituters",
            "",
            "print-dev-env",
        ])
        .arg(format!("{url}#{}", answer["attr"].as_str().expect("attr")));
        c
    };
    output(&mut nix_cmd()); // fills Nix's eval cache

    let (mut floor, mut hit, mut pair_ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..PAIR_ROUNDS {
        let cat = || time(Command::new("cat").arg(&script));
        let (f, h) = if round % 2 == 0 {
            let f = cat();
            (f, time(&mut env_cmd(&rev)))
        } else {
            let h = time(&mut env_cmd(&rev));
            (cat(), h)
        };
        pair_ratios.push(ratio(h, f));
        floor.push(f);
        hit.push(h);
    }
    // Interleaved with hits, so drift in machine load hits both alike.
    let mut warm = Vec::new();
    for _ in 0..ROUNDS {
        warm.push(time(&mut nix_cmd()));
        hit.push(time(&mut env_cmd(&rev)));
    }
    let (floor, hit, warm) = (median(floor), median(hit), median(warm));
    pair_ratios.sort_by(f64::total_cmp);
    let hit_over_floor = pair_ratios[pair_ratios.len() / 2];

    let (mut one, mut eight) = (Vec::new(), Vec::new());
    for round in 0..MISS_ROUNDS {
        let rev = repo.commit(&format!("single-{round}"));
        one.push(time(&mut env_cmd(&rev)));
        let rev = repo.commit(&format!("eight-{round}"));
        let started = Instant::now();
        let children: Vec<_> = (0..8)
            .map(|_| {
                env_cmd(&rev)
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("spawn runner")
            })
            .collect();
        for mut child in children {
            assert!(
                child.wait().expect("wait").success(),
                "a concurrent miss failed"
            );
        }
        eight.push(started.elapsed());
    }
    let (one, eight) = (median(one), median(eight));
    let (open, confined, proxied) = confined_misses(&repo, &state);
    let tenancy = second_repository(work.path());

    println!(
        "devShell cache, per process (medians: {PAIR_ROUNDS} floor/hit pairs, {ROUNDS} warm nix, \
         {MISS_ROUNDS} miss rounds)"
    );
    println!("  floor (cat cached script)      {:>9.2} ms", ms(floor));
    println!("  quest-runner env, cache hit    {:>9.2} ms", ms(hit));
    println!("  nix print-dev-env, warm        {:>9.2} ms", ms(warm));
    println!("  quest-runner env, one miss     {:>9.2} ms", ms(one));
    println!("  8 concurrent misses, one rev   {:>9.2} ms", ms(eight));
    println!("  miss in-process, nix as runner {:>9.2} ms", ms(open));
    println!("  miss in-process, nix confined  {:>9.2} ms", ms(confined));
    println!("  miss confined, via job proxy   {:>9.2} ms", ms(proxied));
    println!(
        "  second repository's first devShell, a {} MiB dependency the first one built:",
        DEP_MIB
    );
    println!(
        "    one store for all (as `env`)   {:>9.2} ms, +{:>6.1} MiB in the host's store",
        ms(tenancy.shared),
        tenancy.shared_mib
    );
    println!(
        "    its own store (a job's)        {:>9.2} ms, {:>7.1} MiB in its store",
        ms(tenancy.own),
        tenancy.own_mib
    );
    println!("ratios");
    report(
        "hit / floor (pairs)",
        hit_over_floor,
        "<= 1.5",
        hit_over_floor <= 1.5,
    );
    report(
        "warm nix / hit",
        ratio(warm, hit),
        ">= 5",
        ratio(warm, hit) >= 5.0,
    );
    report(
        "8 misses / 1 miss",
        ratio(eight, one),
        "<= 1.5",
        ratio(eight, one) <= 1.5,
    );
}

/// One miss each way per round, in one process through the library (`quest-runner env` runs
/// nix as the runner; a job's miss runs it inside the job's boundary, with no network or on
/// the job's proxy, bridged in, as `run` does by default): medians.
fn confined_misses(repo: &SampleRepo, state: &std::path::Path) -> (Duration, Duration, Duration) {
    use quest_runner::devshell::{DevShells, Request};
    let shells = std::sync::Arc::new(DevShells::new(
        &quest_runner::state::StateDir::at(state),
        &offline_config(),
    ));
    let job = state.join("jobs/bench");
    let mut policy = bench_policy(state, &repo.bare());
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (proxy, net) = job_proxy(&rt, &mut policy, &job);
    let policy = std::sync::Arc::new(policy);
    let (mut open, mut confined, mut proxied) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..MISS_ROUNDS * 3 {
        let rev = repo.commit(&format!("inproc-{round}"));
        let req = Request {
            repo: repo.bare(),
            rev,
            git_ref: Some("main".into()),
            attr: None,
        };
        let started = Instant::now();
        let answer = match round % 3 {
            0 => rt.block_on(shells.get(&req)),
            1 => rt.block_on(shells.get_confined(&req, policy.clone(), None)),
            _ => rt.block_on(shells.get_confined(&req, policy.clone(), Some(net.clone()))),
        };
        answer.expect("a miss");
        let took = started.elapsed();
        match round % 3 {
            0 => open.push(took),
            1 => confined.push(took),
            _ => proxied.push(took),
        }
    }
    rt.block_on(proxy.stop());
    (median(open), median(confined), median(proxied))
}

/// The size of the dependency two repositories share in [`second_repository`].
const DEP_MIB: usize = 16;

/// What a store per repository costs a second repository whose devShell needs what the first
/// one's needed (the same nixpkgs, say; here a dependency of [`DEP_MIB`] MiB built from the same
/// derivation): with one store for all, the second finds it built; with its own store, it
/// builds (or, with a binary cache, substitutes) it again.
struct Tenancy {
    shared: Duration,
    shared_mib: f64,
    own: Duration,
    own_mib: f64,
}

fn second_repository(work: &std::path::Path) -> Tenancy {
    use quest_runner::devshell::{DevShells, Request};
    let nonce = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
    );
    // 64 KiB a chunk: the sandbox has bash's builtins only (no mkdir, no dd).
    let chunks = DEP_MIB * 16;
    let dep = |tag: &str| {
        format!(
            r#"DEP = derivation {{ name = "bench-dep-{nonce}-{tag}"; system = "{}-linux";
  builder = "${{./builder}}/bin/bash"; args = [ "-c" "x=x; for i in {{1..16}}; do x=$x$x; done; for i in {{1..{chunks}}}; do printf %s $x; done > $out" ]; }};"#,
            std::env::consts::ARCH,
        )
    };
    let config = offline_config();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let run = |tag: &str, confined: bool| -> (Duration, f64) {
        let base = work.join(format!("tenancy-{tag}"));
        let state = base.join("state");
        std::fs::create_dir_all(&state).expect("state dir");
        let shells = std::sync::Arc::new(DevShells::new(
            &quest_runner::state::StateDir::at(&state),
            &config,
        ));
        let first = base.join("first/repo/bare.git");
        let policy = std::sync::Arc::new(bench_policy(&state, &first));
        let mut took = Duration::ZERO;
        let host_before = du_mib(&quest_runner::store_path::store_dir());
        for which in ["first", "second"] {
            let repo = SampleRepo::new(&base.join(which));
            let rev = repo.commit_with(which, &dep(tag));
            let req = Request {
                repo: repo.bare(),
                rev,
                git_ref: Some("main".into()),
                attr: None,
            };
            let started = Instant::now();
            let answer = match confined {
                false => rt.block_on(shells.get(&req)),
                true => rt.block_on(shells.get_confined(&req, policy.clone(), None)),
            };
            answer.expect("a devShell");
            took = started.elapsed();
        }
        let mib = match confined {
            false => du_mib(&quest_runner::store_path::store_dir()) - host_before,
            true => {
                let stores: Vec<_> = std::fs::read_dir(state.join("devshell/stores"))
                    .expect("repository stores")
                    .flatten()
                    .map(|e| du_mib(&e.path()))
                    .collect();
                stores.iter().sum::<f64>() / stores.len().max(1) as f64
            }
        };
        (took, mib)
    };
    let (shared, shared_mib) = run("shared", false);
    let (own, own_mib) = run("own", true);
    Tenancy {
        shared,
        shared_mib,
        own,
        own_mib,
    }
}

/// The runner's config with no binary cache (none is reachable here).
fn offline_config() -> quest_runner::config::Config {
    let mut config = quest_runner::config::Config::default();
    config
        .nix
        .options
        .insert("substituters".to_string(), String::new());
    config
}

/// A trusted job's policy, its job directory in `state`, for the repository cloned at
/// `bare_clone`.
fn bench_policy(
    state: &std::path::Path,
    bare_clone: &std::path::Path,
) -> quest_runner::sandbox::SandboxPolicy {
    use quest_runner::sandbox::{plan, Platform, PolicyInputs};
    let job = state.join("jobs/bench");
    let ws = quest_runner::workspace::WorkspacePaths {
        checkout: job.join("checkout"),
        bare_clone: bare_clone.to_path_buf(),
        git_store: job.join("git"),
        worktree_admin: job.join("git/worktrees/checkout"),
        temp_dir: PathBuf::from("/tmp/quest-job-bench"),
        job_dir: job.clone(),
        devshell_script: None,
        helper_tmp: PathBuf::from("/tmp/quest-srt-bench"),
    };
    let inputs = PolicyInputs {
        platform: Platform::Linux,
        trust: quest_runner::job::Trust::Trusted,
        extra_hosts: Vec::new(),
        full_access_hosts: Vec::new(),
        dependency_hosts: Vec::new(),
        state_dir: state.to_path_buf(),
        operator_home: std::env::var_os("HOME").map(PathBuf::from),
        private: Vec::new(),
    };
    plan(&ws, &inputs)
}

/// Disk use under `dir` in MiB, as `du` counts it.
fn du_mib(dir: &std::path::Path) -> f64 {
    let out = Command::new("du").arg("-sk").arg(dir).output().expect("du");
    let text = String::from_utf8_lossy(&out.stdout);
    let kib: f64 = text
        .split_whitespace()
        .next()
        .and_then(|k| k.parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

/// The job's proxy for `policy`, as `run` starts it before the devShell, and how nix reaches it.
fn job_proxy(
    rt: &tokio::runtime::Runtime,
    policy: &mut quest_runner::sandbox::SandboxPolicy,
    job: &std::path::Path,
) -> (
    quest_runner::netproxy::job::JobNetwork,
    quest_runner::devshell::network::NixNet,
) {
    let temp = job.join("proxy-tmp");
    std::fs::create_dir_all(&temp).expect("the proxy's temp dir");
    let env: Vec<(String, String)> = std::env::vars().collect();
    let net = quest_runner::netproxy::job::JobNet {
        job_id: "bench",
        timeout: Duration::from_secs(3600),
        result_dir: job,
        job_dir: job,
        temp_dir: &temp,
        bind: None,
        adjust: None,
        env_source: &env,
        deps: None,
    };
    let proxy = rt
        .block_on(quest_runner::netproxy::job::start(policy, net))
        .expect("the job's proxy")
        .expect("a trusted policy reaches the registries");
    let net = quest_runner::devshell::network::NixNet {
        proxy_port: proxy.port,
        ca_bundle: policy.ca.as_ref().map(|ca| ca.bundle.clone()),
        socket_dir: job.join("nix-net"),
        runner: env!("CARGO_BIN_EXE_quest-runner").into(),
        adjust: None,
    };
    (proxy, net)
}

fn report(name: &str, value: f64, target: &str, met: bool) {
    let verdict = if met { "met" } else { "MISSED" };
    println!("  {name:<20} {value:>7.2}x   target {target:<7} {verdict}");
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

fn time(cmd: &mut Command) -> Duration {
    let started = Instant::now();
    let status = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("spawn");
    let took = started.elapsed();
    assert!(status.success(), "{cmd:?} failed");
    took
}

fn output(cmd: &mut Command) -> Vec<u8> {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}
