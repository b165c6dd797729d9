//! The real `claude` and `opencode` binaries against the scripted model server: each agent is
//! told by the "model" to run a shell command, and the test checks that the command ran (its
//! file exists) and that its output came back to the model in a later request; a second
//! command shows that the agent's shell sees no network interface but `lo`.
//!
//! Each agent runs headless with a private HOME and cwd (temp dirs), a cleared environment,
//! in its own process group, inside the server's private network namespace (loopback only, so
//! the agents' own vendor traffic fails at once), bounded by [`TIMEOUT`].
//!
//! The binaries are `QUEST_RUNNER_CLAUDE` / `QUEST_RUNNER_OPENCODE`, else the pinned ones in
//! `npm/node_modules/.bin` (`npm install` in `npm/`: `npm ci` refuses the lock file, which
//! lacks opencode's platform packages that the registry here does not serve). Needs root
//! (network namespaces).

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use quest_runner_selftest::model_server::{ModelServer, Served, Step, DONE_TEXT};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TIMEOUT: Duration = Duration::from_secs(120);
const SMOKE_COMMAND: &str = "echo SMOKE-$((6*7)) > smoke.txt && cat smoke.txt";
const SMOKE_OUTPUT: &str = "SMOKE-42";
/// Lists the network interfaces the agent's shell sees (`/proc/net` is per namespace).
const INTERFACES_COMMAND: &str = "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '";

fn agent_binary(var: &str, name: &str) -> PathBuf {
    let path = match std::env::var_os(var) {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("npm/node_modules/.bin")
            .join(name),
    };
    assert!(
        path.exists(),
        "{name} not found at {}: run `npm install` in npm/ or set {var}",
        path.display()
    );
    path
}

fn tempdir(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(prefix).tempdir().unwrap()
}

/// A command with a cleared environment: PATH (inherited, for the agents' shells), a private
/// HOME and a TMPDIR inside it (Claude Code keeps `$TMPDIR/claude-<uid>/…` and
/// `$TMPDIR/cc-socks`, opencode `$TMPDIR/opencode` and an extracted `.so` there), plus what
/// each test adds.
fn agent_command(bin: &Path, home: &Path, cwd: &Path) -> tokio::process::Command {
    let tmp = home.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let mut cmd = tokio::process::Command::new(bin);
    cmd.current_dir(cwd)
        .env_clear()
        .env("HOME", home)
        .env("TMPDIR", tmp)
        .env(
            "PATH",
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
        );
    cmd
}

struct AgentRun {
    /// `None`: killed at the timeout.
    status: Option<ExitStatus>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

impl AgentRun {
    fn stdout_json(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    fn diagnostics(&self, server: &ModelServer) -> String {
        format!(
            "status: {:?} after {:?}\n--- stdout (tail) ---\n{}\n--- stderr (tail) ---\n{}\n--- requests ---\n{}--- tool results ---\n{:#?}",
            self.status,
            self.elapsed,
            tail(&self.stdout, 6000),
            tail(&self.stderr, 6000),
            server.summary(),
            server.tool_results(),
        )
    }
}

fn tail(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// Runs `cmd` in the server's network namespace and its own process group, feeding it
/// `stdin`; kills the whole group at [`TIMEOUT`], and then (or once the agent exits) every
/// process left in the namespace.
async fn run_agent(
    mut cmd: tokio::process::Command,
    server: &ModelServer,
    stdin: Option<&str>,
) -> AgentRun {
    use std::os::unix::process::CommandExt;
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .kill_on_drop(true);
    cmd.as_std_mut().process_group(0);
    server.confine(cmd.as_std_mut());

    let started = Instant::now();
    let mut child = cmd.spawn().expect("agent starts");
    let pgid = child.id().expect("agent pid") as libc::pid_t;
    if let Some(text) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(text.as_bytes()).await.expect("write stdin");
        drop(pipe);
    }
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = tokio::spawn(async move {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v).await;
        v
    });
    let err = tokio::spawn(async move {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v).await;
        v
    });

    let waited = tokio::time::timeout(TIMEOUT, child.wait()).await;
    // SAFETY: signals our own child's process group (on timeout, the agent is still in it).
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    // Whatever left the group (opencode's shell tool runs under setsid) is still in the
    // namespace.
    let stragglers = server.kill_confined();
    let status = match waited {
        Ok(status) => Some(status.expect("wait for agent")),
        Err(_) => {
            let _ = child.wait().await;
            None
        }
    };
    let elapsed = started.elapsed();
    if stragglers > 0 {
        eprintln!("killed {stragglers} process(es) left in the agent's namespace");
    }
    let collect = |h: tokio::task::JoinHandle<Vec<u8>>| async move {
        match tokio::time::timeout(Duration::from_secs(10), h).await {
            Ok(Ok(v)) => String::from_utf8_lossy(&v).into_owned(),
            _ => "<output not collected>".to_string(),
        }
    };
    AgentRun {
        status,
        stdout: collect(out).await,
        stderr: collect(err).await,
        elapsed,
    }
}

