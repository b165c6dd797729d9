//! The model gateway's controls: the job's requests reached the model only through it, and
//! its tokens stop working when the job ends.

use super::evidence::JobEvidence;
use crate::boundary::fixture::Fixture;
use crate::boundary::report::ControlReport;
use crate::model_server::{Exchange, ModelServer};
use quest_runner::config::Config;
use std::path::Path;
use std::time::Duration;

/// A grant of the runner's gateway for the account the job runs under, held by the suite:
/// its live token is what the gateway attempts use, and what their unconfined controls spend.
pub(super) fn open_control_grant(
    gateway: &quest_runner::gateway::Gateway,
    config: &Config,
    fixture: &Fixture,
) -> Result<quest_runner::gateway::JobGrant, String> {
    use quest_runner::gateway::{account::route, JobSpec, Route};
    let account = config.accounts.get("main").ok_or("no account main")?;
    let auth_json = std::fs::read_to_string(&fixture.account_file)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let Route::Gateway {
        upstream, secret, ..
    } = route("main", account, auth_json.as_ref()).map_err(|e| e.to_string())?
    else {
        return Err("the suite's account is not served by the gateway".into());
    };
    gateway
        .open(JobSpec {
            job_id: format!("boundary-control-{}", fixture.token),
            account: "main".into(),
            upstream,
            credential: gateway.credential(&secret).map_err(|e| e.to_string())?,
            token_limit: None,
            budget: None,
            log: fixture.path().join("control-model.log"),
        })
        .map_err(|e| e.to_string())
}

