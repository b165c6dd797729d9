//! Helpers started when first needed, not with the job: the job's network proxy and its
//! commands' sandbox host are Node programs whose start takes a core for ~0.2 s each. Started
//! beside the agent, they took that core from the agent's own start (on two cores, a
//! Claude Code job reached its first model request 0.2 s later); most jobs' agents ask their
//! model first, and many never use the network at all.
//!
//! The need is seen without accepting anything: the runner binds each helper's listening
//! socket before the job starts, and a client's connection waits in its backlog, which makes
//! the socket readable, until the helper, started then, accepts it. Nothing is refused or
//! lost meanwhile.

use std::future::Future;
use std::os::fd::{AsFd, BorrowedFd};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Resolves once a connection waits on `listener` (or at once, when the socket cannot be
/// watched: an error there starts the helper rather than leaving its clients waiting).
pub async fn connection_waiting(listener: BorrowedFd<'_>) {
    // A duplicate: the listener itself stays as it is for the helper that inherits it.
    let watched = listener.try_clone_to_owned().and_then(|fd| {
        // SAFETY: the AsyncFd owns the duplicate, which stays open and the same file until
        // the AsyncFd is dropped.
        unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.map_err(Into::into)
    });
    match watched {
        Ok(fd) => {
            if let Err(e) = fd.readable().await {
                tracing::warn!("watching a helper's socket: {e}; starting it now");
            }
        }
        Err(e) => tracing::warn!("watching a helper's socket: {e}; starting it now"),
    }
}

/// [`connection_waiting`] on a duplicate of `listener`, which the caller may then hand to the
/// helper: resolves once a connection waits on it.
pub fn first_connection(
    listener: &impl AsFd,
) -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
    let watched = listener.as_fd().try_clone_to_owned()?;
    Ok(async move { connection_waiting(watched.as_fd()).await })
}

/// A helper's life: waits for its need, starts it, and holds it until [`OnDemand::stop`],
/// which stops it the helper's own way. Dropped without `stop` (a cancelled job), the task
/// and what it holds are dropped: a helper's child is `kill_on_drop`.
pub struct OnDemand {
    life: JoinHandle<()>,
    stop: Option<oneshot::Sender<()>>,
}

impl OnDemand {
    /// `start` runs once `need` resolves, unless the helper is stopped first; `None` when it
    /// failed to start (it reports that its own way). `stop` ends what it started.
    pub fn new<R, F>(
        need: impl Future<Output = ()> + Send + 'static,
        start: impl FnOnce() -> Option<R> + Send + 'static,
        stop: impl FnOnce(R) -> F + Send + 'static,
    ) -> OnDemand
    where
        R: Send + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
        // In the caller's span: the helper's lines name the job.
        let life = tokio::spawn(tracing::Instrument::in_current_span(async move {
            tokio::select! {
                () = need => {}
                _ = &mut stop_rx => return,
            }
            let Some(started) = start() else { return };
            let _ = stop_rx.await;
            stop(started).await;
        }));
        OnDemand {
            life,
            stop: Some(stop_tx),
        }
    }

    /// Stops the helper if it started (or keeps it from starting), and waits until it has.
    pub async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.life).await;
    }
}

impl Drop for OnDemand {
    fn drop(&mut self) {
        self.life.abort();
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    /// Counts starts and stops of a stand-in helper.
    fn counted(listener: std::net::TcpListener) -> (OnDemand, Arc<AtomicUsize>, Arc<AtomicUsize>) {
        let (started, stopped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (s, t) = (started.clone(), stopped.clone());
        let need = async move { connection_waiting(listener.as_fd()).await };
        let helper = OnDemand::new(
            need,
            move || {
                s.fetch_add(1, Ordering::SeqCst);
                Some(())
            },
            move |()| async move {
                t.fetch_add(1, Ordering::SeqCst);
            },
        );
        (helper, started, stopped)
    }

    #[tokio::test]
    async fn a_helper_starts_at_the_first_connection_and_stops_its_way() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (mut helper, started, stopped) = counted(listener.try_clone().unwrap());
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(started.load(Ordering::SeqCst), 0, "nothing connected yet");
        // Connected before anything accepts: the client waits in the backlog.
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), async {
            while started.load(Ordering::SeqCst) == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("started at the connection");
        assert_eq!(stopped.load(Ordering::SeqCst), 0);
        helper.stop().await;
        assert_eq!(
            (
                started.load(Ordering::SeqCst),
                stopped.load(Ordering::SeqCst)
            ),
            (1, 1)
        );
        // The connection is still the helper's to accept.
        listener.set_nonblocking(true).unwrap();
        assert!(listener.accept().is_ok(), "the connection was taken");
    }

    #[tokio::test]
    async fn a_helper_nothing_needed_never_starts() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (mut helper, started, stopped) = counted(listener);
        helper.stop().await;
        assert_eq!(
            (
                started.load(Ordering::SeqCst),
                stopped.load(Ordering::SeqCst)
            ),
            (0, 0)
        );
    }
}
