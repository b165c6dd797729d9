//! `quest-runner run`: one job, in the foreground, until it ends or the runner gets SIGINT or
//! SIGTERM; its result on stdout and its outcome as the exit code.

use super::{job_from, out, runtime, Context, Failure, JobArgs};
use crate::exit::Exit;

pub(super) fn run_job(ctx: Context, args: JobArgs) -> Result<(), Failure> {
    use crate::run::{Cancel, Runner};
    let job = job_from(args, &ctx)?;
    if job.trust == crate::job::Trust::Trusted {
        // The job's CA key, made while the host is checked and the runner set up: the runner
        // asks for it again (a no-op while this one is pending), but only once it runs.
        crate::netproxy::ca::warm_up();
    }
    super::check_account(&ctx, &job.account)?;
    // A host that is not ready is exit 3, as for every command (the runner's own refusal,
    // which `serve` relies on, would make it 4: a refused job).
    let nix = job.trust == crate::job::Trust::Trusted;
    let checks = crate::preflight::checks_for(job.agent, nix);
    if let Some(missing) = crate::preflight::refusal(&checks) {
        return Err(Failure::new(
            Exit::HostNotReady,
            format!("host not ready: {missing}"),
        ));
    }
    let runner = Runner::new(ctx.state, ctx.config)
        .with_config_file(ctx.config_path)
        .with_host_checked(job.agent, nix);
    let runtime = runtime::runtime(Some(2))?;
    let result = runtime.block_on(async {
        let stop = runtime::stop_signal()?;
        let cancel = async move {
            match stop.await {
                runtime::Stop::Interrupt => Cancel::Interrupt,
                runtime::Stop::Terminate => Cancel::Terminate,
            }
        };
        let span = tracing::info_span!("job", id = %job.id);
        Ok::<_, Failure>(tracing::Instrument::instrument(runner.run(&job, cancel), span).await)
    })?;
    // The result is in `<state>/jobs/<id>/result.json` already (when the job got that far):
    // stdout that cannot be written (a full disk, a closed pipe) changes nothing about the
    // job, so it is reported and the exit code stays the job's.
    let printed = out(super::json(&result));
    if let Err(e) = printed.or_else(|e| {
        if e.code == Exit::Success {
            Ok(())
        } else {
            Err(e)
        }
    }) {
        let kept = crate::workspace::job_root(runner.state(), &result.job_id).join("result.json");
        let kept = match kept.is_file() {
            true => format!("the result is kept in {}", kept.display()),
            false => "the job got no directory, so no result file".to_string(),
        };
        use std::io::Write;
        let message = crate::util::text::shown(&e.message);
        let _ = writeln!(std::io::stderr(), "quest-runner: {message}; {kept}");
    }
    match result.outcome.exit() {
        Exit::Success => Ok(()),
        code => Err(Failure::new(code, result.message.unwrap_or_default())),
    }
}
