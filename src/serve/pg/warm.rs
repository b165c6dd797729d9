//! What this runner already has for a job: the repositories it has cloned and the
//! revisions whose devShell it has cached. The claim query prefers such jobs (see
//! [`super::claim`]); this module only reads the state directory.
//!
//! A bare clone is `repos/<first 20 hex digits of sha256(repo)>.git`
//! ([`crate::workspace::bare_clone_path`]); the claim query hashes each job's `repo` the same
//! way, so no URL needs to be recorded. A devShell entry records its revision in `meta.json`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::state::StateDir;

/// How long a reading of the state directory is used before it is read again (a finished
/// job invalidates it at once).
const FRESH_FOR: Duration = Duration::from_secs(5);

/// A snapshot.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Warm {
    /// The hashes naming the bare clones in `repos/`.
    pub repos: Vec<String>,
    /// Revisions with a devShell entry (one with no `flake.nix` included: that answer is
    /// cached too).
    pub revs: Vec<String>,
}

pub struct WarmSet {
    state: StateDir,
    cached: Mutex<Option<(Instant, Arc<Warm>)>>,
}

impl WarmSet {
    pub fn new(state: &StateDir) -> WarmSet {
        WarmSet {
            state: state.clone(),
            cached: Mutex::new(None),
        }
    }

    pub fn get(&self) -> Arc<Warm> {
        let mut cached = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, warm)) = cached.as_ref() {
            if at.elapsed() < FRESH_FOR {
                return warm.clone();
            }
        }
        let warm = Arc::new(scan(&self.state));
        *cached = Some((Instant::now(), warm.clone()));
        warm
    }

    /// Reads the state directory again at the next [`Self::get`] (a job just ended: it may
    /// have cloned or built something).
    pub fn invalidate(&self) {
        *self.cached.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

pub fn scan(state: &StateDir) -> Warm {
    let names = |dir: std::path::PathBuf| -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut repos: Vec<String> = names(state.root().join("repos"))
        .into_iter()
        .filter_map(|n| n.strip_suffix(".git").map(str::to_string))
        .filter(|h| h.len() == 20 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .collect();
    let layout = crate::devshell::entry::Layout::new(state.root());
    let mut revs: Vec<String> = names(layout.entries())
        .into_iter()
        .filter_map(|key| {
            let text = std::fs::read(layout.entry(&key).join(crate::devshell::entry::META)).ok()?;
            let meta: crate::devshell::entry::Meta = serde_json::from_slice(&text).ok()?;
            Some(meta.rev)
        })
        .collect();
    repos.sort();
    revs.sort();
    revs.dedup();
    Warm { repos, revs }
}
