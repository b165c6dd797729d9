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

use crate::sandbox::policy::CaFiles;

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
    /// The certificate, DER (for the Java trust store).
    cert_der: Vec<u8>,
    /// The key, PKCS#8 PEM; wiped from memory when dropped.
    key_pem: Zeroizing<String>,
    /// The CA as it signs the runner's own leaf certificates (`super::front`, which answers a
    /// job's locked dependencies itself).
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    not_after: time::OffsetDateTime,
}

/// A leaf certificate of the job's CA for one host, with its chain and key, as rustls takes
/// them.
pub struct Leaf {
    pub chain: Vec<rustls::pki_types::CertificateDer<'static>>,
    pub key: rustls::pki_types::PrivateKeyDer<'static>,
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
        let not_after = params.not_after;
        Ok(JobCa {
            cert_pem: cert.pem(),
            cert_der: cert.der().to_vec(),
            key_pem,
            issuer: rcgen::Issuer::new(params, pair),
            not_after,
        })
    }

    /// A certificate of this CA for `host`, with a fresh ECDSA key (fast to make, where an
    /// RSA key takes ~50 ms): what the job's clients, trusting the CA, accept for `host`.
    pub fn leaf(&self, host: &str) -> Result<Leaf, CaError> {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let mut params = rcgen::CertificateParams::new(vec![host.to_string()])?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, host.to_string());
        params.not_before = time::OffsetDateTime::now_utc() - time::Duration::hours(1);
        params.not_after = self.not_after;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Leaf {
            chain: vec![
                cert.der().clone(),
                rustls::pki_types::CertificateDer::from(self.cert_der.clone()),
            ],
            key: rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        })
    }

    /// What the proxy reads from its CA descriptor: key, then certificate.
    pub fn proxy_pem(&self) -> Zeroizing<String> {
        Zeroizing::new(format!("{}\n{}", self.key_pem.as_str(), self.cert_pem))
    }

    /// Writes the files the policy names: the certificate, the bundle (certificate, then the
    /// system's roots) and the Java trust store, all readable by everyone (they hold no
    /// secret).
    pub fn write_trust_files(&self, files: &CaFiles) -> Result<(), CaError> {
        let mut text = self.cert_pem.clone();
        if let Some(roots) = system_roots() {
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&roots);
        }
        write(&files.cert, self.cert_pem.as_bytes())?;
        write(&files.bundle, text.as_bytes())?;
        write(&files.java_trust_store, &java_trust_store(&self.cert_der))
    }
}

/// A PKCS#12 trust store (RFC 7292) holding `cert_der` as its one trusted certificate, with no
/// password and no MAC: what the JVM loads as `javax.net.ssl.trustStore` with no password
/// (JDK 12 and later read such stores; keytool lists them). Only the job's CA is in it: every
/// TLS connection a command makes goes to the proxy, which presents certificates of that CA.
///
/// The JDK takes a certificate without a key as a trusted one only with Oracle's
/// "trusted key usage" attribute, which names the usages it is trusted for.
pub fn java_trust_store(cert_der: &[u8]) -> Vec<u8> {
    use yasna::models::ObjectIdentifier;
    use yasna::Tag;
    let oid = |arcs: &[u64]| ObjectIdentifier::from_slice(arcs);
    let data = oid(&[1, 2, 840, 113549, 1, 7, 1]);
    let cert_bag = oid(&[1, 2, 840, 113549, 1, 12, 10, 1, 3]);
    let x509_certificate = oid(&[1, 2, 840, 113549, 1, 9, 22, 1]);
    let friendly_name = oid(&[1, 2, 840, 113549, 1, 9, 20]);
    let trusted_key_usage = oid(&[2, 16, 840, 1, 113894, 746875, 1, 1]);
    let any_extended_key_usage = oid(&[2, 5, 29, 37, 0]);
    // ContentInfo of type data: the bytes as an explicitly tagged OCTET STRING.
    let content_info = |w: yasna::DERWriter, content: &[u8]| {
        w.write_sequence(|w| {
            w.next().write_oid(&data);
            w.next()
                .write_tagged(Tag::context(0), |w| w.write_bytes(content));
        })
    };
    let safe_contents = yasna::construct_der(|w| {
        w.write_sequence_of(|w| {
            w.next().write_sequence(|w| {
                w.next().write_oid(&cert_bag);
                w.next().write_tagged(Tag::context(0), |w| {
                    w.write_sequence(|w| {
                        w.next().write_oid(&x509_certificate);
                        w.next()
                            .write_tagged(Tag::context(0), |w| w.write_bytes(cert_der));
                    })
                });
                w.next().write_set_of(|w| {
                    w.next().write_sequence(|w| {
                        w.next().write_oid(&friendly_name);
                        w.next().write_set_of(|w| {
                            w.next().write_bmp_string("quest-runner job ca");
                        });
                    });
                    w.next().write_sequence(|w| {
                        w.next().write_oid(&trusted_key_usage);
                        w.next()
                            .write_set_of(|w| w.next().write_oid(&any_extended_key_usage));
                    });
                });
            });
        })
    });
    let authenticated_safe =
        yasna::construct_der(|w| w.write_sequence_of(|w| content_info(w.next(), &safe_contents)));
    yasna::construct_der(|w| {
        w.write_sequence(|w| {
            w.next().write_u8(3);
            content_info(w.next(), &authenticated_safe);
        })
    })
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

fn write(path: &Path, text: &[u8]) -> Result<(), CaError> {
    use std::os::unix::fs::PermissionsExt;
    let fail = |source| CaError::Write {
        path: path.to_path_buf(),
        source,
    };
    std::fs::write(path, text).map_err(fail)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JDK reads the trust store with no password and takes the CA as a trusted
    /// certificate entry (checked with the JDK's keytool, where there is one).
    #[test]
    fn the_java_trust_store_holds_the_ca_as_trusted() {
        let ca = JobCa::generate("p12", Duration::from_secs(3600)).expect("CA");
        let dir = tempfile::tempdir().expect("tempdir");
        let files = CaFiles {
            cert: dir.path().join("ca.pem"),
            bundle: dir.path().join("bundle.pem"),
            java_trust_store: dir.path().join("ca.p12"),
        };
        ca.write_trust_files(&files).expect("written");
        let store = std::fs::read(&files.java_trust_store).expect("store");
        assert_eq!(store[0], 0x30, "a DER SEQUENCE");
        let Ok(keytool) = which::which("keytool") else {
            eprintln!("no keytool here: the store's structure is not checked by the JDK");
            return;
        };
        let out = std::process::Command::new(keytool)
            .args(["-list", "-v", "-storetype", "PKCS12", "-keystore"])
            .arg(&files.java_trust_store)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("keytool runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("trustedCertEntry"), "{text}");
        assert!(text.contains("quest-runner job p12"), "{text}");
    }
}
