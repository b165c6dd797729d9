//! Benchmark of `quest-runner run`, per agent, against baselines measured in the same run:
//!
//! - the runner's own overhead: from starting `quest-runner run` until it starts the agent
//!   (cached devShell, warm bare clone; target: under 150 ms, median), next to the time to the
//!   agent's first model request through the runner and for the agent started directly;
//! - the per-command gap as the model sees it: a scripted conversation of `COMMANDS` calls of
//!   the command `true`, each agent through the runner (its sandbox on), the time from one
//!   model request to the next; beside it Claude Code started by hand with its own sandbox
//!   on (target: the runner's at most 1.1x of it), opencode with no sandbox (its share), opencode
//!   with a new `srt` per command (the design before one sandbox per job, as a baseline of
//!   the same run) and a bare `bwrap` of `true` (the floor any sandbox pays). Targets:
//!   opencode's gap at most Claude Code's with its own sandbox (both agents' commands now run
//!   in the job's one sandbox, so through the runner they differ by the agents' own work);
//!   the sandbox's share of opencode's at most 25 ms over bare bwrap; printed as ratios
//!   against those baselines;
//! - that share measured directly, free of the agents' own noise: opencode's shell
//!   (`quest-shell -c true`, the runner's binary, through a job's sandbox made as `run` makes
//!   it) against `bash -c true`, bare bwrap and `srt -c true` (a new srt per command),
//!   alternating.
//!
//! As root with `QUEST_RUNNER_BENCH_USER=<user>`, the runner's jobs run as that user too (a
//! runner that is its service user: its own state and store, the agent as itself), each
//! beside root's in the same rounds (`support::service_user`).
//!
//! `cargo bench --bench run`. Needs root (the scripted model runs in a network namespace of
//! its own) and the pinned agents (`scripts/setup`; `QUEST_RUNNER_CLAUDE`, `_OPENCODE`,
//! `_SRT` or npm/node_modules/.bin: `support::pinned`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use quest_runner::agent::{self, AgentInputs};
use quest_runner::binaries::Tool;
use quest_runner::config::{Account, OpencodeAccount};
use quest_runner::job::{AgentKind, Job, Trust};
use quest_runner::jobshell::host::Prepared;
use quest_runner::sandbox::{self, Platform, PolicyInputs};
use quest_runner::workspace::WorkspacePaths;
use quest_runner_selftest::model_server::{ModelServer, Served, Step};

mod support;

use support::agents_alone::{in_the_jobs_namespace, with_own_sandbox, Agents};
use support::service_user::ServiceUser;
use support::{median, ms, SampleRepo};

const ROUNDS: usize = 5;
/// Commands per scripted conversation, and conversations per agent (interleaved).
const COMMANDS: usize = 12;
const GAP_ROUNDS: usize = 3;
/// Calls of opencode's shell (and of each baseline) timed directly.
const SHELL_CALLS: usize = 60;
/// Of those, calls of `srt -c true` (~0.4 s each).
const SRT_CALLS: usize = 15;

/// Time from `started` to the first main-loop request the server received after it.
fn first_request_after(server: &ModelServer, started: Instant) -> Option<Duration> {
    server
        .exchanges()
        .iter()
        .find(|e| e.at > started && matches!(e.served, Served::Step(_) | Served::Done))
        .map(|e| e.at - started)
}

/// The gaps between consecutive main-loop requests after `started`: each is one command as
/// the model sees it (its result comes back in the next request). The first is left out: it
/// is the first command of a fresh agent, whose sandbox may still be starting.
fn command_gaps(server: &ModelServer, started: Instant) -> Vec<Duration> {
    let at: Vec<Instant> = server
        .exchanges()
        .iter()
        .filter(|e| e.at > started && matches!(e.served, Served::Step(_) | Served::Done))
        .map(|e| e.at)
        .collect();
    at.windows(2).skip(1).map(|w| w[1] - w[0]).collect()
}