/// The loop's evidence on the server's side: the smoke step (step 0) was served, its command's
/// output came back as a tool result in a later request, and all `steps` were served before
/// the final answer.
fn assert_tool_result_came_back(server: &ModelServer, run: &AgentRun, steps: usize) {
    let exchanges = server.exchanges();
    let step_at = exchanges
        .iter()
        .position(|e| e.served == Served::Step(0))
        .unwrap_or_else(|| panic!("the step was never served\n{}", run.diagnostics(server)));
    let result = server
        .tool_results()
        .into_iter()
        .find(|r| r.text.contains(SMOKE_OUTPUT))
        .unwrap_or_else(|| {
            panic!(
                "no tool result with {SMOKE_OUTPUT}\n{}",
                run.diagnostics(server)
            )
        });
    assert!(
        result.request > step_at,
        "the tool result came before the step?\n{}",
        run.diagnostics(server)
    );
    assert_eq!(
        server.steps_served(),
        steps,
        "not every step was served\n{}",
        run.diagnostics(server)
    );
    assert_eq!(
        exchanges.last().map(|e| &e.served),
        Some(&Served::Done),
        "the agent's last request should get the final text\n{}",
        run.diagnostics(server)
    );
}

fn assert_smoke_file(work: &Path, server: &ModelServer, run: &AgentRun) {
    let content = std::fs::read_to_string(work.join("smoke.txt"))
        .unwrap_or_else(|e| panic!("smoke.txt not written ({e})\n{}", run.diagnostics(server)));
    assert_eq!(content.trim(), SMOKE_OUTPUT, "{}", run.diagnostics(server));
}

/// The agent's shell saw the loopback interface only (the second step of a script).
fn assert_loopback_only(server: &ModelServer, run: &AgentRun) {
    let results = server.tool_results();
    assert!(
        results.len() >= 2 && results[1].text.trim() == "lo",
        "the agent's shell saw other interfaces than lo\n{}",
        run.diagnostics(server)
    );
}

/// Claude Code's closing stream-json line: `{"type":"result","subtype":"success",…}`.
fn claude_result(run: &AgentRun) -> Option<Value> {
    run.stdout_json()
        .into_iter()
        .rev()
        .find(|v| v["type"] == "result")
}

