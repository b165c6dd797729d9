//! A job's locked dependencies, fetched by the runner, verified by hash, kept across jobs and
//! served to the job through its proxy — to an untrusted revision too, which reaches no host.
//!
//! A lockfile names each artifact by a content hash. Fetching exactly those bytes from a
//! fixed public registry is a fixed-output fetch, like Nix's, made by the runner before any
//! of the revision's code runs: no byte the revision's code or its agent chooses leaves the
//! host, and the job still has what its locks pin. The data flows one way, one module each:
//!
//! [`find`] (the locks, from the bare clone at the revision) → [`lock`] (pure parsers: what
//! each pins, by [`digest`], at a [`pin::RegistryUrl`]) → [`prepare::plan`] (the job's set,
//! and the hosts its proxy answers for) → [`resolve`] and [`fetch`] (the runner's requests to
//! the fixed registries) → [`cache`] (content-addressed, only verified bytes) →
//! [`served`] (the job's own set, as its proxy answers from it: `netproxy::front`).

pub mod cache;
pub mod digest;
pub mod fetch;
pub mod find;
pub mod lock;
pub mod pin;
pub mod prepare;
pub mod resolve;
pub mod served;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

pub use cache::DepCache;
pub use fetch::{Fetcher, Upstreams};
pub use prepare::{DepsSummary, Plan};
pub use served::{Answer, Served};

/// The runner's side of every job's dependencies: the cache, its client to the registries,
/// and which objects running jobs hold (never collected while they run).
pub struct Deps {
    pub cache: DepCache,
    pub fetcher: Fetcher,
    /// The most the cache may hold; past it, the least recently used objects go after a job's
    /// fetch (config `deps.cache_size`).
    pub cache_size: u64,
    in_use: Mutex<HashMap<String, Vec<String>>>,
}

impl Deps {
    pub fn new(cache: DepCache, fetcher: Fetcher, cache_size: u64) -> Deps {
        Deps {
            cache,
            fetcher,
            cache_size,
            in_use: Mutex::default(),
        }
    }

    /// Fetches the job's set, holds its objects for the job's life (until [`Deps::release`]),
    /// and trims the cache to its size.
    pub async fn prepare(&self, job_id: &str, plan: Plan) -> (Arc<Served>, DepsSummary) {
        let (served, summary) = prepare::prepare(plan, &self.cache, &self.fetcher).await;
        let keys = served.digests().map(|d| d.key()).collect();
        self.lock_in_use().insert(job_id.to_string(), keys);
        if summary.fetched > 0 {
            let in_use = self.in_use_keys();
            let cache = self.cache.clone();
            let limit = self.cache_size;
            let collected =
                tokio::task::spawn_blocking(move || cache.collect(limit, &in_use)).await;
            if let Ok(c) = collected {
                if c.removed > 0 {
                    tracing::info!(
                        removed = c.removed,
                        freed = c.freed,
                        "the dependency cache was past deps.cache_size"
                    );
                }
            }
        }
        (Arc::new(served), summary)
    }

    /// The job no longer needs its objects.
    pub fn release(&self, job_id: &str) {
        self.lock_in_use().remove(job_id);
    }

    /// The objects running jobs hold.
    pub fn in_use_keys(&self) -> HashSet<String> {
        self.lock_in_use().values().flatten().cloned().collect()
    }

    fn lock_in_use(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<String>>> {
        self.in_use.lock().unwrap_or_else(|e| e.into_inner())
    }
}