/// Runs `cmd` in the model's namespace; returns the time to its first model request and its
/// stdout.
fn run_confined(server: &ModelServer, mut cmd: Command) -> (Duration, Vec<u8>) {
    server.confine(&mut cmd);
    cmd.stdin(Stdio::null()).stderr(Stdio::null());
    let started = Instant::now();
    let out = cmd.output().expect("spawn");
    let first = first_request_after(server, started);
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    (first.expect("the agent asked the model"), out.stdout)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let work = tempfile::tempdir().expect("temp dir");
    let repo = SampleRepo::new(work.path());
    let rev = repo.commit("bench");
    let src = repo.src();

    let server = ModelServer::start_isolated(Vec::new()).expect("model server (needs root)");
    let state = work.path().join("state");
    std::fs::create_dir_all(&state).expect("state");
    let key = work.path().join("key");
    std::fs::write(&key, "sk-bench").expect("key");
    let auth = work.path().join("auth.json");
    std::fs::write(&auth, r#"{"scripted":{"type":"api","key":"sk-bench"}}"#).expect("auth");
    let provider = serde_json::json!({"provider": {"scripted": {
        "npm": "@ai-sdk/openai-compatible",
        "options": {"baseURL": format!("{}/v1", server.base_url())},
        "models": {"scripted": {"tool_call": true}}}}});
    let config = serde_json::json!({
        "nix": {"options": {"substituters": ""}},
        "accounts": {
            "claude": {"agent": "claude", "api_key_file": key, "base_url": server.base_url()},
            "opencode": {"agent": "opencode", "auth_file": auth, "model": "scripted/scripted", "config": provider},
        },
    });
    std::fs::write(state.join("config.json"), config.to_string()).expect("config");
    let runner = PathBuf::from(env!("CARGO_BIN_EXE_quest-runner"));
    let claude = support::pinned::path(Tool::Claude);
    let opencode = support::pinned::path(Tool::Opencode);
    let srt = support::pinned::path(Tool::Srt);

    // A runner that is its service user, beside root's, with its own state and repository.
    let service = ServiceUser::from_env(work.path()).map(|user| {
        let key = user.own_copy(&key, "key");
        let auth = user.own_copy(&auth, "auth.json");
        let mut config = config.clone();
        config["accounts"]["claude"]["api_key_file"] = serde_json::json!(key);
        config["accounts"]["opencode"]["auth_file"] = serde_json::json!(auth);
        std::fs::write(user.state.join("config.json"), config.to_string()).expect("config");
        user.give(&user.state);
        println!(
            "quest-runner run: also as {} (a runner that is its service user)",
            user.name
        );
        let src = user.own_copy(&work.path().join("repo"), "repo").join("src");
        (user, src)
    });

    let mut job_n = 0;
    let mut runner_job = |agent: &str, as_service: bool| {
        job_n += 1;
        let (user, repo) = match &service {
            Some((user, src)) if as_service => (Some(user), src.clone()),
            _ => (None, src.clone()),
        };
        let job = serde_json::json!({
            "id": format!("bench-{agent}-{job_n}"), "repo": repo, "rev": rev, "ref": "main",
            "trust": "trusted", "agent": agent, "account": agent, "prompt": "say done",
        });
        let file = work.path().join(format!("job-{job_n}.json"));
        std::fs::write(&file, job.to_string()).expect("job");
        let agents = [
            ("QUEST_RUNNER_CLAUDE", claude.as_path()),
            ("QUEST_RUNNER_OPENCODE", opencode.as_path()),
            ("QUEST_RUNNER_SRT", srt.as_path()),
        ];
        let (mut cmd, state_dir) = match user {
            Some(user) => (user.command(&runner, &agents), user.state.clone()),
            None => {
                let mut cmd = Command::new(&runner);
                cmd.env("RUST_LOG", "warn").envs(agents);
                (cmd, state.clone())
            }
        };
        cmd.arg("--state-dir")
            .arg(state_dir)
            .args(["run", "--job"])
            .arg(&file);
        cmd
    };

    println!("quest-runner run, median of {ROUNDS} (cached devShell, warm bare clone)");
    for agent in ["claude", "opencode"] {
        run_confined(&server, runner_job(agent, false)); // warm: bare clone, devShell
        if service.is_some() {
            run_confined(&server, runner_job(agent, true));
        }
        let (mut via_runner, mut alone, mut own) = (Vec::new(), Vec::new(), Vec::new());
        let (mut alone_confined, mut alone_sandboxed) = (Vec::new(), Vec::new());
        let (mut via_service, mut own_service) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let (first, stdout) = run_confined(&server, runner_job(agent, false));
            via_runner.push(first);
            own.push(agent_started(&stdout));
            if service.is_some() {
                let (first, stdout) = run_confined(&server, runner_job(agent, true));
                via_service.push(first);
                own_service.push(agent_started(&stdout));
            }
            // Each run in a home of its own: a home the run alone (as root) wrote is not
            // the agent's identity's to write, and Claude Code waited on its config's lock
            // there (the +1.3 s this line once showed).
            let (home, ns_home) = (
                tempfile::tempdir().expect("home"),
                tempfile::tempdir().expect("home"),
            );
            let agents = Agents {
                claude: &claude,
                opencode: &opencode,
                provider: &provider,
                server: &server,
            };
            let direct = agents.alone(agent, home.path());
            let in_namespace =
                in_the_jobs_namespace(&agents.alone(agent, ns_home.path()), ns_home.path());
            alone.push(run_confined(&server, direct).0);
            alone_confined.push(run_confined(&server, in_namespace).0);
            if agent == "claude" {
                // What Claude Code's own sandbox adds to its start (its proxies, its checks
                // of bwrap and its helper), outside any job.
                let home = tempfile::tempdir().expect("home");
                let sandboxed = agents.alone(agent, home.path());
                alone_sandboxed
                    .push(run_confined(&server, with_own_sandbox(sandboxed, home.path())).0);
            }
        }
        let (r, a, o) = (median(via_runner), median(alone), median(own));
        let c = median(std::mem::take(&mut alone_confined));
        let sandboxed = (agent == "claude").then(|| median(std::mem::take(&mut alone_sandboxed)));
        println!(
            "  {agent:<9} runner's own work {:>6.1} ms (target < 150 ms: {})   first request: via runner {:>7.1} ms, agent alone {:>7.1} ms",
            ms(o),
            if o < Duration::from_millis(150) { "met" } else { "MISSED" },
            ms(r),
            ms(a),
        );
        println!(
            "  {agent:<9} first request, agent alone in the job's namespace {:>7.1} ms: {:.2}x of alone, {:+.1} ms (target + < 25 ms: {})",
            ms(c),
            ratio(c, a),
            ms(c) - ms(a),
            if c < a + Duration::from_millis(25) { "met" } else { "MISSED" },
        );
        println!(
            "  {agent:<9} first request via runner / agent alone {:.2}x (target <= 1.5: {})",
            ratio(r, a),
            if ratio(r, a) <= 1.5 { "met" } else { "MISSED" },
        );
        if let Some((user, _)) = &service {
            let (r_s, o_s) = (median(via_service), median(own_service));
            println!(
                "  {agent:<9} as {}: runner's own work {:>6.1} ms ({:.2}x of root's), first request via runner {:>7.1} ms ({:.2}x of root's; / agent alone {:.2}x)",
                user.name,
                ms(o_s),
                ratio(o_s, o),
                ms(r_s),
                ratio(r_s, r),
                ratio(r_s, a),
            );
        }
        if let Some(sb) = sandboxed {
            println!(
                "  {agent:<9} first request, agent alone with its own sandbox on {:>7.1} ms ({:+.1} ms over alone: the sandbox's start); via runner / that {:.2}x",
                ms(sb),
                ms(sb) - ms(a),
                ratio(r, sb),
            );
        }
    }

    // Per command, as the model sees it: N calls of `true` through each agent.
    let script = || vec![Step::bash("true"); COMMANDS];
    let oc_home = tempfile::tempdir().expect("home");
    let plain_opencode = |shell: &Path| {
        // opencode on its own with the runner's settings (no snapshots, LSP or formatters,
        // which would add their own work to each call) but its shell plain bash: the gap
        // without any sandbox.
        let cfg = oc_home.path().join(".config/opencode");
        std::fs::create_dir_all(&cfg).expect("cfg");
        let mut oc = provider.clone();
        oc["model"] = serde_json::json!("scripted/scripted");
        oc["provider"]["scripted"]["options"]["apiKey"] = serde_json::json!("sk-bench");
        for (k, v) in [
            ("shell", serde_json::json!(shell)),
            ("snapshot", serde_json::json!(false)),
            ("lsp", serde_json::json!(false)),
            ("formatter", serde_json::json!(false)),
            ("share", serde_json::json!("disabled")),
            ("autoupdate", serde_json::json!(false)),
            ("permission", serde_json::json!({"*": "allow"})),
        ] {
            oc[k] = v;
        }
        std::fs::write(cfg.join("opencode.json"), oc.to_string()).expect("oc cfg");
        let mut c = Command::new(&opencode);
        c.args(["run", "run the commands"])
            .current_dir(oc_home.path())
            .env("HOME", oc_home.path())
            .env("TMPDIR", oc_home.path())
            .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
            .env("OPENCODE_DISABLE_AUTOUPDATE", "1");
        c
    };
    // The design before one sandbox per job: opencode's shell starts srt for every command
    // (settings with a network allowlist, so srt's proxies and bridges start, as they did
    // for a trusted job).
    let srt_settings = srt_settings_file(work.path());
    let srt_shell = oc_home.path().join("srt-shell");
    std::fs::write(
        &srt_shell,
        format!(
            "#!/bin/sh\n[ \"$1\" = -c ] || exit 2\nexec {} --settings {} -c \"$2\"\n",
            srt.display(),
            srt_settings.display()
        ),
    )
    .expect("srt shell");
    std::fs::set_permissions(
        &srt_shell,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("srt shell mode");
    let bare_bwrap = || {
        let started = Instant::now();
        let ok = Command::new("bwrap")
            .args(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"])
            .args(["--unshare-all", "--die-with-parent", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("bwrap")
            .success();
        assert!(ok, "bare bwrap failed");
        started.elapsed()
    };
    // Claude Code started by hand with its own sandbox on (no runner, no job namespace): the
    // per-command gap Claude Code pays anyway, the baseline of the runner's (issue 42).
    let claude_home = tempfile::tempdir().expect("home");
    let claude_alone_sandboxed = || {
        let agents = Agents {
            claude: &claude,
            opencode: &opencode,
            provider: &provider,
            server: &server,
        };
        // Its prompt is the one the scripted conversation answers, whatever it says.
        with_own_sandbox(
            agents.alone("claude", claude_home.path()),
            claude_home.path(),
        )
    };
    let mut names = vec![
        "claude",
        "claude alone, its own sandbox",
        "opencode",
        "opencode, no sandbox",
        "opencode, srt per command",
        "bwrap",
    ];
    if service.is_some() {
        names.extend(["claude, service user", "opencode, service user"]);
    }
    let mut all: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    let mut per_round: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    for _ in 0..GAP_ROUNDS {
        for (i, name) in names.iter().enumerate() {
            let gaps = match *name {
                "bwrap" => (0..COMMANDS).map(|_| bare_bwrap()).collect(),
                _ => {
                    server.set_script(script());
                    let cmd = match *name {
                        "opencode, no sandbox" => plain_opencode(Path::new("/bin/bash")),
                        "opencode, srt per command" => plain_opencode(&srt_shell),
                        "claude alone, its own sandbox" => claude_alone_sandboxed(),
                        "claude, service user" => runner_job("claude", true),
                        "opencode, service user" => runner_job("opencode", true),
                        agent => runner_job(agent, false),
                    };
                    let started = Instant::now();
                    run_confined(&server, cmd);
                    let gaps = command_gaps(&server, started);
                    assert!(
                        gaps.len() >= COMMANDS - 2,
                        "{name}: {} of {COMMANDS} commands came back",
                        gaps.len() + 1
                    );
                    gaps
                }
            };
            per_round[i].push(median(gaps.clone()));
            all[i].extend(gaps);
        }
    }
    server.set_script(Vec::new());
    let n = all[2].len();
    let m: Vec<Duration> = all.into_iter().map(median).collect();
    let [claude_gap, claude_own, oc_gap, oc_plain, oc_srt, bwrap] =
        [m[0], m[1], m[2], m[3], m[4], m[5]];
    let service_gaps = service.as_ref().map(|(user, _)| (&user.name, m[6], m[7]));
    println!(
        "per-command gap (median of {n}): claude {:.1} ms, opencode {:.1} ms, bwrap {:.1} ms",
        ms(claude_gap),
        ms(oc_gap),
        ms(bwrap),
    );
    println!(
        "  claude via the runner / claude alone with its own sandbox ({:.1} ms): {:.2}x (target <= 1.1: {})",
        ms(claude_own),
        ratio(claude_gap, claude_own),
        if ratio(claude_gap, claude_own) <= 1.1 { "met" } else { "MISSED" },
    );
    if let Some((user, claude_s, oc_s)) = service_gaps {
        println!(
            "  as {user}: claude {:.1} ms ({:.2}x of root's; / claude alone with its own sandbox {:.2}x), opencode {:.1} ms ({:.2}x of root's)",
            ms(claude_s),
            ratio(claude_s, claude_gap),
            ratio(claude_s, claude_own),
            ms(oc_s),
            ratio(oc_s, oc_gap),
        );
    }
    let share = oc_gap.saturating_sub(oc_plain);
    let met = |ok: bool| if ok { "met" } else { "MISSED" };
    println!(
        "  opencode <= claude alone with its own sandbox: {}; opencode's sandbox share {:.1} ms (opencode without a sandbox {:.1} ms), bare bwrap + 25 ms = {:.1} ms: {}",
        met(oc_gap <= claude_own),
        ms(share),
        ms(oc_plain),
        ms(bwrap) + 25.0,
        met(share <= bwrap + Duration::from_millis(25)),
    );
    println!(
        "  ratios (same run): opencode / claude alone with its own sandbox {:.2}x (target <= 1: {}); opencode / claude via the runner {:.2}x (the agents' own work: the same sandbox); opencode / opencode with srt per command (before) {:.2}x ({:.1} ms); sandbox share / (bare bwrap + 25 ms) {:.2} (target <= 1)",
        ratio(oc_gap, claude_own),
        met(oc_gap <= claude_own),
        ratio(oc_gap, claude_gap),
        ratio(oc_gap, oc_srt),
        ms(oc_srt),
        ratio(share, bwrap + Duration::from_millis(25)),
    );
    let spread = |i: usize| {
        let v: Vec<String> = per_round[i]
            .iter()
            .map(|d| format!("{:.1}", ms(*d)))
            .collect();
        format!("{} [{}]", names[i], v.join(", "))
    };
    println!(
        "  round medians (ms): {}",
        (0..names.len()).map(spread).collect::<Vec<_>>().join("; ")
    );

    // The same share, directly: opencode's shell through a job's sandbox, against `bash`.
    let (shell, bash, bwrap, per_srt) = shell_round_trips(work.path(), &srt, &srt_settings).await;
    let (shell, bash, bwrap, per_srt) =
        (median(shell), median(bash), median(bwrap), median(per_srt));
    let share = shell.saturating_sub(bash);
    println!(
        "  opencode's shell alone (median of {SHELL_CALLS}): quest-shell -c true {:.1} ms, bash -c true {:.1} ms, bare bwrap {:.1} ms: the sandbox adds {:.1} ms per command (target <= bwrap + 25 ms: {})",
        ms(shell),
        ms(bash),
        ms(bwrap),
        ms(share),
        met(share <= bwrap + Duration::from_millis(25)),
    );
    println!(
        "  opencode's shell alone, ratios (same run): quest-shell / srt per command (before, median of {SRT_CALLS}: {:.1} ms) {:.3}x; quest-shell / bare bwrap {:.2}x; sandbox share / (bare bwrap + 25 ms) {:.2} (target <= 1)",
        ms(per_srt),
        ratio(shell, per_srt),
        ratio(shell, bwrap),
        ratio(share, bwrap + Duration::from_millis(25)),
    );
}

/// The runner's own work before the agent started, from its result.
fn agent_started(stdout: &[u8]) -> Duration {
    let result: serde_json::Value = serde_json::from_slice(stdout).expect("result");
    Duration::from_millis(
        result["agent_started_ms"]
            .as_u64()
            .expect("agent_started_ms"),
    )
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

/// srt's settings for the baseline of a new srt per command: a network allowlist (so srt
/// starts its proxies and bridges, as it did for a trusted job), the operator's homes
/// unreadable, writes only in a directory of its own.
fn srt_settings_file(work: &Path) -> PathBuf {
    let dir = work.join("srt-sandbox");
    std::fs::create_dir_all(&dir).expect("srt dir");
    let settings = work.join("srt.json");
    std::fs::write(
        &settings,
        serde_json::json!({
            "network": {"allowedDomains": ["registry.npmjs.org"], "deniedDomains": []},
            "filesystem": {"denyRead": ["/home", "/root"], "allowWrite": [dir], "denyWrite": []},
        })
        .to_string(),
    )
    .expect("srt settings");
    settings
}

/// Times `quest-shell -c true` through a job's sandbox made as `run` makes it (an untrusted
/// job: no proxy to start), `bash -c true`, a bare bwrap and (for the first [`SRT_CALLS`])
/// `srt -c true`, alternating.
async fn shell_round_trips(
    work: &Path,
    srt: &Path,
    srt_settings: &Path,
) -> (Vec<Duration>, Vec<Duration>, Vec<Duration>, Vec<Duration>) {
    let root = work.join("shell");
    let helper = tempfile::Builder::new()
        .prefix("quest-srt-")
        .tempdir_in("/tmp")
        .expect("helper dir");
    let state = root.join("state");
    let job_root = state.join("jobs/b1");
    let paths = WorkspacePaths {
        checkout: job_root.join("checkout"),
        bare_clone: state.join("repos/r.git"),
        git_store: job_root.join("git"),
        worktree_admin: job_root.join("git/worktrees/checkout"),
        temp_dir: root.join("tmp/quest-job-1"),
        job_dir: job_root.join("runner"),
        helper_tmp: std::fs::canonicalize(helper.path()).expect("helper dir"),
        devshell_script: None,
    };
    for dir in [
        &paths.checkout,
        &paths.bare_clone.join("objects"),
        &paths.worktree_admin,
        &paths.temp_dir,
        &paths.job_dir,
    ] {
        std::fs::create_dir_all(dir).expect("dirs");
    }
    let policy = sandbox::plan(
        &paths,
        &PolicyInputs {
            platform: Platform::Linux,
            trust: Trust::Untrusted,
            extra_hosts: vec![],
            full_access_hosts: vec![],
            dependency_hosts: Vec::new(),
            state_dir: state.clone(),
            operator_home: None,
            private: vec![],
        },
    );
    let job = Job {
        id: "b1".into(),
        repo: "/r".into(),
        rev: "0".repeat(40),
        git_ref: None,
        trust: Trust::Untrusted,
        agent: AgentKind::Opencode,
        account: "oc".into(),
        prompt: String::new(),
        timeout: Duration::from_secs(600),
    };
    let account = Account::Opencode(OpencodeAccount {
        auth_file: Some(root.join("auth.json")),
        ..Default::default()
    });
    let node = which::which("node").expect("node");
    let runner = PathBuf::from(env!("CARGO_BIN_EXE_quest-runner"));
    let launch = agent::plan(&AgentInputs {
        job: &job,
        account: &account,
        policy: &policy,
        workspace: &paths,
        system_prompt: "",
        program: Path::new("/bin/true"),
        srt: Some(srt),
        node: Some(&node),
        runner: Some(&runner),
        srt_programs: quest_runner::agent::commands::SrtPrograms::find(),
        host_env: std::env::vars().collect(),
        gateway: None,
    })
    .expect("plan");
    launch.write_files().expect("files");
    let plan = launch.companion.clone().expect("a sandbox host");
    let sandbox = Prepared::new(&plan).expect("prepared").spawn();
    let shell = paths.job_dir.join("quest-shell");
    let time = |cmd: &mut Command| {
        cmd.current_dir(&paths.checkout)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let started = Instant::now();
        assert!(cmd.status().expect("spawn").success(), "{cmd:?}");
        started.elapsed()
    };
    // The first call waits for the sandbox to come up.
    time(Command::new(&shell).args(["-c", "true"]));
    let (mut s, mut b, mut w, mut p) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..SHELL_CALLS {
        if i < SRT_CALLS {
            p.push(time(
                Command::new(srt)
                    .arg("--settings")
                    .arg(srt_settings)
                    .args(["-c", "true"]),
            ));
        }
        s.push(time(Command::new(&shell).args(["-c", "true"])));
        b.push(time(Command::new("bash").args(["-c", "true"])));
        w.push(time(Command::new("bwrap").args([
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--unshare-all",
            "--die-with-parent",
            "true",
        ])));
    }
    sandbox.stop().await;
    (s, b, w, p)
}
