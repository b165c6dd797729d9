//! The one HTTP/1.1 accept loop of the crate and of the suite's stand-ins: the model gateway,
//! `serve`'s metrics listener, the scripted model and the package-registry stand-in each pass
//! it a listener and how to answer a request. Keep-alive, chunked bodies and
//! `Expect: 100-continue` are hyper's.
//!
//! Every connection is a task of the loop's own `JoinSet`: aborting the task that runs
//! [`serve_http1`] (a gateway or stand-in being dropped) ends its connections with it, so no
//! connection outlives the server it came in through.

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use hyper::body::{Body, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

/// Serves every connection `listener` accepts, each request answered by `answer`, until the
/// task running this is aborted. `what` names the server in the log (a failed accept is
/// logged and retried after a pause); with `limit`, a connection is closed after that long
/// whatever it is doing, so a client that sends nothing holds nothing for long.
pub async fn serve_http1<F, Fut, B>(
    listener: TcpListener,
    what: &'static str,
    limit: Option<Duration>,
    answer: F,
) where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<B>> + Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    let answer = answer.clone();
                    let service = hyper::service::service_fn(move |req| {
                        let answered = answer(req);
                        async move { Ok::<_, Infallible>(answered.await) }
                    });
                    conns.spawn(async move {
                        let served = hyper::server::conn::http1::Builder::new()
                            .keep_alive(true)
                            .serve_connection(TokioIo::new(stream), service);
                        match limit {
                            Some(limit) => drop(tokio::time::timeout(limit, served).await),
                            None => drop(served.await),
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!("{what}: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}
