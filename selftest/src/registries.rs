//! `quest-runner selftest --registries`: a trusted job reads small packages from the real npm
//! registry, PyPI and crates.io with the real clients, through the runner's network decider,
//! on this host as it is configured (its global `npmrc`, `pip.conf`, ... included).
//!
//! Reads only: every request is a `GET` (or `HEAD`) of a published package, and nothing here
//! ever tries a write against a real registry — writes are proven refused against the boundary
//! suite's stand-in registry. Each command is bounded (`timeout`), and so is the job. A host
//! with no route to the registries skips the check with a one-line reason.
//!
//! The agent runs as in the boundary suite, against the scripted model in a network namespace
//! of its own (root), but the job's proxy stays on the host's network: its listening socket is
//! bound in the namespace, where the sandboxed commands reach it, while its own connections go
//! out from the host's.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::model_server::{ModelServer, Step};
use crate::scripts;
use quest_runner::job::{AgentKind, Job, Trust};
use quest_runner::run::{Cancel, JobResult, RunHooks, Runner};
use quest_runner::state::StateDir;

/// The packages read: small, old, and never to change.
pub const NPM_PACKAGE: &str = "left-pad";
pub const NPM_VERSION: &str = "1.3.0";
pub const PYPI_PACKAGE: &str = "six";
pub const PYPI_VERSION: &str = "1.16.0";
pub const CRATE: &str = "itoa";
pub const CRATE_VERSION: &str = "1.0.11";

/// A host name that is on no allowlist and exists nowhere: the proxy refuses it without a
/// lookup, so the refusal probes never leave the machine.
const UNLISTED: &str = "registry.quest-runner.invalid";

/// Each client command's own bound, below Claude Code's 120 s tool timeout: a command that
/// spins in retries shows as a failure with its time, not as a lost tool call.
const COMMAND_TIMEOUT_S: u32 = 100;
/// The whole job's bound.
const JOB_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// The registries the check reads from, by the host whose reachability decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registry {
    Npm,
    Pypi,
    Crates,
}

impl Registry {
    const ALL: [Registry; 3] = [Registry::Npm, Registry::Pypi, Registry::Crates];

    fn host(self) -> &'static str {
        match self {
            Registry::Npm => "registry.npmjs.org",
            Registry::Pypi => "pypi.org",
            Registry::Crates => "index.crates.io",
        }
    }
}

/// One command of the job: a client reading from a registry, or a refusal probe.
#[derive(Debug, Clone)]
struct Read {
    registry: Option<Registry>,
    command: String,
}

/// The shell function every step starts with (scripts/registry-prelude.sh): `qr CLIENT WHAT
/// COMMAND...` runs the command bounded, and prints one `QR` line: `ok WHAT -> <its last line
/// of output> (N ms)`, or `FAILED WHAT: exit N after N ms: <its last lines of errors>`.
/// `qr_refused` expects a failure and says how fast and with what message it came.
fn read(registry: Option<Registry>, script: &str) -> Read {
    let timeout = COMMAND_TIMEOUT_S.to_string();
    let ix = sparse_index_dir(CRATE);
    let values = [
        ("TIMEOUT_S", timeout.as_str()),
        ("NPM_FLAGS", NPM_FLAGS),
        ("NP", NPM_PACKAGE),
        ("NV", NPM_VERSION),
        ("PP", PYPI_PACKAGE),
        ("PV", PYPI_VERSION),
        ("CR", CRATE),
        ("CV", CRATE_VERSION),
        ("IX", ix.as_str()),
        ("UNLISTED", UNLISTED),
    ];
    Read {
        registry,
        command: format!(
            "{}\n{}",
            scripts::fill(scripts::REGISTRY_PRELUDE, &values),
            scripts::fill(script, &values)
        ),
    }
}

/// The job's commands, for the registries this host reaches: the main clients' reads, the
/// other package managers' (when the host has them), then the refusal probes.
fn reads(reachable: &[Registry]) -> Vec<Read> {
    let mut out = main_client_reads();
    out.extend(other_client_reads());
    out.push(read(None, scripts::REGISTRY_REFUSAL_PROBES));
    out.retain(|r| r.registry.is_none_or(|reg| reachable.contains(&reg)));
    out
}

