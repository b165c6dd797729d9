//! The sandbox policy of one job: what its commands may read, write and reach, and which
//! environment they get. One value, computed from the job and its workspace before anything
//! runs, printed by `quest-runner policy` for audit, and rendered by each agent adapter into
//! its own sandbox's settings. A rule that is not in this value is not enforced anywhere.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::private::HiddenFile;
use crate::job::Trust;
use crate::workspace::{WorkspacePaths, AGENT_CONFIG};

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
    /// Files of the runner's that may live anywhere (account secrets, the config file), each
    /// with the directories that hide it ([`super::private::hide`]).
    pub private: Vec<HiddenFile>,
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
    /// The runner's private files and the directories of `deny_read` that hide each, for
    /// audit: why a directory outside the system's is denied.
    pub private: Vec<HiddenFile>,
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

/// The job's CA certificate, a bundle of it with the system's roots, and a Java trust store of
/// it, in the runner's job directory: readable by commands, not writable. The key never leaves
/// the runner and the proxy.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CaFiles {
    pub cert: PathBuf,
    pub bundle: PathBuf,
    /// PKCS#12, no password, the CA as its one trusted certificate: what the JVM reads.
    pub java_trust_store: PathBuf,
}

/// The methods registries answer jobs.
pub const READ_ONLY_METHODS: &[&str] = &["GET", "HEAD"];

/// Which of the job's CA files a trust variable names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TrustFile {
    /// The job's CA and the system's roots: for a setting that replaces the client's roots.
    Bundle,
    /// The job's CA alone: for a setting that adds to the client's own roots.
    Cert,
    /// JVM options naming the PKCS#12 trust store (`-Djavax.net.ssl.trustStore=...`).
    JavaOptions,
}

/// One variable through which a client trusts the job's CA.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TrustVar {
    pub name: &'static str,
    pub file: TrustFile,
    /// The clients that read it.
    pub clients: &'static str,
    /// The file configuration it takes precedence over: a setting there (a company's global
    /// `npmrc` with `cafile`, say) would otherwise replace the job's CA and fail every TLS
    /// handshake with the proxy.
    pub beats: &'static str,
}

