//! The sandbox policy of one job: what its commands may read, write and reach, and which
//! environment they get. One value, computed from the job and its workspace before anything
//! runs, printed by `quest-runner policy` for audit, and rendered by each agent adapter into
//! its own sandbox's settings. A rule that is not in this value is not enforced anywhere.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::job::Trust;

/// The package registries a trusted revision's commands may reach, so its checks can install
/// dependencies: npm and yarn, the crates index and download host, PyPI and its file host.
/// `crates.io` itself serves only the publishing API and is left out.
pub const REGISTRIES: &[&str] = &[
    "registry.npmjs.org",
    "registry.yarnpkg.com",
    "index.crates.io",
    "static.crates.io",
    "pypi.org",
    "files.pythonhosted.org",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Platform {
    Linux,
    Macos,
}

impl Platform {
    pub fn current() -> Platform {
        if cfg!(target_os = "macos") {
            Platform::Macos
        } else {
            Platform::Linux
        }
    }
}

/// Where a job's files are. All paths absolute and canonical.
#[derive(Debug, Clone, Serialize)]
pub struct WorkspacePaths {
    /// The worktree the agent edits.
    pub checkout: PathBuf,
    /// The repository's shared clone: the job reads its objects, and writes none of it.
    pub bare_clone: PathBuf,
    /// The job's own git store (`<job>/git`, see `job_git`), the checkout's common dir: its
    /// objects (the shared clone's through alternates), refs and reflogs.
    pub git_store: PathBuf,
    /// The worktree's administrative directory in the store (`<store>/worktrees/checkout`):
    /// HEAD, index, logs of this checkout.
    pub worktree_admin: PathBuf,
    /// The private `/tmp/quest-job-*` directory: HOME and TMPDIR of every command.
    pub temp_dir: PathBuf,
    /// The runner's own files for this job (agent config, devShell script); only the
    /// devShell script in it is readable by commands.
    pub job_dir: PathBuf,
    /// The devShell script commands source, if the revision has one.
    pub devshell_script: Option<PathBuf>,
    /// A short private directory for the runner's own helpers (srt's sockets must have short
    /// paths); commands cannot read it.
    pub helper_tmp: PathBuf,
}

/// What the policy is computed from besides the workspace.
#[derive(Debug, Clone)]
pub struct PolicyInputs {
    pub platform: Platform,
    pub trust: Trust,
    /// Hosts the operator adds for trusted revisions (reads only, like the registries).
    pub extra_hosts: Vec<String>,
    /// Hosts the operator adds for trusted revisions with every method.
    pub full_access_hosts: Vec<String>,
    /// The runner's state directory (logins, tokens, other jobs).
    pub state_dir: PathBuf,
    /// The home directory of the user the runner runs as.
    pub operator_home: Option<PathBuf>,
    /// Files of the runner's that may live anywhere (account secrets, the config file): each
    /// is denied by name, and through its real path when it is a link.
    pub private_files: Vec<PathBuf>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SandboxPolicy {
    pub platform: Platform,
    pub trust: Trust,
    /// Denied to every command...
    pub deny_read: Vec<PathBuf>,
    /// ...except these, which are read back inside the denied trees.
    pub allow_read: Vec<PathBuf>,
    /// The only places a command may write.
    pub allow_write: Vec<PathBuf>,
    /// Never writable, even inside `allow_write`.
    pub deny_write: Vec<PathBuf>,
    /// Hosts commands may reach through the runner's proxy; empty means none.
    pub allowed_hosts: Vec<String>,
    /// Of `allowed_hosts`, the ones every method may be used on (the operator's
    /// `network.full_access_hosts`).
    pub full_access_hosts: Vec<String>,
    /// The methods every other allowed host answers (the registries): reads only, so a
    /// command can install but not publish, unpublish or mint a token.
    pub read_only_methods: Vec<String>,
    /// The job's CA, which the commands trust: the runner's proxy terminates their TLS to
    /// decide each request. Set whenever some host is reachable.
    pub ca: Option<CaFiles>,
    /// The port of the runner's proxy, once it runs (chosen at run time; `None` in
    /// `quest-runner policy`). Both agents' sandboxes send HTTP and SOCKS traffic there.
    pub proxy_port: Option<u16>,
    /// The agent's own file tools (read, edit, write, ...) run in the agent's process, outside
    /// the OS sandbox; when set, the adapter confines them to what `may_read`/`may_write`
    /// allow (Claude Code: permission rules; opencode: the runner's plugin).
    pub confine_file_tools: bool,
    /// The environment of the agent and its commands.
    pub env: EnvPolicy,
    pub home: PathBuf,
    pub tmpdir: PathBuf,
    pub checkout: PathBuf,
    pub devshell_script: Option<PathBuf>,
}

/// The job's CA certificate, and a bundle of it with the system's roots, in the runner's job
/// directory: readable by commands, not writable. The key never leaves the runner and the
/// proxy.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CaFiles {
    pub cert: PathBuf,
    pub bundle: PathBuf,
}

/// The methods registries answer jobs.
pub const READ_ONLY_METHODS: &[&str] = &["GET", "HEAD"];

/// Trust variables pointed at the job's bundle (CA and system roots), per tool: OpenSSL and
/// curl, Python requests and pip, git, cargo, Nix, the AWS CLI.
pub const CA_BUNDLE_VARS: &[&str] = &[
    "SSL_CERT_FILE",
    "CURL_CA_BUNDLE",
    "REQUESTS_CA_BUNDLE",
    "PIP_CERT",
    "GIT_SSL_CAINFO",
    "CARGO_HTTP_CAINFO",
    "NIX_SSL_CERT_FILE",
    "AWS_CA_BUNDLE",
];

/// Environment rules. Commands start from the agent's environment, which the runner builds
/// from scratch: only `pass` names (exact, or prefixes ending in `*`) survive from the
/// runner's own environment, and `set` is added on top.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct EnvPolicy {
    pub pass: Vec<String>,
    pub set: BTreeMap<String, String>,
}

