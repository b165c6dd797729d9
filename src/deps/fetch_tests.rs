//! The fetcher against a stand-in registry on loopback (a TLS server answering as
//! registry.npmjs.org, trusted by a CA of the test's own): what a registry's faults and a
//! hostile lock's artifacts come to, and that nothing of a refused download is left.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::deps::digest::{Algo, Hasher};

const HOST: &str = "registry.npmjs.org";
const GOOD: &[u8] = b"the artifact's bytes";

fn digest_of(data: &[u8]) -> Digest {
    let mut h = Hasher::new(Algo::Sha512);
    h.update(data);
    h.finish()
}

/// A registry whose answer to each path is a scripted one; counts the requests it read.
struct StandIn {
    addr: SocketAddr,
    root: CertificateDer<'static>,
    requests: Arc<AtomicUsize>,
}

/// The head and body the stand-in writes for `path` on its `n`th request (from 0).
fn script(path: &str, n: usize) -> (String, Vec<u8>) {
    let ok = |body: &[u8]| {
        (
            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n", body.len()),
            body.to_vec(),
        )
    };
    match path {
        "/flaky.tgz" if n == 0 => ("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n".into(), vec![]),
        "/flaky.tgz" | "/good.tgz" => ok(GOOD),
        "/huge.tgz" => ("HTTP/1.1 200 OK\r\nContent-Length: 2147483649\r\n".into(), vec![0; 4096]),
        // No length said: the limit must hold while it streams.
        "/endless.tgz" => ("HTTP/1.1 200 OK\r\n".into(), vec![7; 3 << 20]),
        "/away.tgz" => ("HTTP/1.1 302 Found\r\nLocation: https://evil.example.org/x.tgz\r\nContent-Length: 0\r\n".into(), vec![]),
        "/gone.tgz" => ("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n".into(), vec![]),
        _ => ok(b"not what any lock pins"),
    }
}

async fn stand_in() -> StandIn {
    let cert = rcgen::generate_simple_self_signed(vec![HOST.to_string()]).unwrap();
    let root = cert.cert.der().clone();
    let key = rustls::pki_types::PrivateKeyDer::try_from(cert.signing_key.serialize_der()).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![root.clone()], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(AtomicUsize::new(0));
    let seen: Arc<std::sync::Mutex<HashMap<String, usize>>> = Default::default();
    let counter = requests.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, counter, seen) = (acceptor.clone(), counter.clone(), seen.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if tls.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                counter.fetch_add(1, Ordering::SeqCst);
                let text = String::from_utf8_lossy(&head).into_owned();
                let path = text.split(' ').nth(1).unwrap_or("/").to_string();
                let n = {
                    let mut seen = seen.lock().unwrap();
                    let n = seen.entry(path.clone()).or_insert(0);
                    *n += 1;
                    *n - 1
                };
                let (status, body) = script(&path, n);
                let _ = tls
                    .write_all(format!("{status}Connection: close\r\n\r\n").as_bytes())
                    .await;
                let _ = tls.write_all(&body).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    StandIn {
        addr,
        root,
        requests,
    }
}

fn fetcher(stand_in: &StandIn, max_artifact: u64) -> Fetcher {
    let upstreams = Upstreams {
        addresses: HashMap::from([(HOST.to_string(), stand_in.addr)]),
        roots: vec![stand_in.root.clone()],
    };
    Fetcher::new(max_artifact, &upstreams).unwrap()
}

fn url(path: &str) -> RegistryUrl {
    RegistryUrl::parse(&format!("https://{HOST}{path}")).unwrap()
}

/// Nothing of a download outside the objects it verified: no object, no temporary file.
fn objects_and_tmp(state: &std::path::Path) -> (usize, usize) {
    let count = |dir: std::path::PathBuf| walk(&dir).into_iter().filter(|p| p.is_file()).count();
    (
        count(state.join("deps/objects")),
        count(state.join("deps/tmp")),
    )
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}

#[tokio::test]
async fn a_passing_fault_is_tried_again_and_the_artifact_stored() {
    let registry = stand_in().await;
    let state = tempfile::tempdir().unwrap();
    let cache = DepCache::open(state.path()).unwrap();
    let got = fetcher(&registry, 1 << 20)
        .artifact(&cache, &url("/flaky.tgz"), &digest_of(GOOD))
        .await
        .unwrap();
    assert_eq!(got, Fetched::Stored(GOOD.len() as u64));
    assert_eq!(
        registry.requests.load(Ordering::SeqCst),
        2,
        "the 503, then the artifact"
    );
    assert_eq!(objects_and_tmp(state.path()), (1, 0));
}

#[tokio::test]
async fn refused_downloads_are_named_and_leave_nothing() {
    let registry = stand_in().await;
    let state = tempfile::tempdir().unwrap();
    let cache = DepCache::open(state.path()).unwrap();
    let fetcher = fetcher(&registry, 1 << 20);
    let cases = [
        ("/huge.tgz", "larger than the 1048576 bytes"),
        ("/endless.tgz", "larger than the 1048576 bytes"),
        ("/away.tgz", "redirected off the fixed registries"),
        ("/gone.tgz", "the registry answered 404"),
        ("/wrong.tgz", "not the sha512-"),
    ];
    for (path, says) in cases {
        let err = fetcher
            .artifact(&cache, &url(path), &digest_of(GOOD))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains(says), "{path}: {err}");
        assert!(err.contains(path), "the address is named: {err}");
        assert_eq!(objects_and_tmp(state.path()), (0, 0), "{path}");
    }
    // The control: the same fetcher stores the artifact its lock pins.
    let got = fetcher
        .artifact(&cache, &url("/good.tgz"), &digest_of(GOOD))
        .await
        .unwrap();
    assert_eq!(got, Fetched::Stored(GOOD.len() as u64));
    assert_eq!(objects_and_tmp(state.path()), (1, 0));
}

#[test]
fn an_address_off_the_fixed_registries_is_never_a_fetch() {
    for bad in [
        "https://evil.example.org/x.tgz",
        "http://registry.npmjs.org/x.tgz",
        "https://registry.npmjs.org.evil.example/x.tgz",
        "https://registry.npmjs.org/a/../../x.tgz",
    ] {
        assert!(RegistryUrl::parse(bad).is_err(), "{bad}");
    }
}