/// Every variable the job's commands get pointing at the job's CA: one per client, each the
/// one that beats the client's own file configuration (environment variables take precedence
/// over every config file of these clients). The README's table is this one.
///
/// Not `YARN_CAFILE`: yarn 2+ refuses to run with it set ("legacy configuration settings
/// found: cafile"), and yarn classic takes npm's `npm_config_cafile`.
pub const TRUST_VARS: &[TrustVar] = &[
    TrustVar {
        name: "SSL_CERT_FILE",
        file: TrustFile::Bundle,
        clients:
            "OpenSSL (Python, Ruby and gem, git's and curl's TLS), Go, uv, rustls with native roots",
        beats: "the system's store",
    },
    TrustVar {
        name: "CURL_CA_BUNDLE",
        file: TrustFile::Bundle,
        clients: "curl, Python requests",
        beats: "curl's built-in bundle",
    },
    TrustVar {
        name: "REQUESTS_CA_BUNDLE",
        file: TrustFile::Bundle,
        clients: "Python requests (poetry, pipenv, twine)",
        beats: "certifi's bundle",
    },
    TrustVar {
        name: "PIP_CERT",
        file: TrustFile::Bundle,
        clients: "pip",
        beats: "`cert` in pip.conf (`/etc/pip.conf`, `/etc/xdg/pip/pip.conf`, the project's)",
    },
    TrustVar {
        name: "npm_config_cafile",
        file: TrustFile::Bundle,
        clients: "npm, npx, pnpm, yarn classic",
        beats: "`cafile` and `ca` in every npmrc (`$PREFIX/etc/npmrc`, the project's)",
    },
    TrustVar {
        name: "YARN_HTTPS_CA_FILE_PATH",
        file: TrustFile::Bundle,
        clients: "yarn berry (2+)",
        beats: "`httpsCaFilePath` in `.yarnrc.yml`",
    },
    TrustVar {
        name: "NODE_EXTRA_CA_CERTS",
        file: TrustFile::Cert,
        clients: "Node (npm, pnpm, yarn), bun",
        beats: "— (added to Node's roots)",
    },
    TrustVar {
        name: "DENO_CERT",
        file: TrustFile::Cert,
        clients: "deno",
        beats: "— (added to deno's roots)",
    },
    TrustVar {
        name: "UV_NATIVE_TLS",
        file: TrustFile::Bundle,
        clients: "uv (reads the system's store, so `SSL_CERT_FILE`, not its built-in roots)",
        beats: "`native-tls` in `uv.toml` (`/etc/uv/uv.toml`, the project's)",
    },
    TrustVar {
        name: "CARGO_HTTP_CAINFO",
        file: TrustFile::Bundle,
        clients: "cargo",
        beats: "`http.cainfo` in `.cargo/config.toml`",
    },
    TrustVar {
        name: "GIT_SSL_CAINFO",
        file: TrustFile::Bundle,
        clients: "git over HTTPS (Go modules from git too)",
        beats: "`http.sslCAInfo` in any git config",
    },
    TrustVar {
        name: "BUNDLE_SSL_CA_CERT",
        file: TrustFile::Bundle,
        clients: "bundler",
        beats: "`ssl_ca_cert` in bundler's config and `/etc/gemrc`",
    },
    TrustVar {
        name: "NIX_SSL_CERT_FILE",
        file: TrustFile::Bundle,
        clients: "Nix and programs built by Nix",
        beats: "`SSL_CERT_FILE` for them",
    },
    TrustVar {
        name: "AWS_CA_BUNDLE",
        file: TrustFile::Bundle,
        clients: "AWS CLI and SDKs",
        beats: "`ca_bundle` in the AWS config",
    },
    TrustVar {
        name: "CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE",
        file: TrustFile::Bundle,
        clients: "gcloud",
        beats: "`core/custom_ca_certs_file` in gcloud's config",
    },
    TrustVar {
        name: "JAVA_TOOL_OPTIONS",
        file: TrustFile::JavaOptions,
        clients: "every JVM (maven, gradle, sbt, java)",
        beats: "the JDK's `cacerts`",
    },
];

impl TrustVar {
    /// The variable's value for the job's CA files.
    pub fn value(&self, ca: &CaFiles) -> String {
        let path = |p: &Path| p.to_string_lossy().into_owned();
        match (self.file, self.name) {
            // A flag, not a path: uv then reads the system's store, which SSL_CERT_FILE names.
            (_, "UV_NATIVE_TLS") => "true".to_string(),
            (TrustFile::Bundle, _) => path(&ca.bundle),
            (TrustFile::Cert, _) => path(&ca.cert),
            (TrustFile::JavaOptions, _) => java_options(&ca.java_trust_store),
        }
    }
}

/// The JVM options that make `store` the JVM's trust store. The JVM splits the variable at
/// whitespace but keeps double-quoted parts whole.
fn java_options(store: &Path) -> String {
    let store = store.to_string_lossy();
    let flag = format!("-Djavax.net.ssl.trustStore={store}");
    let flag = if flag.contains(char::is_whitespace) {
        format!("\"{flag}\"")
    } else {
        flag
    };
    format!("{flag} -Djavax.net.ssl.trustStoreType=PKCS12")
}

/// Package managers' proxy settings, each copied inside the sandbox from the proxy variable
/// the sandbox sets (its in-sandbox address is known only there). An environment variable
/// beats the file settings, so a proxy a global config file names (a company npmrc's
/// `https-proxy`, pip.conf's `proxy`, a `noproxy` list) cannot send a client elsewhere: it
/// could not get out that way (the sandbox has no network but its proxy), only fail.
///
/// Not `noproxy`: npm takes it from `NO_PROXY` unless a file sets it, and copying the
/// sandbox's `NO_PROXY` into `npm_config_noproxy` would make a command's own `NO_PROXY=` (to
/// send loopback through the proxy) stop applying to npm. A file's `noproxy` lists hosts to
/// reach directly, which nothing in the sandbox can.
pub const PROXY_VARS: &[(&str, &str)] = &[
    ("npm_config_proxy", "HTTP_PROXY"),
    ("npm_config_https_proxy", "HTTPS_PROXY"),
    ("YARN_HTTP_PROXY", "HTTP_PROXY"),
    ("YARN_HTTPS_PROXY", "HTTPS_PROXY"),
    ("PIP_PROXY", "HTTPS_PROXY"),
    ("CARGO_HTTP_PROXY", "HTTPS_PROXY"),
];

