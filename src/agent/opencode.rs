//! opencode: no sandbox of its own, so every command of its bash tool runs under srt with
//! settings rendered from the same policy, through a shell wrapper that also sources the
//! devShell. (Filled in with the wrapper, plugin and srt settings.)

use super::{AgentError, AgentInputs, Launch};
use crate::config::OpencodeAccount;

pub fn plan(inputs: &AgentInputs<'_>, _account: &OpencodeAccount) -> Result<Launch, AgentError> {
    let _ = inputs.srt.ok_or(AgentError::NoSrt)?;
    Err(AgentError::Unsupported(
        "the opencode adapter is not built yet",
    ))
}

/// srt's settings for the policy. (Completed with the opencode adapter.)
pub fn srt_settings(policy: &crate::sandbox::SandboxPolicy) -> serde_json::Value {
    serde_json::json!({
        "network": {"allowedDomains": policy.allowed_hosts, "deniedDomains": []},
        "filesystem": {
            "denyRead": policy.deny_read,
            "allowRead": policy.allow_read,
            "allowWrite": policy.allow_write,
            "denyWrite": policy.deny_write,
        },
    })
}