/// A directory srt makes available to every sandbox when it exists (`doctor` warns).
pub const SRT_SHARED_TMP: &str = "/tmp/claude";

/// The names srt denies commands to write in every writable tree (its "mandatory deny
/// paths", listed in its README). The opencode plugin refuses its file tools the same names,
/// and the workspace has git ignore the stubs srt mounts for them.
pub const SRT_PROTECTED_NAMES: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".zshrc",
    ".zprofile",
    ".profile",
    ".gitconfig",
    ".gitmodules",
    ".ripgreprc",
    ".mcp.json",
    ".vscode",
    ".idea",
];

/// Files in a checkout through which an agent run on it later would execute code.
///
/// `.claude` is protected by its settings files rather than as a whole: srt mounts its own
/// stubs for `.claude/commands` and `.claude/agents` inside it, which a read-only `.claude`
/// would make impossible (and the sandbox would not start).
pub const AGENT_CONFIG: &[&str] = &[
    ".claude/settings.json",
    ".claude/settings.local.json",
    ".mcp.json",
    ".opencode",
    "opencode.json",
    "opencode.jsonc",
];

/// Variables a command may inherit from the runner: locale, the search path, and the
/// proxy and CA settings a package manager needs to reach a registry.
pub const PASSED_ENV: &[&str] = &[
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "TERM",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "all_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NIX_SSL_CERT_FILE",
    "CURL_CA_BUNDLE",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
];

/// Whether `name` passes `patterns` (exact names, or prefixes written `PREFIX*`).
pub fn env_passes(patterns: &[String], name: &str) -> bool {
    patterns.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => p == name,
    })
}

/// System places that hold other users' or services' data and secrets. Everything else of
/// the system (`/usr`, `/nix/store`, `/etc`, `/opt`, ...) stays readable so tools work. The
/// Nix modules warn about account files outside these (modules/options.nix `deniedReads`,
/// which tests/deploy.rs keeps equal to this list).
pub fn system_denied_reads(platform: Platform) -> Vec<PathBuf> {
    let paths: &[&str] = match platform {
        Platform::Linux => &[
            "/home",
            "/root",
            "/run/user",
            "/tmp",
            "/var/tmp",
            "/var/lib",
            "/var/log",
            "/var/mail",
            "/var/spool",
            "/var/backups",
            "/srv",
            "/mnt",
            "/media",
            "/boot",
            "/etc/shadow",
            "/etc/gshadow",
            "/etc/ssh",
            "/etc/sudoers",
            "/etc/sudoers.d",
            "/etc/nix/netrc",
            // Where secret managers and systemd put secrets for services.
            "/run/secrets",
            "/run/credentials",
            "/run/keys",
            "/run/agenix",
        ],
        Platform::Macos => &[
            "/Users",
            "/var/root",
            "/private/tmp",
            "/private/var/tmp",
            "/private/var/folders",
            "/private/var/db",
            "/private/var/log",
            "/Library/Keychains",
            "/private/etc/ssh",
            "/private/etc/sudoers",
            "/Volumes",
        ],
    };
    paths.iter().map(PathBuf::from).collect()
}

