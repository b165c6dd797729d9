//! The runner's one TLS client setup for the hosts it talks to itself (a model provider, the
//! package registries it fetches locked artifacts from): rustls with aws-lc-rs (what rcgen
//! already uses) and the system's roots, plus any a test made.

use std::sync::Arc;

use rustls::pki_types::CertificateDer;

/// A client config trusting the system's roots and `extra_roots`; `what` names the user of
/// it in the warning when the system has no roots at all.
pub fn client_config(
    extra_roots: &[CertificateDer<'static>],
    what: &str,
) -> Result<rustls::ClientConfig, rustls::Error> {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for e in &native.errors {
        tracing::debug!("loading the system's CA certificates: {e}");
    }
    let (added, _ignored) = roots.add_parsable_certificates(native.certs);
    for cert in extra_roots {
        roots.add(cert.clone())?;
    }
    if roots.is_empty() {
        tracing::warn!(
            "no system CA certificates found (SSL_CERT_FILE, SSL_CERT_DIR, /etc/ssl/certs): \
             {what} cannot reach an HTTPS host"
        );
    }
    tracing::debug!(system_roots = added, "{what}: TLS roots loaded");
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth())
}
