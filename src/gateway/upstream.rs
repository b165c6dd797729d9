//! The gateway's side towards the provider: one pooled HTTP/1.1 client, TLS by rustls
//! (aws-lc-rs, as rcgen already uses) with the system's roots, kept-alive connections.

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::CertificateDer;

use super::GatewayError;

/// Request bodies the client sends: the agent's, streamed, or the runner's own.
pub type OutBody = BoxBody<Bytes, hyper::Error>;

pub type HttpClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, OutBody>;

/// A base URL the gateway cannot send a model's requests to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{url:?}{why}")]
pub struct UpstreamUrlError {
    pub url: String,
    pub why: UrlProblem,
}

/// What is wrong with an [`UpstreamUrlError`]'s URL (its text follows the URL).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlProblem {
    #[error(" is not a URL: {0}")]
    NotAUrl(String),
    #[error(": only http and https URLs reach a model")]
    Scheme,
    #[error(" names no host")]
    NoHost,
    #[error(": credentials in the URL are not taken")]
    Credentials,
    #[error(": a base URL takes no query")]
    Query,
}

/// Where a job's model requests go: `scheme://authority` and the path every endpoint is
/// under (`/v1` for an OpenAI-compatible base URL, empty for Anthropic's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamUrl {
    pub scheme: http::uri::Scheme,
    pub authority: http::uri::Authority,
    pub base_path: String,
}

impl UpstreamUrl {
    pub fn parse(url: &str) -> Result<UpstreamUrl, UpstreamUrlError> {
        let bad = |why| UpstreamUrlError {
            url: url.to_string(),
            why,
        };
        let uri: http::Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| bad(UrlProblem::NotAUrl(e.to_string())))?;
        let scheme = uri
            .scheme()
            .cloned()
            .filter(|s| *s == http::uri::Scheme::HTTP || *s == http::uri::Scheme::HTTPS)
            .ok_or_else(|| bad(UrlProblem::Scheme))?;
        let authority = uri
            .authority()
            .cloned()
            .ok_or_else(|| bad(UrlProblem::NoHost))?;
        if authority.as_str().contains('@') {
            return Err(bad(UrlProblem::Credentials));
        }
        if uri.query().is_some() {
            return Err(bad(UrlProblem::Query));
        }
        let base_path = uri.path().trim_end_matches('/').to_string();
        Ok(UpstreamUrl {
            scheme,
            authority,
            base_path,
        })
    }

    /// The upstream URI for a request whose path (and query) is `path_and_query`.
    pub fn uri(&self, path_and_query: &str) -> Result<http::Uri, http::Error> {
        http::Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(path_and_query)
            .build()
    }

    pub fn display(&self) -> String {
        format!("{}://{}{}", self.scheme, self.authority, self.base_path)
    }
}

/// The client, trusting the system's roots and `extra_roots` (tests: a CA they made).
pub fn client(extra_roots: &[CertificateDer<'static>]) -> Result<HttpClient, GatewayError> {
    let tls = crate::util::tls::client_config(extra_roots, "the model gateway")
        .map_err(GatewayError::Tls)?;
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(std::time::Duration::from_secs(30)));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new())
        .pool_idle_timeout(std::time::Duration::from_secs(60))
        .build(https))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls() {
        let u = UpstreamUrl::parse("https://api.anthropic.com").unwrap();
        assert_eq!(u.base_path, "");
        assert_eq!(
            u.uri("/v1/messages?beta=true").unwrap().to_string(),
            "https://api.anthropic.com/v1/messages?beta=true"
        );
        let u = UpstreamUrl::parse("http://127.0.0.1:8080/v1/").unwrap();
        assert_eq!(u.base_path, "/v1");
        assert_eq!(u.display(), "http://127.0.0.1:8080/v1");
        for bad in [
            "ftp://x",
            "api.anthropic.com",
            "https://user:pw@x.org",
            "https://x.org/v1?key=1",
        ] {
            assert!(UpstreamUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