/// npm's flags for reads: nothing but the read itself reaches the registry.
const NPM_FLAGS: &str = "--no-audit --no-fund --no-update-notifier --ignore-scripts";

/// npm (the packument, then the tarball), pip (the simple index page, then the wheel) and
/// crates.io: cargo when it runs in the sandbox (a devShell's usually does), else the same two
/// reads with curl, the sparse index entry and the crate file.
fn main_client_reads() -> Vec<Read> {
    vec![
        read(Some(Registry::Npm), scripts::REGISTRY_NPM_VIEW),
        read(Some(Registry::Npm), scripts::REGISTRY_NPM_INSTALL),
        read(Some(Registry::Pypi), scripts::REGISTRY_PIP_DOWNLOAD),
        read(Some(Registry::Crates), scripts::REGISTRY_CARGO_FETCH),
    ]
}

/// Other package managers, when the host has them. Yarn 2+ answers to `yarn` too; a host
/// with both names the second yarn-berry.
fn other_client_reads() -> Vec<Read> {
    vec![
        read(Some(Registry::Npm), scripts::REGISTRY_YARN),
        read(Some(Registry::Npm), scripts::REGISTRY_YARN_BERRY),
        read(Some(Registry::Npm), scripts::REGISTRY_PNPM),
        read(Some(Registry::Npm), scripts::REGISTRY_BUN),
        read(Some(Registry::Npm), scripts::REGISTRY_DENO),
        read(Some(Registry::Pypi), scripts::REGISTRY_UV),
        read(Some(Registry::Npm), scripts::REGISTRY_JAVA),
    ]
}

/// The directory of a crate's entry in a sparse index (crate names of 4 or more characters:
/// `ab/cd/abcd...`).
fn sparse_index_dir(name: &str) -> String {
    match name.len() {
        1 => "1".into(),
        2 => "2".into(),
        3 => format!("3/{}", &name[..1]),
        _ => format!("{}/{}", &name[..2], &name[2..4]),
    }
}

/// What the check found.
#[derive(Debug, Clone)]
pub struct RegistriesReport {
    pub agent: AgentKind,
    /// Every `QR` line the commands printed, in order.
    pub lines: Vec<String>,
    /// The job's network log.
    pub network_log: Vec<String>,
    pub job: JobResult,
    /// What went wrong, if anything.
    pub problems: Vec<String>,
    pub seconds: f64,
}

