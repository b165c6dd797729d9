//! The `queued` job event: `submit` hands it to a helper of its own (`deliver-event`, not
//! listed in `--help`) so that queueing a job never waits on a webhook; the helper delivers
//! it with the tries `serve` gives its events, then exits.

use super::{Context, Failure};
use crate::exit::Exit;
use crate::job::Job;
use crate::serve::events;

/// After `job` is queued: its event to the config's receivers, if it names any. A helper
/// that cannot start is logged, never `submit`'s failure: the job is queued.
pub(super) fn queued(ctx: &Context, job: &Job) {
    if !ctx.config.events.is_on() {
        return;
    }
    let binary = match crate::jobshell::runner_binary() {
        Ok(binary) => binary,
        Err(e) => {
            tracing::warn!(job = %job.id, "the queued event is not sent: {e}");
            return;
        }
    };
    let argv: Vec<std::ffi::OsString> = vec![
        binary.into(),
        "--state-dir".into(),
        ctx.state.root().into(),
        "--config".into(),
        ctx.config_path.clone().into(),
        "deliver-event".into(),
    ];
    let log = ctx.state.root().join("events.log");
    if let Err(e) = events::deliver_detached(&argv, &events::Event::queued(job), &log) {
        tracing::warn!(job = %job.id, "the queued event is not sent: {e}");
    }
}

/// `quest-runner deliver-event`: the event on stdin to every receiver the config names.
pub(super) fn deliver_event(ctx: &Context) -> Result<(), Failure> {
    let mut body = Vec::new();
    std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut body)
        .map_err(|e| Failure::new(Exit::BadInput, format!("reading the event: {e}")))?;
    super::runtime::runtime(None)?
        .block_on(events::deliver_now(&ctx.config.events, body))
        .map_err(|e| Failure::new(Exit::BadInput, e))
}
