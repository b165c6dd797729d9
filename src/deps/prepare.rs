//! A job's locked dependencies, in two steps: [`plan`] reads the revision's locks (what the
//! job will be served, and so which hosts its proxy answers for it, known before anything of
//! the job runs), and [`prepare`] fetches into the cache what it lacks, in parallel, and
//! makes the job's [`Served`] set of what was verified.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Instant;

use futures::StreamExt;
use serde::Serialize;

use super::cache::DepCache;
use super::fetch::{Fetched, Fetcher};
use super::lock;
use super::pin::{Artifact, Ecosystem, HashPinned, Pin, Skipped};
use super::resolve;
use super::served::{hosts_of, Served};

/// The most artifacts one job's locks may pin; a revision pinning more is served none.
pub const MAX_ARTIFACTS: usize = 20_000;
/// Fetches made at once.
const PARALLEL: usize = 16;
/// Problems a result lists; the rest are counted.
const MAX_LISTED: usize = 50;

/// What a revision's locks pin, read before the job runs.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// The locks read, as paths in the revision.
    pub locks: Vec<String>,
    artifacts: Vec<Artifact>,
    pypi: Vec<HashPinned>,
    pub skipped: Vec<Skipped>,
}

impl Plan {
    /// The hosts the job's proxy answers from the set (none: the locks pin nothing).
    pub fn hosts(&self) -> BTreeSet<String> {
        let mut ecosystems: BTreeSet<Ecosystem> =
            self.artifacts.iter().map(|a| a.ecosystem).collect();
        if !self.pypi.is_empty() {
            ecosystems.insert(Ecosystem::Pypi);
        }
        let hosts = self.artifacts.iter().map(|a| a.url.host.clone()).collect();
        hosts_of(&ecosystems, &hosts)
    }

    pub fn is_empty(&self) -> bool {
        self.artifacts.is_empty() && self.pypi.is_empty()
    }

    /// What `quest-runner policy` shows of it.
    pub fn describe(&self) -> serde_json::Value {
        let mut by: std::collections::BTreeMap<&str, usize> = Default::default();
        for a in &self.artifacts {
            *by.entry(match a.ecosystem {
                Ecosystem::Npm => "npm",
                Ecosystem::Pypi => "pypi",
                Ecosystem::Crates => "crates",
            })
            .or_default() += 1;
        }
        if !self.pypi.is_empty() {
            *by.entry("pypi requirements (files found by hash)")
                .or_default() += self.pypi.len();
        }
        serde_json::json!({
            "locks": self.locks,
            "pinned": by,
            "hosts": self.hosts(),
            "not_taken": self.skipped,
        })
    }
}

/// Reads the locks of `rev` in the bare clone `repo`: pure but for reading them.
pub async fn plan(repo: &Path, rev: &str) -> Result<Plan, crate::git::GitError> {
    let found = super::find::locks_at(repo, rev).await?;
    let mut plan = Plan {
        skipped: found.skipped,
        ..Plan::default()
    };
    for blob in found.locks {
        match lock::parse(blob.kind, &blob.path, &blob.bytes) {
            Ok(parsed) => {
                plan.locks.push(blob.path);
                plan.skipped.extend(parsed.skipped);
                for pin in parsed.pins {
                    match pin {
                        Pin::Artifact(a) => plan.artifacts.push(a),
                        Pin::Pypi(p) => plan.pypi.push(p),
                    }
                }
            }
            Err(why) => plan.skipped.push(Skipped {
                lock: blob.path.clone(),
                entry: blob.path,
                why,
            }),
        }
    }
    let pinned = plan.artifacts.len() + plan.pypi.len();
    if pinned > MAX_ARTIFACTS {
        let why = format!(
            "the revision's locks pin {pinned} artifacts, more than the {MAX_ARTIFACTS} a job \
             is served: none are fetched"
        );
        plan.artifacts.clear();
        plan.pypi.clear();
        plan.skipped.push(Skipped {
            lock: plan.locks.join(", "),
            entry: "all".into(),
            why,
        });
    }
    Ok(plan)
}

/// What a job's locks came to, in its result.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct DepsSummary {
    /// The locks read, as paths in the revision.
    pub locks: Vec<String>,
    /// Artifacts in the job's set: verified and in the cache.
    pub artifacts: u64,
    /// Of those, fetched for this job (the rest were in the cache).
    pub fetched: u64,
    pub fetched_bytes: u64,
    /// Pinned artifacts not in the set: a fetch that failed, a hash that did not match, an
    /// entry not taken (its reasons in `problems`).
    pub refused: u64,
    /// Requests the job's proxy answered from the set.
    #[serde(default)]
    pub served: u64,
    /// How long reading the locks and fetching took.
    pub ms: u64,
    /// The first problems, each with its lock and reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<Skipped>,
}

