//! Pushing a finished job's commits to a branch under the operator's namespace: from the
//! shared clone's `refs/quest/jobs/<id>`, by the hardened host git, with only the remote's own
//! transport allowed and the credential read from its file when git asks (`remote.rs`).
//!
//! The branch is created, never forced over: the push carries a lease that the branch does
//! not exist yet (or, for a retry, is still at the commit this runner pushed there), so a
//! branch someone else made under the namespace is left as it is and the push says so. A
//! failed push changes nothing here: the commits stay in the shared clone, and
//! `quest-runner push <id>` tries again.

use serde::{Deserialize, Serialize};

use super::remote::{access, redacted, Transport};
use super::{JobWork, DELIVER_GIT_LIMIT};
use crate::config::PushConfig;
use crate::job::Trust;

/// The user name sent with an HTTPS token when the config names none (GitHub's and Gitea's
/// tokens take any name; this is the one GitHub documents).
pub const DEFAULT_TOKEN_USER: &str = "x-access-token";

/// A push's outcome, as the job's result (`push`) and `show` record it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PushRecord {
    /// The remote, without any password its URL holds.
    pub remote: String,
    /// The full ref pushed to (`refs/heads/<namespace>/...`).
    pub branch: String,
    /// The commit the branch was to point at: the job's head.
    pub commit: String,
    pub pushed: bool,
    /// Why it was not pushed (the commits are still in the shared clone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Pushes `work` as `config` says, and says how it went. `previous` is the job's last push,
/// whose branch this runner made (a retry may find it there).
pub async fn push_job(
    work: &JobWork,
    config: &PushConfig,
    previous: Option<&PushRecord>,
) -> PushRecord {
    let remote = config.remote.clone().unwrap_or_else(|| work.repo.clone());
    let mut record = PushRecord {
        remote: redacted(&remote),
        branch: String::new(),
        commit: work.head.clone(),
        pushed: false,
        error: None,
    };
    match try_push(work, config, &remote, previous, &mut record).await {
        Ok(()) => {
            record.pushed = true;
            tracing::info!(job = %work.job_id, remote = %record.remote, branch = %record.branch, "pushed");
        }
        Err(why) => {
            // The URL as given may hold a token: never in the result or the log.
            let why = why.replace(&remote, &record.remote);
            tracing::warn!(job = %work.job_id, remote = %record.remote, "push failed: {why}");
            record.error = Some(why);
        }
    }
    record
}

async fn try_push(
    work: &JobWork,
    config: &PushConfig,
    remote: &str,
    previous: Option<&PushRecord>,
    record: &mut PushRecord,
) -> Result<(), String> {
    record.branch = config.branch_ref(&work.job_id)?;
    let transport = admissible(work, config, remote)?;
    let git = work.checked_git().await.map_err(|e| e.to_string())?;
    // The lease: the branch is absent, or still at what this runner pushed there.
    let expected = previous
        .filter(|p| p.pushed && p.branch == record.branch && p.remote == record.remote)
        .map_or(String::new(), |p| p.commit.clone());
    let user = config.username.as_deref().unwrap_or(DEFAULT_TOKEN_USER);
    let access = access(transport, config.credential_file.as_deref(), user);
    let mut args: Vec<String> = Vec::new();
    for setting in &access.config {
        args.extend(["-c".to_string(), setting.clone()]);
    }
    args.extend([
        "push".to_string(),
        "--porcelain".into(),
        "--no-verify".into(),
        "--no-follow-tags".into(),
        "--no-recurse-submodules".into(),
        format!("--force-with-lease={}:{expected}", record.branch),
        "--".into(),
        remote.to_string(),
        format!("{}:{}", work.refname(), record.branch),
    ]);
    let mut cmd = git.command(&args);
    cmd.envs(access.env.iter().map(|(k, v)| (k, v)));
    for name in crate::git::TLS_TRUST_ENV {
        if let Some(value) = std::env::var_os(name) {
            cmd.env(name, value);
        }
    }
    let out = tokio::time::timeout(
        DELIVER_GIT_LIMIT,
        crate::process::run_captured_upto(cmd, "git", 64 << 10),
    )
    .await
    .map_err(|_| {
        format!(
            "git push did not finish within {}s (stopped)",
            DELIVER_GIT_LIMIT.as_secs()
        )
    })?
    .map_err(|e| format!("could not run git push: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    // `--porcelain` names the refused ref and why on stdout ("! src:dst [rejected] (stale
    // info)"); stderr has git's own error.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let refused: Vec<&str> = stdout.lines().filter(|l| l.starts_with('!')).collect();
    let mut why = out.error_message();
    if !refused.is_empty() {
        why = format!("{} ({why})", refused.join("; "));
        if refused.iter().any(|l| l.contains("stale info")) {
            why.push_str(": the branch exists and this runner did not push it; not overwritten");
        }
    }
    Err(format!("git push to {remote} failed: {why}"))
}

/// The refusals made before git runs: an untrusted job where the settings do not allow one,
/// a remote of another transport, a credential over plain http or one that cannot be read.
fn admissible(work: &JobWork, config: &PushConfig, remote: &str) -> Result<Transport, String> {
    if work.trust == Trust::Untrusted && !config.untrusted {
        return Err(
            "the job is untrusted and its repository's push settings do not allow untrusted \
             jobs (push.<repo>.untrusted); its commits stay in the shared clone"
                .into(),
        );
    }
    let transport = Transport::of(remote).ok_or_else(|| {
        format!(
            "{:?} is not a remote the runner pushes to",
            redacted(remote)
        )
    })?;
    if transport == Transport::Http && config.credential_file.is_some() {
        return Err(format!(
            "{} is plain http: the push credential is sent over https or ssh only",
            redacted(remote)
        ));
    }
    if let Some(file) = &config.credential_file {
        // Opened for the check only: git's SSH or helper reads it again when it asks.
        std::fs::File::open(file)
            .map_err(|e| format!("the push credential {}: {e}", file.display()))?;
    }
    Ok(transport)
}
