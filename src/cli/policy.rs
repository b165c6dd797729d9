//! `quest-runner policy`: the sandbox policy a job would run under, and its rendering for the
//! job's agent, printed for audit before anything runs.

use super::{job_from, out, Context, Failure, JobArgs};
use crate::config::Account;
use crate::job::Trust;
use crate::workspace::JobLayout;

pub(super) fn policy(ctx: Context, args: JobArgs) -> Result<(), Failure> {
    let job = job_from(args, &ctx)?;
    let runner = crate::run::Runner::new(ctx.state.clone(), ctx.config.clone())
        .with_config_file(ctx.config_path.clone());
    // The paths a run would use; the temp dirs' random suffix is shown as XXXXXX.
    let paths = JobLayout::of(&ctx.state, &job.id, &job.repo)
        .planned(runner.temp_parent(), job.trust == Trust::Trusted);
    // What the revision's locks give the job, when the shared clone has the revision
    // already (this command fetches nothing).
    let locks = read_locks(&runner, &paths.bare_clone, &job.rev);
    let dep_hosts: Vec<String> = match &locks {
        Ok(plan) => plan.hosts().into_iter().collect(),
        Err(_) => Vec::new(),
    };
    let policy = runner.policy(&job, &paths, &dep_hosts)?;
    // Both agents' commands run in the job's srt sandbox; Claude Code's settings confine its
    // file tools.
    let srt = crate::binaries::find(crate::binaries::Tool::Srt).ok();
    let package = srt.as_deref().and_then(crate::binaries::srt_package_dir);
    let binary = crate::jobshell::runner_binary()
        .unwrap_or_else(|_| std::path::PathBuf::from("quest-runner"));
    let srt_settings = crate::agent::commands::srt_settings(
        &policy,
        package.as_deref(),
        &binary,
        &crate::agent::commands::SrtPrograms::find(),
    );
    let rendered = match ctx.config.accounts.get(&job.account) {
        Some(Account::Claude(_)) => {
            let token = crate::agent::claude::token_file(&paths.job_dir);
            serde_json::json!({
                "claude_settings": crate::agent::claude::settings(&policy, &token),
                "srt_settings": srt_settings,
            })
        }
        Some(Account::Opencode(_)) => serde_json::json!({"srt_settings": srt_settings}),
        None => serde_json::json!(null),
    };
    let store = crate::devshell::confine::client_store();
    // What the devShell's nix reaches: with "proxy", the job's allowed hosts through its
    // proxy (none for a policy that reaches no host).
    let network = ctx.config.nix.network;
    let nix_hosts = match network {
        crate::config::NixNetwork::Proxy => serde_json::json!(policy.allowed_hosts),
        crate::config::NixNetwork::Host if job.trust == Trust::Trusted => {
            serde_json::json!("the host's network")
        }
        _ => serde_json::json!([]),
    };
    let nix = serde_json::json!({
        "confined": policy.confine_agent,
        "store": store,
        "what_is_confined": crate::devshell::confine::describe(&store),
        "network": network,
        "reaches": nix_hosts,
    });
    let dependencies = match &locks {
        Ok(plan) => plan.describe(),
        Err(why) => serde_json::json!(why),
    };
    let isolation = isolation_shown(&policy);
    let shown = serde_json::json!({
        "job": job, "policy": policy, "rendered": rendered, "devshell_nix": nix,
        "dependencies": dependencies, "isolation": isolation,
    });
    out(serde_json::to_string_pretty(&shown).unwrap_or_default())
}

/// The locks of `rev` in the shared clone `repo`, or why they cannot be read now.
fn read_locks(
    runner: &crate::run::Runner,
    repo: &std::path::Path,
    rev: &str,
) -> Result<crate::deps::Plan, String> {
    let git_dir = crate::git_objects::git_dir(repo);
    let fetched = git_dir
        .as_deref()
        .is_some_and(|d| crate::git_objects::has_object(d, rev).unwrap_or(false));
    if !fetched {
        return Err(format!(
            "not known yet: the shared clone does not have {rev} (a job of it fetches it)"
        ));
    }
    if runner.deps().is_none() {
        return Err("the runner has no dependency cache (see the log)".into());
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(crate::deps::prepare::plan(repo, rev))
        .map_err(|e| format!("reading the revision's locks: {e}"))
}

/// Whether the commands' kernel is gVisor's, and whether runsc runs here to give it.
fn isolation_shown(policy: &crate::sandbox::SandboxPolicy) -> serde_json::Value {
    match policy.isolation {
        crate::sandbox::gvisor::Isolation::Namespace => serde_json::json!({
            "commands": "namespace",
            "kernel": "the host's, behind srt's namespaces and seccomp filter",
        }),
        crate::sandbox::gvisor::Isolation::Gvisor => {
            let probe = super::runtime::runtime(None)
                .map_err(|f| f.message)
                .map(|rt| rt.block_on(crate::sandbox::gvisor::probe()));
            serde_json::json!({
                "commands": "gvisor",
                "kernel": "gVisor's (runsc, systrap), inside srt's sandbox",
                "runsc": match &probe {
                    Ok(p) => serde_json::json!(p),
                    Err(e) => serde_json::json!(e),
                },
                "refused": probe.as_ref().map_or(true, |p| !p.works()),
            })
        }
    }
}