/// One raw request to the gateway from where the confined agent is; its status code.
pub(super) fn gateway_status(
    server: &ModelServer,
    port: u16,
    token: &str,
    tag: &str,
) -> Result<u16, String> {
    use std::io::{Read, Write};
    let mut stream = server
        .connect_loopback(port)
        .map_err(|e| format!("connecting to the gateway: {e}"))?;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let body = r#"{"model":"scripted","max_tokens":1,"messages":[]}"#;
    let request = format!(
        "POST /v1/messages?qr={tag} HTTP/1.1\r\nhost: 127.0.0.1\r\nx-api-key: {token}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).map_err(|e| e.to_string())?;
    String::from_utf8_lossy(&head[9..12])
        .parse()
        .map_err(|_| "no status line".to_string())
}

/// The job's gateway token, as the runner rendered it into the agent's private files.
pub(super) fn job_token(job_root: &std::path::Path) -> Option<String> {
    let runner = job_root.join("runner");
    if let Ok(t) = std::fs::read_to_string(quest_runner::agent::claude::token_file(&runner)) {
        return Some(t.trim().to_string());
    }
    let config = std::fs::read_to_string(runner.join("opencode/config/opencode/opencode.json"));
    let v: serde_json::Value = serde_json::from_str(&config.ok()?).ok()?;
    v["provider"]["scripted"]["options"]["apiKey"]
        .as_str()
        .map(str::to_string)
}

/// The gateway's own claims: every model request the scripted model got during the job
/// carried the account's real key and came in through the gateway; the job's use is in its
/// result and its model log (which holds no secret); a job's token is worthless once the job
/// ended, while a live one (the control grant's) is not.
pub(super) fn gateway_controls(
    ev: JobEvidence<'_>,
    during_job: &[Exchange],
    job_root: &Path,
    (gateway, control_grant): (
        &quest_runner::gateway::Gateway,
        Option<quest_runner::gateway::JobGrant>,
    ),
    controls: &mut Vec<ControlReport>,
) {
    // Attempts' own requests are judged by their attempts.
    let model: Vec<&Exchange> = during_job
        .iter()
        .filter(|e| !e.path.starts_with("/probe/") && !e.path.contains("qr=gw-"))
        .collect();
    let token = job_token(job_root);
    controls.push(real_key_control(ev, &model));
    controls.push(model_use_control(ev, &model, job_root, token.as_deref()));
    let port = gateway.addr.port();
    controls.push(revocation_control(
        ev,
        port,
        token.as_deref(),
        control_grant,
    ));
}

/// Every model request of the job carried the account's real key, and came in through the
/// gateway (from the host's side, when the model lives in a namespace of its own).
fn real_key_control(ev: JobEvidence<'_>, model: &[&Exchange]) -> ControlReport {
    let secret = &ev.fixture.secrets.account;
    let bad: Vec<String> = model
        .iter()
        .filter(|e| {
            e.key.as_deref() != Some(secret.as_str())
                || (ev.server.host_addr.is_some() && !e.via_host)
        })
        .map(|e| format!("{} {} (via host: {})", e.method, e.path, e.via_host))
        .collect();
    ControlReport::new(
        "every model request carried the real key, through the gateway",
        !model.is_empty() && bad.is_empty(),
        if bad.is_empty() {
            format!("{} requests", model.len())
        } else {
            format!("not: {}", bad.join("; "))
        },
    )
}

/// The job's model use is metered in its result and logged in its `model.log`, which holds
/// neither the account's secret nor the job's `token`.
fn model_use_control(
    ev: JobEvidence<'_>,
    model: &[&Exchange],
    job_root: &Path,
    token: Option<&str>,
) -> ControlReport {
    let (secret, result) = (&ev.fixture.secrets.account, ev.result);
    // Model lists are logged but not metered.
    let metered = model
        .iter()
        .filter(|e| {
            let path = e.path.split('?').next().unwrap_or_default();
            !path.ends_with("/models") && !path.contains("/models/")
        })
        .count();
    let log = std::fs::read_to_string(job_root.join("model.log")).unwrap_or_default();
    let logged = log.lines().filter(|l| l.contains(" 200 model=")).count();
    let usage = result.usage.clone().unwrap_or_default();
    let clean = !log.contains(secret.as_str()) && token.is_some_and(|t| !log.contains(t));
    ControlReport::new(
        "the job's model use is in its result and model.log, without secrets",
        result.usage.is_some()
            && usage.requests as usize == metered
            && logged == model.len()
            && clean,
        format!(
            "usage: {} requests, {} tokens; model.log: {logged} answered lines; {} requests seen; secret or token in the log: {}",
            usage.requests,
            usage.tokens(),
            model.len(),
            !clean
        ),
    )
}

/// The ended job's `token` is refused, the control grant's live one is served, and refused
/// once the grant is dropped (revoked); only the live request reached the model.
fn revocation_control(
    ev: JobEvidence<'_>,
    port: u16,
    token: Option<&str>,
    control_grant: Option<quest_runner::gateway::JobGrant>,
) -> ControlReport {
    let server = ev.server;
    let tag = format!("gw-after-{}", ev.fixture.token);
    let before = server.exchanges().len();
    let ended = token.map(|t| gateway_status(server, port, t, &tag));
    let live = control_grant
        .as_ref()
        .map(|g| gateway_status(server, port, &g.token, &format!("{tag}-live")));
    let revoked_token = control_grant.as_ref().map(|g| g.token.clone());
    drop(control_grant);
    let revoked =
        revoked_token.map(|t| gateway_status(server, port, &t, &format!("{tag}-revoked")));
    let reached: Vec<String> = server.exchanges()[before..]
        .iter()
        .map(|e| e.path.clone())
        .collect();
    let passed = matches!(ended, Some(Ok(401)))
        && matches!(live, Some(Ok(200)))
        && matches!(revoked, Some(Ok(401)))
        && reached == vec![format!("/v1/messages?qr={tag}-live")];
    ControlReport::new(
        "a job's token is worthless after the job ends (a live one is not)",
        passed,
        format!("ended job's token: {ended:?}; live token: {live:?}; after revoking it: {revoked:?}; the model got {reached:?}"),
    )
}