/// `claude -p` against the server: API-key login through the environment (no prompt in print
/// mode), no autoupdater, no nonessential traffic (without it Claude Code also sends
/// `HEAD /api/hello`). With `-p`, stream-json output requires `--verbose`.
fn claude_command(server: &ModelServer, home: &Path, work: &Path) -> tokio::process::Command {
    let bin = agent_binary("QUEST_RUNNER_CLAUDE", "claude");
    let mut cmd = agent_command(&bin, home, work);
    cmd.env("ANTHROPIC_BASE_URL", server.base_url())
        .env("ANTHROPIC_API_KEY", "sk-test")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .args(["-p", "Write smoke.txt."])
        .args(["--output-format", "stream-json", "--verbose"]);
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_runs_a_scripted_bash_step_bypassing_permissions() {
    let server = ModelServer::start_isolated(vec![
        Step::bash(SMOKE_COMMAND),
        Step::bash(INTERFACES_COMMAND),
    ])
    .expect("model server");
    let home = tempdir("qr-claude-home-");
    let work = tempdir("qr-claude-work-");
    let mut cmd = claude_command(&server, home.path(), work.path());
    // As root, bypassPermissions is refused ("--dangerously-skip-permissions cannot be used
    // with root/sudo privileges") unless IS_SANDBOX=1 says the machine is a sandbox.
    cmd.env("IS_SANDBOX", "1")
        .args(["--permission-mode", "bypassPermissions"]);
    let run = run_agent(cmd, &server, None).await;

    assert!(
        run.status.is_some_and(|s| s.success()),
        "claude failed\n{}",
        run.diagnostics(&server)
    );
    assert_smoke_file(work.path(), &server, &run);
    assert_tool_result_came_back(&server, &run, 2);
    assert_loopback_only(&server, &run);
    let result = claude_result(&run)
        .unwrap_or_else(|| panic!("no result line\n{}", run.diagnostics(&server)));
    assert_eq!(result["subtype"], "success", "{}", run.diagnostics(&server));
    assert_eq!(result["result"], DONE_TEXT, "{}", run.diagnostics(&server));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_runs_bash_in_dont_ask_mode_with_an_allow_rule() {
    let server =
        ModelServer::start_isolated(vec![Step::bash(SMOKE_COMMAND)]).expect("model server");
    let home = tempdir("qr-claude-home-");
    let work = tempdir("qr-claude-work-");
    let mut cmd = claude_command(&server, home.path(), work.path());
    // No IS_SANDBOX needed: dontAsk is allowed as root.
    cmd.args(["--permission-mode", "dontAsk", "--allowedTools", "Bash"]);
    let run = run_agent(cmd, &server, None).await;

    assert!(
        run.status.is_some_and(|s| s.success()),
        "claude failed\n{}",
        run.diagnostics(&server)
    );
    assert_smoke_file(work.path(), &server, &run);
    assert_tool_result_came_back(&server, &run, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_in_dont_ask_mode_denies_bash_without_an_allow_rule() {
    let server =
        ModelServer::start_isolated(vec![Step::bash(SMOKE_COMMAND)]).expect("model server");
    let home = tempdir("qr-claude-home-");
    let work = tempdir("qr-claude-work-");
    let mut cmd = claude_command(&server, home.path(), work.path());
    cmd.args(["--permission-mode", "dontAsk"]);
    let run = run_agent(cmd, &server, None).await;

    assert!(
        run.status.is_some_and(|s| s.success()),
        "claude failed\n{}",
        run.diagnostics(&server)
    );
    assert!(
        !work.path().join("smoke.txt").exists(),
        "the command ran\n{}",
        run.diagnostics(&server)
    );
    // The denial comes back to the model as the tool result.
    let results = server.tool_results();
    assert!(
        results.len() == 1 && results[0].text.contains("denied"),
        "{}",
        run.diagnostics(&server)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_runs_a_scripted_bash_step() {
    let server = ModelServer::start_isolated(vec![
        Step::bash(SMOKE_COMMAND),
        Step::bash(INTERFACES_COMMAND),
    ])
    .expect("model server");
    let home = tempdir("qr-opencode-home-");
    let work = tempdir("qr-opencode-work-");
    // A provider named "scripted" through the openai-compatible SDK, which opencode bundles
    // (nothing is installed at run time).
    let config = json!({
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            "scripted": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Scripted",
                "options": {"baseURL": format!("{}/v1", server.base_url()), "apiKey": "sk-test"},
                "models": {"scripted": {"name": "Scripted", "tool_call": true}},
            }
        },
        "model": "scripted/scripted",
        "autoupdate": false,
        "share": "disabled",
    });
    let config_dir = home.path().join(".config/opencode");
    std::fs::create_dir_all(&config_dir).unwrap();
    std::fs::write(
        config_dir.join("opencode.json"),
        serde_json::to_vec_pretty(&config).unwrap(),
    )
    .unwrap();

    let bin = agent_binary("QUEST_RUNNER_OPENCODE", "opencode");
    let mut cmd = agent_command(&bin, home.path(), work.path());
    cmd.env("OPENCODE_DISABLE_MODELS_FETCH", "1")
        .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
        .args(["run", "--format", "json", "--print-logs"]);
    // The prompt goes on stdin: `run` wraps a message argument that contains spaces in double
    // quotes before sending it. No --title, so opencode asks the model for one in a side
    // request (no tools), which must not consume the step.
    let prompt = "Write smoke.txt.";
    let run = run_agent(cmd, &server, Some(prompt)).await;

    assert!(
        run.status.is_some_and(|s| s.success()),
        "opencode failed\n{}",
        run.diagnostics(&server)
    );
    assert_smoke_file(work.path(), &server, &run);
    assert_tool_result_came_back(&server, &run, 2);
    assert_loopback_only(&server, &run);
    let first_main = server
        .exchanges()
        .into_iter()
        .find(|e| e.served == Served::Step(0))
        .unwrap();
    assert!(
        first_main.body["messages"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["role"] == "user"
                && m["content"].as_str().is_some_and(|c| c.trim() == prompt))),
        "the prompt did not arrive verbatim\n{}",
        run.diagnostics(&server)
    );
    // opencode's own report of the tool call (`--format json`).
    assert!(
        run.stdout_json().iter().any(|e| e["type"] == "tool_use"
            && e["part"]["tool"] == "bash"
            && e["part"]["state"]["output"]
                .as_str()
                .is_some_and(|o| o.contains(SMOKE_OUTPUT))),
        "no bash tool_use event in opencode's output\n{}",
        run.diagnostics(&server)
    );
}

#[tokio::test]
async fn model_server_stops_when_dropped() {
    let server = ModelServer::start(vec![]).expect("model server");
    let addr = server.addr;
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(b"GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 12];
    conn.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"HTTP/1.1 200");
    drop(server);
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The open connection is closed, and nothing listens any more.
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "connection still open");
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}