/// Builds the policy. Pure but for resolving the private files' links.
pub fn plan(ws: &WorkspacePaths, inputs: &PolicyInputs) -> SandboxPolicy {
    let mut deny_read = system_denied_reads(inputs.platform);
    // The temp dirs' parent holds other jobs' temp dirs: `/tmp` is denied above, a `TMPDIR`
    // elsewhere is denied here (the job's own is allowed below).
    let temp_parent = ws.temp_dir.parent().filter(|p| p.parent().is_some());
    for extra in [
        Some(&inputs.state_dir),
        inputs.operator_home.as_ref(),
        temp_parent.map(Path::to_path_buf).as_ref(),
    ]
    .into_iter()
    .flatten()
    {
        push_unique(&mut deny_read, extra.clone());
    }
    if inputs.platform == Platform::Macos {
        if let Some(home) = &inputs.operator_home {
            push_unique(&mut deny_read, home.join("Library/Keychains"));
        }
    }
    for file in &inputs.private_files {
        push_unique(&mut deny_read, file.clone());
        if let Ok(real) = std::fs::canonicalize(file) {
            push_unique(&mut deny_read, real);
        }
    }

    // The store's parts git reads, not the store itself: srt binds an allowed read after the
    // writable binds below it, and a read-only bind of the whole store would cover `objects/`
    // and `refs/` and break `git commit`. Of the shared clone, only the objects, read-only:
    // whoever writes them decides what every later job checks out.
    let mut allow_read = vec![
        ws.checkout.clone(),
        ws.temp_dir.clone(),
        ws.git_store.join("HEAD"),
        ws.git_store.join("config"),
        ws.git_store.join("packed-refs"),
        ws.git_store.join("info"),
        ws.bare_clone.join("objects"),
    ];
    if let Some(script) = &ws.devshell_script {
        allow_read.push(script.clone());
    }
    // srt keeps the sockets its in-sandbox proxy bridge connects to here: hidden, the bridge
    // would answer every request with nothing.
    allow_read.push(ws.helper_tmp.clone());

    // `git commit` in the worktree writes objects, refs and the worktree's own HEAD, index
    // and logs, all in the job's own store; never its config or hooks, nor anything of the
    // shared clone.
    let allow_write = vec![
        ws.checkout.clone(),
        ws.temp_dir.clone(),
        ws.git_store.join("objects"),
        ws.git_store.join("refs"),
        ws.git_store.join("logs"),
        ws.worktree_admin.clone(),
    ];
    let mut deny_write = vec![
        // Where the store's objects come from besides its own (the shared clone's), and the
        // derived files git would read beside them.
        ws.git_store.join("objects/info"),
        // The pointers between checkout, admin dir and store, and the admin dir's own config:
        // rewritten, they would aim git that discovers its repository (the agent's own, any
        // tool's) at a directory and configuration of the job's choosing.
        ws.worktree_admin.join("commondir"),
        ws.worktree_admin.join("gitdir"),
        ws.worktree_admin.join("config.worktree"),
        ws.checkout.join(".git"),
        // git's global configuration under HOME: Claude Code runs outside the sandbox with
        // this HOME, and runs git in the checkout. (`~/.gitconfig` is among the names both
        // sandboxes protect on their own, `SRT_PROTECTED_NAMES`; denied here as well, a missing
        // one is mounted unreadable and git fails on it.)
        ws.temp_dir.join(".config/git"),
    ];
    // Agent configuration that runs code wherever it is loaded. The runner's agents never
    // load the checkout's, but a job's commits reach people and tools that do.
    for name in AGENT_CONFIG {
        deny_write.push(ws.checkout.join(name));
    }
    // srt binds its own `/tmp/claude` into every sandbox when it exists on the host, whatever
    // the settings say: shared between all jobs, so at least never writable.
    deny_write.push(PathBuf::from(SRT_SHARED_TMP));

    let (allowed_hosts, full_access_hosts) = match inputs.trust {
        Trust::Trusted => {
            let mut hosts: Vec<String> = REGISTRIES.iter().map(|h| h.to_string()).collect();
            for h in inputs.extra_hosts.iter().chain(&inputs.full_access_hosts) {
                if !hosts.contains(h) {
                    hosts.push(h.clone());
                }
            }
            (hosts, inputs.full_access_hosts.clone())
        }
        Trust::Untrusted => (Vec::new(), Vec::new()),
    };
    // Whenever a host is reachable, the runner's proxy decides; commands trust its CA.
    let ca = (!allowed_hosts.is_empty()).then(|| CaFiles {
        cert: ws.job_dir.join("network-ca.pem"),
        bundle: ws.job_dir.join("network-ca-bundle.pem"),
    });
    if let Some(ca) = &ca {
        allow_read.push(ca.cert.clone());
        allow_read.push(ca.bundle.clone());
    }

    let mut set = BTreeMap::new();
    let temp = ws.temp_dir.to_string_lossy().into_owned();
    set.insert("HOME".to_string(), temp.clone());
    set.insert("TMPDIR".to_string(), temp.clone());
    set.insert("SHELL".to_string(), "/bin/bash".to_string());
    // Git inside the sandbox must not read a global config from the operator.
    set.insert("GIT_CONFIG_NOSYSTEM".to_string(), "1".to_string());
    set.insert("GIT_TERMINAL_PROMPT".to_string(), "0".to_string());
    // An identity for the agent's commits: HOME is empty, so git would have none.
    for (k, v) in [
        ("GIT_AUTHOR_NAME", "quest-runner agent"),
        ("GIT_AUTHOR_EMAIL", "agent@quest-runner.invalid"),
        ("GIT_COMMITTER_NAME", "quest-runner agent"),
        ("GIT_COMMITTER_EMAIL", "agent@quest-runner.invalid"),
    ] {
        set.insert(k.to_string(), v.to_string());
    }

    if let Some(ca) = &ca {
        let bundle = ca.bundle.to_string_lossy().into_owned();
        for var in CA_BUNDLE_VARS {
            set.insert(var.to_string(), bundle.clone());
        }
        // Node adds these to its own roots rather than replacing them.
        set.insert(
            "NODE_EXTRA_CA_CERTS".to_string(),
            ca.cert.to_string_lossy().into_owned(),
        );
    }

    SandboxPolicy {
        platform: inputs.platform,
        trust: inputs.trust,
        deny_read,
        allow_read,
        allow_write,
        deny_write,
        allowed_hosts,
        full_access_hosts,
        read_only_methods: READ_ONLY_METHODS.iter().map(|m| m.to_string()).collect(),
        ca,
        proxy_port: None,
        confine_file_tools: true,
        env: EnvPolicy {
            pass: PASSED_ENV.iter().map(|s| s.to_string()).collect(),
            set,
        },
        home: ws.temp_dir.clone(),
        tmpdir: ws.temp_dir.clone(),
        checkout: ws.checkout.clone(),
        devshell_script: ws.devshell_script.clone(),
    }
}

