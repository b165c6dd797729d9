//! The runner's model gateway as a target: a command with a live token of the job's account
//! tries to spend it, directly and through the sandbox's proxy.

use super::{shell, Attempt, Detect, Rule, Targets};

/// Only when the run has a gateway (`Targets::gateway`).
pub(super) fn gateway_attempts(t: &Targets, token: &str) -> Vec<Attempt> {
    let Some((gw, live)) = &t.gateway else {
        return Vec::new();
    };
    // A model request on the account's bill, with a valid token: unconfined, it reaches
    // the gateway (in the agent's network namespace) and the model gets the real key.
    let request = |tag: &str| {
        format!(
            "-o /dev/null -w 'status=%{{http_code}}' -H 'x-api-key: {live}' -H 'content-type: application/json' -d '{{\"model\":\"scripted\",\"max_tokens\":1,\"messages\":[]}}' 'http://127.0.0.1:{gw}/v1/messages?qr={tag}'"
        )
    };
    vec![
        shell(
            "gateway-direct",
            "spend the account through the runner's model gateway, directly (a live token)".into(),
            Rule::Gateway,
            format!(
                "curl -sS -m 5 --noproxy '*' {}",
                request(&format!("gw-direct-{token}"))
            ),
            Detect::ServerGot(format!("/v1/messages?qr=gw-direct-{token}")),
        ),
        shell(
            "gateway-proxy",
            "spend the account through the runner's model gateway, via the sandbox's proxy".into(),
            Rule::Gateway,
            format!(
                "NO_PROXY= no_proxy= curl -sS -m 5 -x \"${{HTTPS_PROXY:-$HTTP_PROXY}}\" {}",
                request(&format!("gw-proxy-{token}"))
            ),
            Detect::ServerGot(format!("/v1/messages?qr=gw-proxy-{token}")),
        ),
    ]
}
