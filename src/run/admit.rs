//! What refuses a job before anything is fetched: an account the config does not have or
//! that is for another agent or whose files are missing or bad, an untrusted revision the config does not allow, a secret the
//! sandbox cannot hide, a host that is not ready, a disk below the reserve.

use super::outcome::Stop;
use super::Runner;
use crate::config::Account;
use crate::job::{AgentKind, Job, Trust};
use crate::preflight;
use crate::sandbox::gvisor::Isolation;

/// How long host checks that passed stand for the job after them: a caller's that checked
/// just before the runner started it (`run`), not a later job's.
const HOST_CHECK_FRESH: std::time::Duration = std::time::Duration::from_secs(2);

/// Host checks that passed, for one agent's jobs, and when.
#[derive(Debug, Clone, Copy)]
pub(super) struct HostChecked {
    pub agent: AgentKind,
    /// Nix's check was among them.
    pub nix: bool,
    pub at: std::time::Instant,
}

impl HostChecked {
    /// Whether these checks are the ones `job` needs (`nix`: with Nix's), and still fresh.
    fn covers(&self, job: &Job, nix: bool) -> bool {
        self.agent == job.agent && (self.nix || !nix) && self.at.elapsed() < HOST_CHECK_FRESH
    }
}

impl Runner {
    /// The account `job` runs on, or why the runner refuses it.
    pub(super) fn admit(&self, job: &Job) -> Result<&Account, Stop> {
        let Some(account) = self.config.accounts.get(&job.account) else {
            return Err(Stop::refused(format!(
                "unknown account {:?}: it is not in the runner's config",
                job.account
            )));
        };
        if account.agent() != job.agent {
            return Err(Stop::refused(format!(
                "account {:?} is for {}, but the job asks for {}",
                job.account,
                account.agent().name(),
                job.agent.name()
            )));
        }
        if job.trust == Trust::Untrusted && !self.config.allow_untrusted {
            return Err(Stop::refused(
                "untrusted revisions are refused. Set allow_untrusted in the config to run \
                 them with no network, and their devShell built inside the job's boundary \
                 from substitutes and sandboxed builds only"
                    .into(),
            ));
        }
        // Before anything is fetched: a secret the sandbox cannot hide refuses every job.
        if let Err(e) = self.private_files() {
            return Err(Stop::refused(e.to_string()));
        }
        // Before anything is fetched or built: the files a job's open would read.
        crate::gateway::account_check::check(&job.account, account)
            .map_err(|e| Stop::refused(e.to_string()))?;
        // Untrusted revisions get their devShell too where Nix runs in the job's boundary.
        let needs_nix = job.trust == Trust::Trusted || cfg!(target_os = "linux");
        if !self.host_checked.is_some_and(|c| c.covers(job, needs_nix)) {
            let checks = preflight::checks_for(job.agent, needs_nix);
            if let Some(missing) = preflight::refusal(&checks) {
                return Err(Stop::refused(format!("host not ready: {missing}")));
            }
        }
        self.room_to_start()
            .map_err(|e| Stop::refused(e.to_string()))?;
        Ok(account)
    }

    /// A trust level set to run on gVisor where runsc cannot run refuses its jobs: never the
    /// host's kernel in its place.
    pub(super) async fn admit_isolation(&self, job: &Job) -> Result<(), Stop> {
        let isolation = self.config.isolation.for_trust(job.trust);
        if isolation != Isolation::Gvisor {
            return Ok(());
        }
        let probe = self.gvisor().await;
        match &probe.fails {
            None => Ok(()),
            Some(why) => Err(Stop::refused(format!(
                "isolation.{} is gvisor, and gVisor cannot run here: {why}. Install runsc \
                 (0.0~20240729 or later: bookworm-backports, trixie) or set isolation.{} to \
                 \"namespace\"",
                job.trust.name(),
                job.trust.name()
            ))),
        }
    }
}