/// The JVM's proxy properties from the sandbox's `HTTPS_PROXY` (`http://host:port`).
const JAVA_PROXY_PRELUDE: &str = r#"case "${HTTPS_PROXY:-}" in http://*)
  qr_proxy=${HTTPS_PROXY#http://}; qr_proxy=${qr_proxy%%/*}; qr_proxy=${qr_proxy##*@}
  export JAVA_TOOL_OPTIONS="${JAVA_TOOL_OPTIONS:+$JAVA_TOOL_OPTIONS }-Dhttps.proxyHost=${qr_proxy%:*} -Dhttps.proxyPort=${qr_proxy##*:} -Dhttp.proxyHost=${qr_proxy%:*} -Dhttp.proxyPort=${qr_proxy##*:}"
  unset qr_proxy ;;
esac
"#;

/// Retry settings for a job whose every request goes to the proxy on loopback. pip retries a
/// failed connection five times with back-off (about 8 s for each URL), and the proxy refuses
/// an unlisted host by failing the tunnel, which pip takes for a failed connection; an
/// upstream's own failure reaches pip as an HTTP status instead, which this setting does not
/// touch. One retry keeps pip's answer to a dropped connection and makes a refusal cost about
/// a second. A devShell may set its own.
pub const RETRY_VARS: &[(&str, &str)] = &[("PIP_RETRIES", "1")];

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
/// runner's private files are hidden with their own directories wherever they are (see
/// `private`).
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
            // Where sops-nix and agenix keep their generations: `/run/secrets` and
            // `/run/agenix` are links into these, switched to a new generation on activation,
            // and both sandboxes hide where a link points when they start, not the link.
            "/run/secrets.d",
            "/run/secrets-for-users",
            "/run/secrets-for-users.d",
            "/run/agenix.d",
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

/// Builds the policy. Pure: the private files' directories were resolved before.
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
    // Whole directories, never a file by its name: a mount over a file is lost in a running
    // sandbox once the file is replaced (see `private`).
    for hidden in &inputs.private {
        for dir in &hidden.dirs {
            push_unique(&mut deny_read, dir.dir.clone());
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
        java_trust_store: ws.job_dir.join("network-ca.p12"),
    });
    if let Some(ca) = &ca {
        allow_read.push(ca.cert.clone());
        allow_read.push(ca.bundle.clone());
        allow_read.push(ca.java_trust_store.clone());
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
        for var in TRUST_VARS {
            set.insert(var.name.to_string(), var.value(ca));
        }
        for (var, value) in RETRY_VARS {
            set.insert(var.to_string(), value.to_string());
        }
    }

    SandboxPolicy {
        platform: inputs.platform,
        trust: inputs.trust,
        deny_read,
        allow_read,
        allow_write,
        deny_write,
        private: inputs.private.clone(),
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

    /// Shell lines every command runs first, inside the sandbox and before the devShell: the
    /// package managers' proxy settings of [`PROXY_VARS`]. Empty when no host is reachable.
    pub fn command_prelude(&self) -> String {
        if self.ca.is_none() {
            return String::new();
        }
        let mut out = String::from(
            "# quest-runner: package managers use this sandbox's proxy, whatever their config files name\n",
        );
        for (var, from) in PROXY_VARS {
            out.push_str(&format!(
                "[ -z \"${{{from}:-}}\" ] || export {var}=\"${from}\"\n"
            ));
        }
        // The JVM reads no proxy variable, only properties: srt's own JVM agent sets them
        // where srt has it (opencode's commands), Claude Code's sandbox sets none. Properties
        // given here come first; an agent's, later, win.
        out.push_str(JAVA_PROXY_PRELUDE);
        out
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
