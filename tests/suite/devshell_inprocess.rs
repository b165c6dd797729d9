//! The devShell cache used as a library, as `serve` will: concurrent requests inside one
//! process share one Nix run, and dropping a request stops its build.
//!
//! The cache runs a counting `nix` wrapper given to it with `DevShells::with_nix`, so no
//! other test of the binary sees it.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use quest_runner::config::Config;
use quest_runner::devshell::{CacheStatus, DevShells, Request};
use quest_runner::state::StateDir;
use support::*;

fn config() -> Config {
    let mut config = Config::default();
    config
        .nix
        .options
        .insert("substituters".to_string(), String::new());
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_builds_and_dropped_requests() {
    let tools = tempfile::tempdir().unwrap();
    let (nix, count) = counting_nix(tools.path());

    // Eight concurrent requests for one new revision: one nix run, one answer.
    let repo = Repo::new();
    let slow = format!(
        r#"slow = derivation {{ name = "slow"; system = "{}"; builder = "{BUILDER}"; args = [ "-c" "{}; echo > $out" ]; }};"#,
        system(),
        build_sleep(1)
    );
    let rev = repo.commit(&[("flake.nix", &flake(&slow))]);
    let state_dir = tempfile::tempdir().unwrap();
    let shells =
        Arc::new(DevShells::new(&StateDir::at(state_dir.path()), &config()).with_nix(&nix));
    let req = Request {
        repo: repo.bare(),
        rev: rev.clone(),
        git_ref: None,
        attr: None,
    };
    let answers = futures::future::join_all((0..8).map(|_| {
        let shells = Arc::clone(&shells);
        let req = req.clone();
        tokio::spawn(async move { shells.get(&req).await })
    }))
    .await;
    let answers: Vec<_> = answers.into_iter().map(|a| a.unwrap().unwrap()).collect();
    assert_eq!(runs(&count), 1, "one nix run for eight requests");
    assert!(answers.iter().all(|a| a.key == answers[0].key));
    assert!(answers.iter().all(|a| a.cache == CacheStatus::Miss));
    assert_eq!(shells.get(&req).await.unwrap().cache, CacheStatus::Hit);

    // A request dropped mid-build stops nix and its builder, and leaves nothing behind.
    let slow = SlowBuild::new();
    let token = slow.token.clone();
    let rev2 = repo.commit(&[("flake.nix", &flake(&slow.extra))]);
    let req2 = Request {
        rev: rev2,
        ..req.clone()
    };
    let build = {
        let shells = Arc::clone(&shells);
        tokio::spawn(async move { shells.get(&req2).await })
    };
    let deadline = Instant::now() + Duration::from_secs(180);
    while !slow.started() {
        assert!(Instant::now() < deadline, "the slow builder never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let dropped = Instant::now();
    build.abort();
    let _ = build.await;
    eprintln!("request dropped; teardown took {:?}", dropped.elapsed());
    let survivors = tokio::task::spawn_blocking(move || survivors_after(&token, BUILD_REAPED))
        .await
        .unwrap();
    assert!(
        survivors.is_empty(),
        "the build survived its request: {survivors:?}"
    );
    let layout = shells.layout();
    for dir in [layout.tmp(), layout.locks()] {
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
        assert!(left.is_empty(), "{} not empty: {left:?}", dir.display());
    }
    let entries: Vec<_> = std::fs::read_dir(layout.entries())
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(
        entries.len(),
        1,
        "only the first revision's entry: {entries:?}"
    );
}
