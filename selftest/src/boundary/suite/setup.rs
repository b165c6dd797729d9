//! The runner's config for a suite run: a scripted account the model stand-in answers, and
//! the checkout the unconfined controls use.

use super::SuiteConfig;
use crate::boundary::fixture::Fixture;
use crate::model_server::ModelServer;
use quest_runner::config::{Account, ClaudeAccount, Config, OpencodeAccount};
use quest_runner::job::{AgentKind, Trust};
use std::path::PathBuf;

pub(super) fn suite_config(
    fixture: &Fixture,
    server: &ModelServer,
    cfg: &SuiteConfig,
) -> Result<Config, String> {
    let mut config = scripted_config(
        cfg.agent,
        &fixture.account_file,
        server,
        cfg.trust == Trust::Untrusted,
    );
    config.isolation.trusted = cfg.isolation;
    config.isolation.untrusted = cfg.isolation;
    Ok(config)
}

/// A runner config with one account, `main`, for `agent`, whose model is the scripted one
/// and whose credential is `account_file` (see [`crate::boundary::fixture::write_scripted_account`]).
pub(crate) fn scripted_config(
    agent: AgentKind,
    account_file: &std::path::Path,
    server: &ModelServer,
    allow_untrusted: bool,
) -> Config {
    let mut config = Config::default();
    config
        .nix
        .options
        .insert("substituters".into(), String::new());
    config.allow_untrusted = allow_untrusted;
    let account = match agent {
        AgentKind::Claude => Account::Claude(ClaudeAccount {
            api_key_file: Some(account_file.to_path_buf()),
            // The runner's gateway forwards there, from the host's namespace.
            base_url: Some(server.upstream_url()),
            ..Default::default()
        }),
        AgentKind::Opencode => Account::Opencode(OpencodeAccount {
            auth_file: Some(account_file.to_path_buf()),
            config: Some(serde_json::json!({
                "provider": {"scripted": {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "scripted",
                    "options": {"baseURL": format!("{}/v1", server.upstream_url())},
                    "models": {"scripted": {"name": "scripted", "tool_call": true}},
                }},
            })),
            model: Some("scripted/scripted".into()),
            budget: None,
        }),
    };
    config.accounts.insert("main".into(), account);
    config
}

/// Where the unconfined controls run: a worktree of the same bare clone.
pub(super) fn control_checkout(fixture: &Fixture) -> PathBuf {
    fixture.path().join("control-checkout")
}