impl RegistriesReport {
    pub fn passed(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Why the check cannot run on this host, if it cannot: the registries are reached neither
/// directly nor through the runner's own upstream proxy. `None`: at least one is reachable.
pub fn no_route(env: &[(String, String)]) -> Result<Vec<Registry>, String> {
    let proxy = env
        .iter()
        .find(|(k, v)| (k == "HTTPS_PROXY" || k == "https_proxy") && !v.is_empty())
        .map(|(_, v)| v.clone());
    let mut reachable = Vec::new();
    let mut last_error = String::new();
    for reg in Registry::ALL {
        let target = match &proxy {
            Some(url) => proxy_authority(url),
            None => format!("{}:443", reg.host()),
        };
        match connect_within(&target, Duration::from_secs(5)) {
            Ok(()) => reachable.push(reg),
            Err(e) => last_error = format!("{target}: {e}"),
        }
    }
    if reachable.is_empty() {
        Err(format!("no route to the registries ({last_error})"))
    } else {
        Ok(reachable)
    }
}

/// `host:port` of a proxy URL (`http://user:pass@host:port/`).
fn proxy_authority(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.split('/').next().unwrap_or(rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    if rest
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        rest.to_string()
    } else {
        format!("{rest}:80")
    }
}

/// A TCP connection to `target` (name lookup included) within `limit`.
fn connect_within(target: &str, limit: Duration) -> Result<(), String> {
    let target = target.to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    // The lookup cannot be bounded otherwise; a thread left behind ends with the process.
    std::thread::spawn(move || {
        use std::net::ToSocketAddrs;
        let outcome = target
            .to_socket_addrs()
            .map_err(|e| format!("lookup failed: {e}"))
            .and_then(|addrs| {
                let mut last = "no address".to_string();
                for addr in addrs {
                    match std::net::TcpStream::connect_timeout(&addr, limit) {
                        Ok(_) => return Ok(()),
                        Err(e) => last = e.to_string(),
                    }
                }
                Err(last)
            });
        let _ = tx.send(outcome);
    });
    rx.recv_timeout(limit + Duration::from_secs(1))
        .unwrap_or_else(|_| Err(format!("no answer within {}s", limit.as_secs())))
}

/// Runs the check once with `agent`. `reachable`: from [`no_route`].
pub async fn run(agent: AgentKind, reachable: &[Registry]) -> Result<RegistriesReport, String> {
    let started = Instant::now();
    let work = tempfile::Builder::new()
        .prefix("qr-registries-")
        .tempdir()
        .map_err(|e| format!("creating the check's directory: {e}"))?;
    let root = std::fs::canonicalize(work.path()).map_err(|e| e.to_string())?;
    let state = StateDir::at(root.join("state"));
    std::fs::create_dir_all(state.root()).map_err(|e| e.to_string())?;
    let repo = sample_repo(&root)?;
    let rev = crate::fixture_git(&repo, &["rev-parse", "HEAD"])?;

    let reads = reads(reachable);
    let script: Vec<Step> = reads.iter().map(|r| Step::bash(&r.command)).collect();
    let server = if rustix::process::geteuid().is_root() {
        ModelServer::start_isolated(script)
    } else {
        ModelServer::start(script)
    }
    .map_err(|e| format!("starting the scripted model: {e}"))?;

    let runner = scripted_runner(agent, &root, &state, &server)?;
    let job = registries_job(agent, &repo, rev);
    let result = runner.run(&job, std::future::pending::<Cancel>()).await;
    let network_log = crate::boundary::suite::network_log(&result);
    let outputs: Vec<String> = server.tool_results().into_iter().map(|r| r.text).collect();
    let lines: Vec<String> = outputs
        .iter()
        .flat_map(|o| o.lines())
        .filter_map(|l| l.trim().strip_prefix("QR ").map(str::to_string))
        .collect();
    let problems = judge(&lines, &network_log, &result, reads.len(), outputs.len());
    server.kill_confined();
    Ok(RegistriesReport {
        agent,
        lines,
        network_log,
        job: result,
        problems,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// A runner whose config is the scripted model's, with the account's file under `root`, its
/// agent confined beside the model and its proxy listening where the sandbox reaches it.
fn scripted_runner(
    agent: AgentKind,
    root: &Path,
    state: &StateDir,
    server: &ModelServer,
) -> Result<Runner, String> {
    let io = |e: std::io::Error| e.to_string();
    let account_file = root.join(match agent {
        AgentKind::Claude => "anthropic-key",
        AgentKind::Opencode => "auth.json",
    });
    crate::boundary::suite::write_scripted_account(agent, &account_file, "sk-selftest")
        .map_err(io)?;
    let config = crate::boundary::suite::scripted_config(agent, &account_file, server, false);
    std::fs::write(
        state.config_file(),
        serde_json::to_string_pretty(&config).unwrap_or_default(),
    )
    .map_err(io)?;
    let confine = server.confiner();
    let hooks = RunHooks {
        agent_command: Some(Arc::new(move |cmd: &mut std::process::Command| {
            confine(cmd)
        })),
        policy: None,
        // Where the agent's sandbox reaches it; the proxy itself is not confined.
        proxy_listener: Some(Arc::new(server.binder())),
        proxy_command: None,
        // Where the confined agent reaches it; it forwards to the model's host-side listener.
        gateway_listener: Some(Arc::new(server.binder())),
        agent_mounts: None,
        dep_upstreams: None,
    };
    Ok(Runner::new(state.clone(), config).with_hooks(hooks))
}

/// The check's trusted job on the sample repository.
fn registries_job(agent: AgentKind, repo: &Path, rev: String) -> Job {
    Job {
        id: format!(
            "registries-{}-{}",
            agent.name(),
            crate::boundary::fixture::token()
        ),
        repo: repo.display().to_string(),
        rev,
        git_ref: Some("main".into()),
        trust: Trust::Trusted,
        agent,
        account: "main".into(),
        prompt: "Read the packages with each client, one command at a time.".into(),
        timeout: JOB_TIMEOUT,
    }
}

/// What is wrong with a run: a client that failed, a refusal that did not come, a request
/// that is not a read, a read that is not in the network log.
fn judge(
    lines: &[String],
    log: &[String],
    result: &JobResult,
    steps: usize,
    answered: usize,
) -> Vec<String> {
    let mut problems = Vec::new();
    if result.outcome != quest_runner::run::Outcome::Succeeded {
        problems.push(format!(
            "the job did not succeed: {:?} {}",
            result.outcome,
            result.message.clone().unwrap_or_default()
        ));
    }
    if answered < steps {
        problems.push(format!(
            "{answered} of {steps} commands came back from the agent"
        ));
    }
    for l in lines {
        if l.contains(" FAILED ") || l.contains(" NOT-REFUSED ") {
            problems.push(l.clone());
        }
    }
    for (client, what) in [("npm", "install"), ("pip", "download")] {
        if !lines
            .iter()
            .any(|l| l.starts_with(&format!("{client} ok {what}")))
        {
            problems.push(format!("{client} did not {what} its package"));
        }
    }
    let crates_read = lines
        .iter()
        .any(|l| l.starts_with("cargo ok fetch") || l.starts_with("curl ok crate file"));
    if !crates_read {
        problems.push("nothing read the crate from crates.io".into());
    }
    // Every request the decider allowed is a read, and the registries' reads are there.
    for l in log.iter().filter(|l| l.ends_with(" allowed")) {
        let method = l.split(' ').nth(1).unwrap_or("");
        if method != "GET" && method != "HEAD" {
            problems.push(format!("a request that is not a read was allowed: {l}"));
        }
    }
    for want in [
        format!("GET registry.npmjs.org:443 /{NPM_PACKAGE}"),
        format!("registry.npmjs.org:443 /{NPM_PACKAGE}/-/{NPM_PACKAGE}-{NPM_VERSION}.tgz allowed"),
        "GET files.pythonhosted.org:443 /".to_string(),
        "GET static.crates.io:443 /".to_string(),
    ] {
        if !log.iter().any(|l| l.contains(&want)) {
            problems.push(format!("the network log has no line with `{want}`"));
        }
    }
    if !log
        .iter()
        .any(|l| l.contains(UNLISTED) && l.contains("refused 403 host_not_allowed"))
    {
        problems.push(format!("the network log does not show {UNLISTED} refused"));
    }
    problems
}

/// A repository with one commit and no devShell: the job needs nothing from Nix.
fn sample_repo(root: &Path) -> Result<PathBuf, String> {
    let src = root.join("sample");
    std::fs::create_dir_all(&src).map_err(|e| e.to_string())?;
    std::fs::write(
        src.join("README.md"),
        "quest-runner selftest --registries\n",
    )
    .map_err(|e| e.to_string())?;
    let git = crate::fixture_git;
    git(&src, &["init", "-q", "-b", "main"])?;
    git(&src, &["add", "README.md"])?;
    git(&src, &["commit", "-q", "-m", "registries selftest"])?;
    Ok(src)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_index_paths() {
        assert_eq!(sparse_index_dir("a"), "1");
        assert_eq!(sparse_index_dir("ab"), "2");
        assert_eq!(sparse_index_dir("abc"), "3/a");
        assert_eq!(sparse_index_dir("itoa"), "it/oa");
        assert_eq!(sparse_index_dir("serde"), "se/rd");
    }

    #[test]
    fn proxy_authorities() {
        assert_eq!(proxy_authority("http://proxy:3128"), "proxy:3128");
        assert_eq!(proxy_authority("http://u:p@proxy:3128/"), "proxy:3128");
        assert_eq!(proxy_authority("proxy"), "proxy:80");
    }

    #[test]
    fn only_reachable_registries_are_read() {
        let all = reads(&Registry::ALL);
        let npm_only = reads(&[Registry::Npm]);
        assert!(npm_only.len() < all.len());
        assert!(npm_only
            .iter()
            .all(|r| r.registry.is_none_or(|reg| reg == Registry::Npm)));
        // The refusal probes run whatever is reachable: they never leave the machine.
        assert!(npm_only.iter().any(|r| r.registry.is_none()));
    }
}
