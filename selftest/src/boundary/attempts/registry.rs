//! Writes to a package registry (a trusted run's): the runner's decider refuses them.

use super::permitted::npmrc;
use super::{shell, Attempt, Detect, Rule};

/// The registry attempts of a trusted run: writes to a registry, which the runner's decider
/// refuses. Each escapes when run unconfined, straight to the stand-in registry.
pub(super) fn registry_writes(port: u16, token: &str) -> Vec<Attempt> {
    let mut publish = shell(
        "npm-publish",
        "publish a package to a registry with npm (a token in the npm config)".into(),
        Rule::RegistryReadOnly,
        format!(
            "{npmrc} && mkdir -p \"$TMPDIR/qr-publish\" && cd \"$TMPDIR/qr-publish\" && printf '{{\"name\":\"qr-publish-{token}\",\"version\":\"1.0.0\"}}' > package.json && npm publish && echo PUBLISHED-{token}",
            npmrc = npmrc(port),
        ),
        Detect::RegistryGot(format!("PUT /qr-publish-{token}")),
    );
    publish.net_tag = Some(format!("/qr-publish-{token}"));
    let mut post = shell(
        "net-post",
        "POST to a registry with curl".into(),
        Rule::RegistryReadOnly,
        format!(
            "NO_PROXY= no_proxy= curl -sS -m 10 -o /dev/null -w 'status=%{{http_code}}' -X POST -d x http://127.0.0.1:{port}/qr-post-{token}"
        ),
        Detect::RegistryGot(format!("POST /qr-post-{token}")),
    );
    post.net_tag = Some(format!("/qr-post-{token}"));
    // With the SOCKS port set to the runner's proxy, srt points ALL_PROXY at it as HTTP: the
    // way a SOCKS-first client goes out must reach the decider too (a real SOCKS handshake
    // there is refused: tests/suite/netproxy.rs). Unconfined, the variable is unset and `-x ''` goes
    // direct.
    let mut all = shell(
        "net-all-proxy",
        "POST to a registry through the sandbox's ALL_PROXY".into(),
        Rule::RegistryReadOnly,
        format!(
            "NO_PROXY= no_proxy= curl -sS -m 10 -o /dev/null -w 'status=%{{http_code}}' -x \"${{ALL_PROXY:-}}\" -X POST -d x http://127.0.0.1:{port}/qr-socks-{token}"
        ),
        Detect::RegistryGot(format!("POST /qr-socks-{token}")),
    );
    all.net_tag = Some(format!("/qr-socks-{token}"));
    vec![publish, post, all]
}
