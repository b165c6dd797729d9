use super::*;

fn rules() -> NetRules {
    NetRules {
        allowed: vec![
            "registry.npmjs.org".into(),
            "git.example.org".into(),
            "*.pkg.example".into(),
            "127.0.0.1:4873".into(),
        ],
        full_access: vec!["git.example.org".into()],
        read_only_methods: vec!["GET".into(), "HEAD".into()],
    }
}

fn req<'a>(method: &'a str, host: &'a str, port: u16) -> Request<'a> {
    Request {
        method,
        host,
        port,
        host_header: None,
        sni: None,
    }
}

#[test]
fn registries_answer_reads_only() {
    let r = rules();
    for m in ["GET", "HEAD"] {
        assert_eq!(
            r.decide(&req(m, "registry.npmjs.org", 443)),
            Decision::Allow
        );
    }
    for m in ["PUT", "POST", "DELETE", "PATCH", "get"] {
        let d = r.decide(&req(m, "registry.npmjs.org", 443));
        assert!(
            matches!(&d, Decision::Deny { status: 403, reason } if reason.starts_with("read_only")),
            "{m}: {d:?}"
        );
    }
}

#[test]
fn full_access_hosts_answer_every_method() {
    let r = rules();
    for m in ["PUT", "POST", "DELETE"] {
        assert_eq!(r.decide(&req(m, "git.example.org", 443)), Decision::Allow);
    }
}

#[test]
fn unlisted_hosts_and_ports_are_refused() {
    let r = rules();
    for (host, port) in [
        ("example.com", 443),
        ("127.0.0.1", 80),
        ("pkg.example", 443),
        ("registry.npmjs.org.evil.com", 443),
    ] {
        let d = r.decide(&req("GET", host, port));
        assert!(
            matches!(&d, Decision::Deny { status: 403, reason } if reason.starts_with("host_not_allowed")),
            "{host}:{port}: {d:?}"
        );
    }
    assert!(r.decide(&req("GET", "127.0.0.1", 4873)).allowed());
    assert!(r.decide(&req("GET", "a.pkg.example", 443)).allowed());
    assert!(r.decide(&req("GET", "Registry.NPMJS.org.", 443)).allowed());
}

#[test]
fn host_tls_name_and_target_must_agree() {
    let r = rules();
    let mut q = req("GET", "registry.npmjs.org", 443);
    q.sni = Some("evil.example");
    assert!(matches!(r.decide(&q), Decision::Deny { status: 421, .. }));
    let mut q = req("GET", "registry.npmjs.org", 443);
    q.host_header = Some("evil.example");
    assert!(matches!(r.decide(&q), Decision::Deny { status: 421, .. }));
    let mut q = req("GET", "127.0.0.1", 4873);
    q.host_header = Some("127.0.0.1:9999");
    assert!(matches!(r.decide(&q), Decision::Deny { status: 421, .. }));
    let mut q = req("GET", "registry.npmjs.org", 443);
    q.host_header = Some("registry.npmjs.org:443");
    q.sni = Some("registry.npmjs.org");
    assert_eq!(r.decide(&q), Decision::Allow);
}

#[test]
fn egress_patterns() {
    assert!(matches("a.b", "a.b", 1));
    assert!(!matches("*.b.c", "b.c", 1));
    assert!(matches("*.b.c", "x.b.c", 1));
    assert!(!matches("*.b.c", "xb.c", 1));
    assert!(matches("h:80", "h", 80));
    assert!(!matches("h:80", "h", 81));
    assert!(matches("[::1]:80", "::1", 80));
}
