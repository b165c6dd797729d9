//! The job's way to its model: the runner's one gateway, started with the first job that
//! needs it, and a grant per job whose token is worthless once the grant is dropped.

use super::error::ModelAccessError;
use super::Runner;
use crate::agent;
use crate::gateway::GatewayError;
use crate::job::Job;
use crate::workspace;

/// A job's open grant on the gateway, and what its agent is told to reach it with.
pub(super) type ModelAccess = (crate::gateway::JobGrant, agent::GatewayAccess);

impl Runner {
    /// The runner's model gateway, started on first use.
    pub async fn gateway(&self) -> Result<&crate::gateway::Gateway, GatewayError> {
        self.gateway
            .get_or_try_init(|| async {
                let listener = match &self.hooks.gateway_listener {
                    Some(bind) => bind(),
                    None => std::net::TcpListener::bind("127.0.0.1:0"),
                }
                .map_err(GatewayError::Bind)?;
                crate::gateway::Gateway::start(listener, self.gateway_options.clone())
            })
            .await
    }

    /// Opens the job's way to its model through the gateway, or `None` for an account whose
    /// agent holds its login itself (see [`crate::gateway::account`]).
    pub(super) async fn open_model_access(
        &self,
        job: &Job,
        account: &crate::config::Account,
    ) -> Result<Option<ModelAccess>, ModelAccessError> {
        use crate::config::Account;
        use crate::gateway::{account::route, budget::Budget, JobSpec, Route};
        let auth_json = match account {
            Account::Opencode(a) => a.auth_file.as_ref().and_then(|f| {
                let text = zeroize::Zeroizing::new(std::fs::read_to_string(f).ok()?);
                serde_json::from_str::<serde_json::Value>(&text).ok()
            }),
            Account::Claude(_) => None,
        };
        let (upstream, secret, provider) = match route(&job.account, account, auth_json.as_ref())? {
            Route::Gateway {
                upstream,
                secret,
                provider,
            } => (upstream, secret, provider),
            Route::Direct { why } => {
                tracing::info!(job = %job.id, account = %job.account, "the agent holds the account's login itself: {why}");
                return Ok(None);
            }
        };
        let gateway = self.gateway().await?;
        let credential =
            gateway
                .credential(&secret)
                .map_err(|source| ModelAccessError::Credential {
                    account: job.account.clone(),
                    source,
                })?;
        let grant = gateway.open(JobSpec {
            job_id: job.id.clone(),
            account: job.account.clone(),
            upstream,
            credential,
            token_limit: self.config.limits.tokens,
            budget: account
                .budget()
                .map(|b| Budget::new(self.state.root(), &job.account, b)),
            log: workspace::job_root(&self.state, &job.id).join("model.log"),
        })?;
        let access = agent::GatewayAccess {
            port: gateway.addr.port(),
            base_url: grant.base_url.clone(),
            token: grant.token.clone(),
            provider,
        };
        Ok(Some((grant, access)))
    }
}
