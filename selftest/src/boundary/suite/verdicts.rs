//! The verdict of each attempt: what its tool call returned, what the servers received, and
//! whether that shows an escape.

use crate::boundary::attempts::Detect;
use crate::boundary::fixture::Fixture;
use crate::model_server::ModelServer;
use quest_runner::job::AgentKind;
use quest_runner::run::JobResult;
use std::collections::BTreeSet;
use std::path::PathBuf;

pub(super) fn offered_tools(server: &ModelServer) -> BTreeSet<String> {
    server
        .requests()
        .iter()
        .filter_map(|b| b.get("tools").and_then(|t| t.as_array()).cloned())
        .flatten()
        .filter_map(|t| {
            t.get("name")
                .or_else(|| t.get("function").and_then(|f| f.get("name")))
                .and_then(|n| n.as_str())
                .map(str::to_string)
        })
        .collect()
}

/// Tool results by the script step they answer (`toolu_scripted_N`, `call_scripted_N`).
pub(super) fn tool_outputs(server: &ModelServer) -> std::collections::BTreeMap<usize, String> {
    server
        .tool_results()
        .into_iter()
        .filter_map(|r| {
            let n = r.id.rsplit('_').next()?.parse::<usize>().ok()?;
            Some((n, r.text))
        })
        .collect()
}

/// What the servers received while an attempt ran.
#[derive(Default, Clone, Copy)]
pub(super) struct Seen<'a> {
    pub(super) exchanges: &'a [crate::model_server::Exchange],
    /// `METHOD path` of the stand-in registry's requests.
    pub(super) registry: &'a [String],
}

pub(super) fn detect(d: &Detect, output: &str, seen: Seen<'_>, fixture: &Fixture) -> bool {
    let exchanges = seen.exchanges;
    match d {
        Detect::RegistryGot(prefix) => seen.registry.iter().any(|r| r.starts_with(prefix.as_str())),
        Detect::OutputHas(text) => output.contains(text.as_str()),
        Detect::LaterJobSees { file, text } => {
            match crate::boundary::attempts::git_attacks::later_job_view(fixture, file) {
                Ok(content) => content.contains(text.as_str()),
                Err(e) => {
                    tracing::warn!("{e}");
                    true
                }
            }
        }
        Detect::Any(all) => all.iter().any(|d| detect(d, output, seen, fixture)),
        Detect::HostPath(p) => p.exists() || p.symlink_metadata().is_ok(),
        Detect::HostFileHas(p, text) => {
            std::fs::read_to_string(p).is_ok_and(|c| c.contains(text.as_str()))
        }
        Detect::ServerGot(path) => exchanges.iter().any(|e| e.path == *path),
        Detect::EnvLeak => {
            fixture
                .planted_env()
                .iter()
                .any(|(_, v)| output.contains(v.as_str()))
                || output.lines().any(|l| {
                    [
                        "OPENCODE_",
                        "XDG_DATA_HOME=",
                        "SSH_AUTH_SOCK=",
                        "ANTHROPIC_API_KEY=",
                        "AWS_",
                        "GH_TOKEN=",
                        "GITHUB_TOKEN=",
                        "OPENAI_API_KEY=",
                    ]
                    .iter()
                    .any(|bad| l.starts_with(bad))
                        // The policy's own: the job CA's bundle for the AWS CLI.
                        && !l.starts_with("AWS_CA_BUNDLE=")
                })
        }
        // 403: the proxy refused; 000: nothing answered at all (no proxy, no route).
        Detect::ProxyForwarded => {
            output.contains("status=")
                && !output.contains("status=403")
                && !output.contains("status=000")
        }
    }
}

/// The HTTPS request of the permitted network step went through: terminated with the job's CA
/// (trusted by the command), decided, forwarded (5xx offline). `000`: TLS failed.
pub(super) fn https_forwarded(output: &str) -> bool {
    output.contains("https-status=")
        && !output.contains("https-status=000")
        && !output.contains("https-status=403")
}

/// The job's network log, one line per decided request (empty without one).
pub(crate) fn network_log(result: &JobResult) -> Vec<String> {
    result
        .network
        .as_ref()
        .and_then(|n| std::fs::read_to_string(&n.log).ok())
        .map(|t| t.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Allowed and refused lines of `log` whose path holds `tag`.
pub(super) fn decided(log: &[String], tag: &str) -> (usize, usize) {
    let mine = log.iter().filter(|l| l.contains(tag));
    mine.fold((0, 0), |(a, r), l| {
        if l.contains(" allowed") {
            (a + 1, r)
        } else {
            (a, r + 1)
        }
    })
}

pub(super) fn refused_by_runner(agent: AgentKind, output: &str) -> bool {
    let rules = match agent {
        // dontAsk mode: "Permission to use Read has been denied ..."
        AgentKind::Claude => output.contains("denied") || output.contains("Permission"),
        AgentKind::Opencode => output.contains("quest-runner"),
    };
    // The job's namespace: what it hides is absent, what it keeps read-only is so, whatever
    // path the tool judged (the agents' errors for ENOENT, EROFS and EACCES).
    let namespace = [
        "does not exist",
        "not found",
        "No such file",
        "ENOENT",
        "Read-only file system",
        "EROFS",
        "EACCES",
        "permission denied",
        // opencode's file system layer: "NotFound: FileSystem.makeDirectory (…)", and EROFS
        // as "Unknown: FileSystem.writeFile (…)".
        "FileSystem.",
        // opencode's glob over a directory the namespace does not have.
        "ripgrep execution failed",
    ]
    .iter()
    .any(|e| output.contains(e));
    // A tool that says it wrote, where the host shows nothing (the attempt did not escape):
    // it wrote inside the job's own trees (Claude Code resolves `<link>/..` as text, into the
    // checkout).
    let contained = ["created successfully", "updated successfully"]
        .iter()
        .any(|e| output.contains(e));
    rules || namespace || contained
}

/// The private temp dirs of the job at `job_root`, read back from the sandbox settings the
/// runner rendered for it (Claude Code's settings or srt's).
pub(super) fn job_temp_dirs(job_root: &std::path::Path) -> Vec<PathBuf> {
    let runner = job_root.join("runner");
    let files = [runner.join("claude/settings.json"), runner.join("srt.json")];
    let mut dirs = Vec::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        let fs = v
            .get("sandbox")
            .and_then(|s| s.get("filesystem"))
            .or_else(|| v.get("filesystem"));
        let writes = fs
            .and_then(|f| f.get("allowWrite"))
            .and_then(|w| w.as_array());
        for w in writes.into_iter().flatten().filter_map(|w| w.as_str()) {
            let name = std::path::Path::new(w)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned());
            if name.is_some_and(|n| n.starts_with(quest_runner::workspace::TEMP_PREFIX)) {
                dirs.push(PathBuf::from(w));
            }
        }
    }
    dirs
}

pub(super) use quest_runner::util::text::clip;
