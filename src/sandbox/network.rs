//! What a job's commands may reach: the hosts (the registries and the operator's, for a
//! trusted revision; for an untrusted one, only the hosts of its locked dependencies, which
//! the runner answers itself from its cache), the methods each answers, and the job's CA,
//! which every client is pointed at through the variable that beats its own configuration.
//! A step of [`super::policy::plan`].

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::inputs::PolicyInputs;
use crate::job::Trust;
use crate::workspace::WorkspacePaths;

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
/// over every config file of these clients). docs/security.md's table is this one.
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
pub(super) const JAVA_PROXY_PRELUDE: &str = r#"case "${HTTPS_PROXY:-}" in http://*)
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

/// The network part of the policy.
pub(super) struct Network {
    pub allowed_hosts: Vec<String>,
    pub full_access_hosts: Vec<String>,
    pub ca: Option<CaFiles>,
}

/// The hosts a job reaches, and the CA it trusts when it reaches any.
pub(super) fn plan_network(ws: &WorkspacePaths, inputs: &PolicyInputs) -> Network {
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
        // The runner's own answers from the revision's locked set, and nothing upstream.
        Trust::Untrusted => (inputs.dependency_hosts.clone(), Vec::new()),
    };
    // Whenever a host is reachable, the runner's proxy decides; commands trust its CA.
    let ca = (!allowed_hosts.is_empty()).then(|| CaFiles {
        cert: ws.job_dir.join("network-ca.pem"),
        bundle: ws.job_dir.join("network-ca-bundle.pem"),
        java_trust_store: ws.job_dir.join("network-ca.p12"),
    });
    Network {
        allowed_hosts,
        full_access_hosts,
        ca,
    }
}
