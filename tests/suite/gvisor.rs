//! The `gvisor` isolation (issue 53, `quest_runner::sandbox::gvisor`): a job's commands run on
//! gVisor's kernel, inside the same sandbox srt makes, with the real opencode, srt and runsc.
//! Each attempt on the kernel's surface runs twice, under `namespace` first (the control: the
//! host's kernel answers) and then under `gvisor`, in the same job as a permitted command.
//!
//! Skipped, saying so, where runsc cannot run (its probe is the runner's own).

use crate::support;

use std::path::{Path, PathBuf};

use quest_runner_selftest::model_server::{ModelServer, Step};
use serde_json::Value;
use support::*;

fn pinned(var: &str, name: &str) -> PathBuf {
    match std::env::var_os(var) {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("npm/node_modules/.bin")
            .join(name),
    }
}

fn runsc_runs() -> bool {
    let probe = tokio::task::block_in_place(|| {
        tokio::runtime::Handle::current().block_on(quest_runner::sandbox::gvisor::probe())
    });
    if let Some(why) = &probe.fails {
        eprintln!("skipped: {why}");
    }
    probe.works()
}

/// What one job came to: its result and its commands' outputs as the model saw them.
struct Ran {
    result: Value,
    outputs: Vec<String>,
    /// `doctor`'s output on the same state and environment, after the job.
    doctor: String,
}

/// Runs a job of `rev` at `trust`, its commands under `isolation`, whose agent runs each of
/// `commands` in turn.
fn run_job(repo: &Repo, rev: &str, trust: &str, isolation: &str, commands: &[&str]) -> Ran {
    run_job_env(repo, rev, trust, isolation, commands, &[])
}