fn push_unique(list: &mut Vec<PathBuf>, path: PathBuf) {
    // A path already covered by a denied ancestor adds nothing.
    if !list.iter().any(|p| path.starts_with(p)) {
        list.push(path);
    }
}

impl SandboxPolicy {
    /// The environment for the agent process (and so its commands), built from `source`
    /// (normally the runner's own environment) by the pass list, then `set`.
    pub fn environment<I>(&self, source: I) -> BTreeMap<String, String>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        let mut env: BTreeMap<String, String> = source
            .into_iter()
            .filter(|(k, _)| env_passes(&self.env.pass, k))
            .collect();
        env.extend(self.env.set.clone());
        env
    }

    /// The text the agent's prompt carries about its network.
    pub fn network_summary(&self) -> String {
        if self.allowed_hosts.is_empty() {
            "Commands have no network access: no host can be reached.".to_string()
        } else {
            let reads = self
                .allowed_hosts
                .iter()
                .filter(|h| !self.full_access_hosts.contains(h))
                .cloned()
                .collect::<Vec<_>>();
            let mut text = format!(
                "Commands reach only these hosts, through a proxy: {}. Every other host is refused.",
                self.allowed_hosts.join(", ")
            );
            if !reads.is_empty() {
                text.push_str(&format!(
                    " {} answer only {} (no publishing).",
                    reads.join(", "),
                    self.read_only_methods.join(" and ")
                ));
            }
            text
        }
    }

    /// Whether `path` is readable under the policy (deny with allow-backs), for tests and
    /// for the adapters' own checks of file-tool paths.
    pub fn may_read(&self, path: &Path) -> bool {
        let denied = self.deny_read.iter().any(|d| path.starts_with(d));
        !denied
            || self
                .allow_read
                .iter()
                .chain(&self.allow_write)
                .any(|a| path.starts_with(a))
    }

    /// Whether `path` is writable under the policy.
    pub fn may_write(&self, path: &Path) -> bool {
        self.allow_write.iter().any(|a| path.starts_with(a))
            && !self.deny_write.iter().any(|d| path.starts_with(d))
    }
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
