//! The async runtime a subcommand runs on, and the signals that stop it: written once for
//! `run`, `serve`, `selftest`, the queue commands and the interruptible ones (`env`, `cache`).

use tokio::runtime::Runtime;
use tokio::signal::unix::{signal, SignalKind};

use super::Failure;
use crate::exit::Exit;

/// A runtime with `threads` workers, or on the calling thread alone when `None`.
pub fn runtime(threads: Option<usize>) -> Result<Runtime, Failure> {
    let mut builder = match threads {
        None => tokio::runtime::Builder::new_current_thread(),
        Some(n) => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(n);
            b
        }
    };
    builder
        .enable_all()
        .build()
        .map_err(|e| Failure::new(Exit::Failed, format!("starting the async runtime: {e}")))
}

/// Which of the stopping signals came first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    Interrupt,
    Terminate,
}

/// Waits for SIGINT or SIGTERM, whichever comes first. The handlers are installed when this
/// is called (inside the runtime), so a signal between then and the first poll is not lost.
pub(crate) fn stop_signal() -> Result<impl std::future::Future<Output = Stop>, Failure> {
    let mut sigint = signal(SignalKind::interrupt())
        .map_err(|e| Failure::new(Exit::Failed, format!("installing a SIGINT handler: {e}")))?;
    let mut sigterm = signal(SignalKind::terminate())
        .map_err(|e| Failure::new(Exit::Failed, format!("installing a SIGTERM handler: {e}")))?;
    Ok(async move {
        tokio::select! {
            _ = sigint.recv() => Stop::Interrupt,
            _ = sigterm.recv() => Stop::Terminate,
        }
    })
}