fn run_job_env(
    repo: &Repo,
    rev: &str,
    trust: &str,
    isolation: &str,
    commands: &[&str],
    env: &[(&str, &str)],
) -> Ran {
    let steps = commands.iter().map(|c| Step::bash(*c)).collect();
    let server = ModelServer::start(steps).expect("model server");
    let runner = Runner::new();
    let secrets = tempfile::tempdir().unwrap();
    let auth = secrets.path().join("auth.json");
    std::fs::write(
        &auth,
        serde_json::json!({"scripted": {"type": "api", "key": "sk-test"}}).to_string(),
    )
    .unwrap();
    let config = serde_json::json!({
        "nix": {"options": {"substituters": ""}},
        "allow_untrusted": true,
        "isolation": {"untrusted": isolation, "trusted": isolation},
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
    let job = serde_json::json!({
        "id": "gv", "repo": repo.src().to_string_lossy(), "rev": rev, "ref": "main",
        "trust": trust, "agent": "opencode", "account": "oc",
        "prompt": "Look at the kernel.", "timeout": "4m",
    });
    let job_file = secrets.path().join("job.json");
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
    .envs(env.iter().copied())
    .args(["run", "--job"])
    .arg(&job_file);
    let out = tokio::task::block_in_place(|| cmd.output().unwrap());
    let mut doctor = runner.command();
    doctor.envs(env.iter().copied()).arg("doctor");
    let doctor = tokio::task::block_in_place(|| doctor.output().unwrap());
    let doctor = String::from_utf8_lossy(&doctor.stdout).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let result: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {stdout}\n--- stderr ---\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let outputs: Vec<String> = server.tool_results().into_iter().map(|r| r.text).collect();
    eprintln!("{isolation}/{trust}: {result:#}\n{outputs:#?}");
    Ran {
        result,
        outputs,
        doctor,
    }
}

/// Each attempt, one line of `name=<errno or ok>` from Python's ctypes: the raw system calls,
/// whatever the libc wraps.
const SURFACE: &str = r#"python3 - <<'PY'
import ctypes, errno, os, socket
libc = ctypes.CDLL(None, use_errno=True)
def call(name, nr, *args):
    r = libc.syscall(nr, *args)
    e = ctypes.get_errno()
    print(f"{name}=" + ("ok" if r >= 0 else errno.errorcode.get(e, str(e))))
buf = ctypes.create_string_buffer(256)
call("io_uring_setup", 425, 8, buf)
call("bpf", 321, 0, buf, 48)
call("perf_event_open", 298, buf, 0, -1, -1, 0)
call("userfaultfd", 323, 0)
call("add_key", 248, b"user", b"k", b"v", 1, -3)
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); print("raw=ok")
except OSError as e: print("raw=" + errno.errorcode.get(e.errno, str(e.errno)))
for path in ["/proc/sys/kernel/hostname", "/sys/kernel/mm/transparent_hugepage/enabled"]:
    try:
        open(path, "w").write("x"); print(f"write {path}=ok")
    except OSError as e: print(f"write {path}=" + errno.errorcode.get(e.errno, str(e.errno)))
PY"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_commands_run_on_gvisors_kernel_and_the_host_answers_under_namespace() {
    if !runsc_runs() {
        return;
    }
    let repo = Repo::new();
    let rev = repo.commit(&[("README.md", "kernel\n")]);
    let commands = [
        "cat /proc/version; dmesg 2>&1 | head -1",
        "echo written > made.txt && git add made.txt && git commit -qm made && echo committed",
        SURFACE,
        "unshare -Urm sh -c 'mount -t tmpfs none /mnt && echo mounted' 2>&1",
    ];
    let host = std::fs::read_to_string("/proc/version").unwrap();
    let control = run_job(&repo, &rev, "untrusted", "namespace", &commands);
    assert_eq!(
        control.result["outcome"], "succeeded",
        "{:#}",
        control.result
    );
    assert!(
        control.outputs[0].contains(host.trim()),
        "the host's kernel answers: {:?}",
        control.outputs
    );
    let gv = run_job(&repo, &rev, "untrusted", "gvisor", &commands);
    let r = &gv.result;
    assert_eq!(r["outcome"], "succeeded", "{r:#}");
    assert!(!gv.outputs[0].contains(host.trim()), "{:?}", gv.outputs);
    assert!(
        gv.outputs[0].contains("Starting gVisor"),
        "gVisor's kernel answers: {:?}",
        gv.outputs
    );
    // The permitted command, in the same sandbox: its commit is the job's.
    assert!(gv.outputs[1].contains("committed"), "{:?}", gv.outputs);
    assert_eq!(r["commits"].as_array().map(Vec::len), Some(1), "{r:#}");
    // Every attempt ran (its line is there) under both; what gVisor answers is gVisor's.
    for name in [
        "io_uring_setup=",
        "bpf=",
        "perf_event_open=",
        "userfaultfd=",
        "add_key=",
        "raw=",
    ] {
        assert!(
            control.outputs[2].contains(name),
            "{name} did not run: {:?}",
            control.outputs
        );
        assert!(
            gv.outputs[2].contains(name),
            "{name} did not run: {:?}",
            gv.outputs
        );
    }
    eprintln!(
        "namespace:\n{}\ngvisor:\n{}",
        control.outputs[2], gv.outputs[2]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gvisor_level_where_runsc_cannot_run_refuses_its_jobs_and_doctor_says_why() {
    let repo = Repo::new();
    let rev = repo.commit(&[("README.md", "kernel\n")]);
    let missing = [("QUEST_RUNNER_RUNSC", "/nonexistent/runsc")];
    let ran = run_job_env(&repo, &rev, "untrusted", "gvisor", &["echo RAN"], &missing);
    let r = &ran.result;
    assert_eq!(r["outcome"], "refused", "{r:#}");
    let message = r["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("isolation.untrusted is gvisor") && message.contains("QUEST_RUNNER_RUNSC"),
        "{message}"
    );
    assert!(ran.outputs.is_empty(), "nothing ran: {:?}", ran.outputs);
    let line = ran
        .doctor
        .lines()
        .find(|l| l.contains("commands' kernel"))
        .unwrap_or_default();
    assert!(
        line.starts_with("FAIL") || line.starts_with("fail"),
        "{}",
        ran.doctor
    );
    // The control: the other level, on the host's kernel, runs as before.
    let trusted = run_job_env(
        &repo,
        &rev,
        "untrusted",
        "namespace",
        &["echo RAN"],
        &missing,
    );
    assert_eq!(
        trusted.result["outcome"], "succeeded",
        "{:#}",
        trusted.result
    );
    assert!(trusted.outputs[0].contains("RAN"), "{:?}", trusted.outputs);
}
