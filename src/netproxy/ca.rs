//! The job's own certificate authority: the proxy signs a certificate for each host it
//! terminates with it, and the job's commands trust it for this job only.
//!
//! Its key exists in the runner's memory and goes to the proxy over a pipe; it is never
//! written anywhere, so nothing in the sandbox can read it. The certificate is written to the
//! job's directory (readable in the sandbox, not writable) with a bundle of it and the system's
//! roots, which the commands' trust variables name. Package managers still verify: they verify
//! the proxy's certificate against this CA, and the proxy verifies the registry's real one.
//!
//! srt's proxy signs with RSA (PKCS#1 v1.5, SHA-256) only, so the CA is RSA-2048. rcgen's
//! aws-lc-rs backend generates the key: about 50 ms of CPU (median here), where the pure-Rust
//! `rsa` crate's prime search took 0.13-1.5 s (median 0.4 s) even at opt-level 3; ring, the
//! other backend, generates no RSA keys at all.

use std::path::{Path, PathBuf};
use std::time::Duration;

use zeroize::Zeroizing;

/// Where the system keeps its roots, in the order the runner looks (Debian and Ubuntu,
/// Fedora, Alpine and macOS, openSUSE).
const SYSTEM_ROOTS: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
    "/etc/ssl/ca-bundle.pem",
];

#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("generating the job's CA key: {0}")]
    Key(String),
    #[error("signing the job's CA certificate: {0}")]
    Cert(#[from] rcgen::Error),
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The CA of one job.
pub struct JobCa {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The key, PKCS#8 PEM; wiped from memory when dropped.
    key_pem: Zeroizing<String>,
}

/// A key being generated ahead of its job, on a thread of its own.
type Pending = std::thread::JoinHandle<Result<rcgen::KeyPair, String>>;

/// Keys made ahead, oldest first, and how many to keep made or in the making.
struct KeyPool {
    keys: std::collections::VecDeque<Pending>,
    keep: usize,
}

static POOL: std::sync::Mutex<KeyPool> = std::sync::Mutex::new(KeyPool {
    keys: std::collections::VecDeque::new(),
    keep: 0,
});

fn pool() -> std::sync::MutexGuard<'static, KeyPool> {
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

impl KeyPool {
    fn fill(&mut self, to: usize) {
        while self.keys.len() < to {
            self.keys.push_back(std::thread::spawn(new_key));
        }
    }
}

fn new_key() -> Result<rcgen::KeyPair, String> {
    rcgen::KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256).map_err(|e| e.to_string())
}

/// Starts generating the next job's key, unless one is already made or under way. The
/// runner starts it when a trusted job begins, so its ~50 ms overlap the workspace and
/// devShell instead of delaying the agent.
pub fn warm_up() {
    pool().fill(1);
}

/// For a long-running runner (`serve`): from now on `n` keys (its concurrency) are always
/// made or in the making, so jobs that start together do not each wait for theirs (four
/// at once on two cores did). A one-shot `run` does not call this: keys made after its
/// only job would be wasted.
pub fn keep_ready(n: usize) {
    let mut pool = pool();
    pool.keep = n;
    pool.fill(n);
}

/// The oldest key made ahead, or a fresh one. Each key serves one job only.
fn take_key() -> Result<rcgen::KeyPair, CaError> {
    let pending = {
        let mut pool = pool();
        let pending = pool.keys.pop_front();
        let keep = pool.keep;
        pool.fill(keep);
        pending
    };
    let key = match pending {
        Some(handle) => handle
            .join()
            .map_err(|_| CaError::Key("the key thread panicked".into()))?,
        None => new_key(),
    };
    key.map_err(CaError::Key)
}

impl JobCa {
    /// A fresh CA named after `job_id`, valid from an hour ago (clock skew) for `lifetime`.
    pub fn generate(job_id: &str, lifetime: Duration) -> Result<JobCa, CaError> {
        let pair = take_key()?;
        let key_pem = Zeroizing::new(pair.serialize_pem());
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            format!("quest-runner job {job_id}"),
        );
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::hours(1);
        params.not_after =
            now + time::Duration::seconds(lifetime.as_secs().min(i64::MAX as u64) as i64);
        let cert = params.self_signed(&pair)?;
        Ok(JobCa {
            cert_pem: cert.pem(),
            key_pem,
        })
    }

    /// What the proxy reads from its CA descriptor: key, then certificate.
    pub fn proxy_pem(&self) -> Zeroizing<String> {
        Zeroizing::new(format!("{}\n{}", self.key_pem.as_str(), self.cert_pem))
    }

    /// Writes the certificate to `cert` and the bundle (certificate, then the system's roots)
    /// to `bundle`, both readable by everyone (they hold no secret).
    pub fn write_trust_files(&self, cert: &Path, bundle: &Path) -> Result<(), CaError> {
        let mut text = self.cert_pem.clone();
        if let Some(roots) = system_roots() {
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&roots);
        }
        write(cert, &self.cert_pem)?;
        write(bundle, &text)
    }
}

/// The system's root certificates: the file the runner's own environment names, else the
/// first of [`SYSTEM_ROOTS`] that exists.
fn system_roots() -> Option<String> {
    let named = ["SSL_CERT_FILE", "NIX_SSL_CERT_FILE"]
        .iter()
        .filter_map(std::env::var_os)
        .map(PathBuf::from);
    named
        .chain(SYSTEM_ROOTS.iter().map(PathBuf::from))
        .find_map(|p| std::fs::read_to_string(p).ok())
}

fn write(path: &Path, text: &str) -> Result<(), CaError> {
    use std::os::unix::fs::PermissionsExt;
    let fail = |source| CaError::Write {
        path: path.to_path_buf(),
        source,
    };
    std::fs::write(path, text).map_err(fail)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).map_err(fail)
}