/// The files on PyPI of requirements pinned by hash, found in parallel; those that have none
/// are `problems`.
async fn pypi_files(
    pins: Vec<HashPinned>,
    cache: &DepCache,
    fetcher: &Fetcher,
    problems: &mut Vec<Skipped>,
) -> Vec<Artifact> {
    // Futures made first, then run: a stream of a closure's futures borrowing the cache is
    // not `Send` to the compiler, whose job futures must be.
    let finding: Vec<_> = pins
        .into_iter()
        .map(|pin| async move {
            let r = resolve::pypi_files(&pin, cache, fetcher).await;
            (pin, r)
        })
        .collect();
    let found = futures::stream::iter(finding)
        .buffer_unordered(PARALLEL)
        .collect::<Vec<_>>()
        .await;
    let mut out = Vec::new();
    for (pin, r) in found {
        match r {
            Ok(files) => out.extend(files),
            Err(why) => problems.push(Skipped {
                lock: pin.lock.clone(),
                entry: format!("{}=={}", pin.name, pin.version),
                why,
            }),
        }
    }
    out
}

/// Fetches what `plan` pins and the cache lacks, and makes the job's set of what verified.
pub async fn prepare(plan: Plan, cache: &DepCache, fetcher: &Fetcher) -> (Served, DepsSummary) {
    let started = Instant::now();
    let mut summary = DepsSummary {
        locks: plan.locks.clone(),
        ..DepsSummary::default()
    };
    let mut problems = plan.skipped;
    let mut artifacts = plan.artifacts;
    // Requirements pinned by hash only: their files, found on PyPI by hash.
    artifacts.extend(pypi_files(plan.pypi, cache, fetcher, &mut problems).await);
    // One fetch per object, however many locks pin it.
    let mut seen = std::collections::HashSet::new();
    let unique: Vec<&Artifact> = artifacts
        .iter()
        .filter(|a| seen.insert(a.digest.clone()))
        .collect();
    let fetching: Vec<_> = unique
        .into_iter()
        .map(|a| async move { (a, fetcher.artifact(cache, &a.url, &a.digest).await) })
        .collect();
    let results = futures::stream::iter(fetching)
        .buffer_unordered(PARALLEL)
        .collect::<Vec<_>>()
        .await;
    let mut failed = std::collections::HashSet::new();
    for (a, r) in results {
        match r {
            Ok(Fetched::Cached) => {}
            Ok(Fetched::Stored(bytes)) => {
                summary.fetched += 1;
                summary.fetched_bytes += bytes;
            }
            Err(e) => {
                failed.insert(a.digest.clone());
                problems.push(resolve::skipped(a, e.to_string()));
            }
        }
    }
    artifacts.retain(|a| !failed.contains(&a.digest));
    let crates: Vec<&Artifact> = artifacts
        .iter()
        .filter(|a| a.ecosystem == Ecosystem::Crates)
        .collect();
    let (lines, no_line) = resolve::crate_index_lines(&crates, cache, fetcher).await;
    let mut unindexed = std::collections::HashSet::new();
    for (a, why) in no_line {
        unindexed.insert(a.digest.clone());
        problems.push(resolve::skipped(&a, why));
    }
    artifacts.retain(|a| !unindexed.contains(&a.digest));
    let served = Served::new(artifacts, lines);
    summary.artifacts = served.len() as u64;
    summary.refused = problems.len() as u64;
    problems.truncate(MAX_LISTED);
    summary.problems = problems;
    summary.ms = started.elapsed().as_millis() as u64;
    (served, summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bare repository holding one commit of `files`; its path and the commit.
    fn repo_with(files: &[(&str, &[u8])]) -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir(&work).unwrap();
        for (path, data) in files {
            std::fs::write(work.join(path), data).unwrap();
        }
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@t", "-C"])
                .arg(&work)
                .args(args)
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            String::from_utf8(out.stdout).unwrap()
        };
        git(&["init", "-q"]);
        git(&["add", "."]);
        git(&["commit", "-qm", "locks"]);
        let rev = git(&["rev-parse", "HEAD"]).trim().to_string();
        (dir, rev)
    }

    #[tokio::test]
    async fn a_lock_of_100k_packages_is_served_none_and_says_why() {
        let integrity = format!("sha512-{}==", "A".repeat(86));
        let mut packages = serde_json::Map::new();
        packages.insert("".into(), serde_json::json!({"name": "huge"}));
        for i in 0..100_000 {
            packages.insert(
                format!("node_modules/p{i}"),
                serde_json::json!({
                    "version": "1.0.0",
                    "resolved": format!("https://registry.npmjs.org/p{i}/-/p{i}-1.0.0.tgz"),
                    "integrity": integrity,
                }),
            );
        }
        let lock = serde_json::json!({"lockfileVersion": 3, "packages": packages});
        let (dir, rev) = repo_with(&[("package-lock.json", lock.to_string().as_bytes())]);
        let plan = plan(&dir.path().join("work/.git"), &rev).await.unwrap();
        assert!(plan.artifacts.is_empty() && plan.hosts().is_empty());
        let why = &plan.skipped.last().unwrap().why;
        assert!(
            why.contains("pin 100000 artifacts, more than the 20000"),
            "{why}"
        );
    }
}
