//! The PostgreSQL queue on its own, against a real PostgreSQL server the tests start and stop
//! (tests/support/postgres.rs): migrations with many runners starting at once, claims taken
//! exactly once, leases expiring into requeues and then failure with every attempt
//! recorded, malformed rows set aside, bad submits refused, cancel pushed through NOTIFY,
//! cache-aware claiming that starves nobody, the password read from a file, a database
//! outage that loses no job's end (stored with the time the job ended), and a requeued job
//! keeping its place. No agent runs here: tests/suite/serve_pg.rs runs real ones.

use crate::support::postgres;
use crate::support::queue_jobs::{pg_config, pg_target, spec, REV};

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use postgres::Postgres;
use quest_runner::config::QueueConfig;
use quest_runner::run::{Cancel, JobResult, Outcome};
use quest_runner::serve::pg::{admin, schema, target::PgTarget, PgQueue};
use quest_runner::serve::{Interruption, JobSource};
use quest_runner::state::StateDir;
use serde_json::{json, Value};

/// A runner's wait before it takes over others' expired leases, with a lease of 1 s: the lease
/// and two reconnection waits (a quarter of it each), and a margin.
const GRACE_1S: Duration = Duration::from_millis(1800);

async fn client(pg: &Postgres) -> tokio_postgres::Client {
    admin::connect(&pg_target(pg)).await.unwrap()
}

async fn open_at(
    pg: &Postgres,
    state: &Path,
    lease: Duration,
) -> Result<PgQueue, quest_runner::serve::pg::PgError> {
    PgQueue::open(
        pg_target(pg),
        &StateDir::at(state),
        &pg_config(pg),
        lease,
        Duration::from_secs(600),
    )
    .await
}

/// A runner's queue on a state dir of its own.
async fn runner(pg: &Postgres, lease: Duration) -> (tempfile::TempDir, PgQueue) {
    let dir = tempfile::tempdir().unwrap();
    let q = PgQueue::open(
        pg_target(pg),
        &StateDir::at(dir.path()),
        &pg_config(pg),
        lease,
        Duration::from_secs(600),
    )
    .await
    .unwrap();
    (dir, q)
}

/// The result of job `id` (queued by [`spec`]), ended as `outcome` with `message`.
fn ended(id: &str, outcome: Outcome, message: &str) -> JobResult {
    let job = spec(id).validate(Duration::from_secs(60)).unwrap();
    JobResult {
        outcome,
        message: Some(message.into()),
        ..JobResult::new(&job)
    }
}

fn succeeded(id: &str) -> JobResult {
    ended(id, Outcome::Succeeded, "ok")
}

async fn show(pg: &Postgres, id: &str) -> Value {
    admin::show(&client(pg).await, id).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_are_applied_once_when_many_runners_start_at_once() {
    let pg = Postgres::start();
    let t = pg_target(&pg);
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let t = t.clone();
            tokio::spawn(async move {
                let (mut client, conn) = t.connect().await.unwrap();
                tokio::spawn(conn);
                schema::migrate(&mut client).await.unwrap()
            })
        })
        .collect();
    let mut applied = Vec::new();
    for t in tasks {
        applied.push(t.await.unwrap());
    }
    let non_empty: Vec<&Vec<i32>> = applied.iter().filter(|a| !a.is_empty()).collect();
    assert_eq!(non_empty.len(), 1, "one runner migrates: {applied:?}");
    assert_eq!(*non_empty[0], (1..=schema::latest()).collect::<Vec<_>>());
    assert_eq!(
        pg.sql(
            "SELECT string_agg(version::text, ',' ORDER BY version) FROM quest_runner.migrations"
        ),
        (1..=schema::latest())
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    // A database a newer runner migrated is refused, naming both versions.
    pg.sql("INSERT INTO quest_runner.migrations (version, name) VALUES (999, 'from the future')");
    let (mut client, conn) = t.connect().await.unwrap();
    tokio::spawn(conn);
    let err = schema::migrate(&mut client).await.unwrap_err().to_string();
    assert!(
        err.contains("999") && err.contains("upgrade this runner"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_job_is_claimed_by_exactly_one_of_many_runners() {
    let pg = Postgres::start();
    let c = client(&pg).await;
    for i in 0..60 {
        admin::submit(
            &c,
            spec(&format!("j{i}")),
            &pg_config(&pg),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    }
    let mut runners = Vec::new();
    for _ in 0..3 {
        runners.push(Arc::new(runner(&pg, Duration::from_secs(30)).await));
    }
    let tasks: Vec<_> = runners
        .iter()
        .map(|r| {
            let r = r.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                while let Some(c) = r.1.claim().await.unwrap() {
                    got.push(c.job.id.clone());
                    let id = c.job.id.clone();
                    r.1.finish(c, succeeded(&id)).await.unwrap();
                }
                got
            })
        })
        .collect();
    let mut all = Vec::new();
    let mut per_runner = Vec::new();
    for t in tasks {
        let got = t.await.unwrap();
        per_runner.push(got.len());
        all.extend(got);
    }
    all.sort();
    let before = all.len();
    all.dedup();
    assert_eq!(before, all.len(), "a job was claimed twice");
    assert_eq!(all.len(), 60, "every job was claimed");
    eprintln!("jobs per runner: {per_runner:?}");
    assert_eq!(
        pg.sql("SELECT count(*) FROM quest_runner.jobs WHERE state = 'done' AND attempts = 1"),
        "60"
    );
    assert_eq!(
        pg.sql("SELECT count(*) FROM quest_runner.attempts WHERE outcome = 'succeeded'"),
        "60"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_leases_requeue_up_to_max_attempts_recording_every_attempt() {
    let pg = Postgres::start();
    let lease = Duration::from_secs(1);
    let c = client(&pg).await;
    admin::submit(&c, spec("l"), &pg_config(&pg), Duration::from_secs(60))
        .await
        .unwrap();
    let (_d1, dying) = runner(&pg, lease).await;
    let claimed = dying.claim().await.unwrap().expect("a job");
    assert_eq!(claimed.attempt, 1);
    let first_pid = dying.me().pid;
    // Dies: no renewal, no end. (Its claim is simply forgotten.)
    std::mem::forget(claimed);
    drop(dying);

    let (_d2, peer) = runner(&pg, lease).await;
    // Connected for less than one lease (and two reconnection waits of its owner): others'
    // expired leases are left to them.
    assert!(peer.recover(2).await.unwrap().requeued.is_empty());
    tokio::time::sleep(GRACE_1S).await;
    let recovered = peer.recover(2).await.unwrap();
    assert_eq!(recovered.requeued, ["l"], "{recovered:?}");
    let v = show(&pg, "l").await;
    assert_eq!(v["state"], "queued", "{v}");
    let a = &v["attempts"][0];
    assert_eq!(a["outcome"], "lost", "{v}");
    assert!(
        a["reason"]
            .as_str()
            .unwrap()
            .contains("stopped renewing its lease"),
        "{v}"
    );
    assert_eq!(a["runner_pid"], first_pid, "{v}");
    assert!(a["host"].is_string() && a["ended_at"].is_string(), "{v}");

    // The second attempt's runner dies too: past max_attempts the job fails.
    let second = peer.claim().await.unwrap().expect("the requeued job");
    assert_eq!(second.attempt, 2);
    std::mem::forget(second);
    drop(peer);
    let (_d3, third) = runner(&pg, lease).await;
    tokio::time::sleep(GRACE_1S).await;
    let recovered = third.recover(2).await.unwrap();
    assert_eq!(recovered.failed, ["l"], "{recovered:?}");
    let v = show(&pg, "l").await;
    assert_eq!(v["state"], "failed", "{v}");
    assert_eq!(v["attempts"].as_array().unwrap().len(), 2, "{v}");
    assert!(
        v["result"]["message"]
            .as_str()
            .unwrap()
            .contains("gave up after 2 attempt(s)"),
        "{v}"
    );
    assert!(third.claim().await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_runner_takes_back_its_own_jobs_at_once_and_a_live_lease_is_kept() {
    let pg = Postgres::start();
    let c = client(&pg).await;
    for id in ["own", "peer"] {
        admin::submit(&c, spec(id), &pg_config(&pg), Duration::from_secs(60))
            .await
            .unwrap();
    }
    let lease = Duration::from_secs(60);
    let dir = tempfile::tempdir().unwrap();
    let first = open_at(&pg, dir.path(), lease).await.unwrap();
    // A second process on the same state directory is refused.
    let err = open_at(&pg, dir.path(), lease)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("a state directory each"), "{err}");
    let (_pd, peer) = runner(&pg, lease).await;
    let mine = first.claim().await.unwrap().unwrap();
    let theirs = peer.claim().await.unwrap().unwrap();
    assert_ne!(mine.job.id, theirs.job.id);
    std::mem::forget(mine);
    drop(first);
    // Restarted: its earlier process's job goes back at once (no lease to wait for); the
    // live peer's, whose lease runs, is left alone.
    let restarted = open_at(&pg, dir.path(), lease).await.unwrap();
    let recovered = restarted.recover(3).await.unwrap();
    assert_eq!(recovered.requeued.len(), 1, "{recovered:?}");
    assert_ne!(recovered.requeued[0], theirs.job.id);
    assert_eq!(show(&pg, &theirs.job.id).await["state"], "running");
    let id = theirs.job.id.clone();
    peer.finish(theirs, succeeded(&id)).await.unwrap();
    assert_eq!(show(&pg, &id).await["state"], "done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_rows_are_moved_aside_with_their_reason() {
    let pg = Postgres::start();
    let c = client(&pg).await;
    let good = json!({"repo": "https://example.invalid/r.git", "rev": REV, "trust": "trusted", "agent": "claude",
                      "account": "main", "prompt": "p"});
    let mut unknown = good.clone();
    unknown["colour"] = "red".into();
    let mut bad_rev = good.clone();
    bad_rev["rev"] = "abc".into();
    let mut liar = good.clone();
    liar["id"] = "other".into();
    let rows = [
        ("unknown", unknown),
        ("badrev", bad_rev),
        ("liar", liar),
        ("../escape", good.clone()),
        ("array", json!([1, 2])),
        ("good", good),
    ];
    for (id, spec) in &rows {
        // As another program would: straight into the table.
        c.execute(
            "INSERT INTO quest_runner.jobs (id, spec) VALUES ($1, $2)",
            &[id, spec],
        )
        .await
        .unwrap();
    }
    let (_d, q) = runner(&pg, Duration::from_secs(30)).await;
    let claimed = q.claim().await.unwrap().expect("the good row");
    assert_eq!(claimed.job.id, "good");
    assert!(q.claim().await.unwrap().is_none());
    let listed = admin::list(&c).await.unwrap();
    let reason = |id: &str| -> String {
        let j = listed.iter().find(|j| j.id == id).unwrap();
        assert_eq!(j.state.name(), "rejected", "{id}");
        j.message.clone().unwrap()
    };
    assert!(reason("unknown").contains("unknown field `colour`"));
    assert!(reason("badrev").contains("\"rev\""));
    assert!(reason("liar").contains("differs"));
    assert!(reason("../escape").contains("\"id\""));
    assert!(reason("array").contains("invalid job"));
    assert_eq!(
        listed.last().unwrap().state.name(),
        "rejected",
        "rejected rows last"
    );
    // Bad rows the database itself refuses: a running row without a claim.
    let refused = c
        .execute(
            "INSERT INTO quest_runner.jobs (id, spec, state) VALUES ('x', '{}', 'running')",
            &[],
        )
        .await;
    assert!(refused.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_submits_are_refused_naming_what_is_wrong() {
    let pg = Postgres::start();
    let c = client(&pg).await;
    let cfg = pg_config(&pg);
    let t = Duration::from_secs(60);
    admin::submit(&c, spec("dup"), &cfg, t).await.unwrap();
    let err = admin::submit(&c, spec("dup"), &cfg, t).await.unwrap_err();
    assert!(
        err.is_bad_input() && err.to_string().contains("already taken"),
        "{err}"
    );
    let mut s = spec("acct");
    s.account = "nobody".into();
    let err = admin::submit(&c, s, &cfg, t).await.unwrap_err();
    assert!(
        err.is_bad_input() && err.to_string().contains("\"nobody\""),
        "{err}"
    );
    let mut s = spec("agent");
    s.agent = quest_runner::job::AgentKind::Opencode;
    let err = admin::submit(&c, s, &cfg, t).await.unwrap_err();
    assert!(err.to_string().contains("is for claude"), "{err}");
    for bad in ["../x", "a/b", ".hidden"] {
        let err = admin::submit(&c, spec(bad), &cfg, t).await.unwrap_err();
        assert!(
            err.is_bad_input() && err.to_string().contains("\"id\""),
            "{bad}: {err}"
        );
    }
    // A host without the account, while a runner serving the queue has it: accepted.
    let (_d, _runner) = runner(&pg, Duration::from_secs(30)).await;
    let mut bare = cfg.clone();
    bare.accounts.clear();
    admin::submit(&c, spec("via-runner"), &bare, t)
        .await
        .unwrap();
    let listed = admin::list(&c).await.unwrap();
    assert_eq!(listed.len(), 2, "only the good submits are queued");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_reaches_the_running_jobs_runner_through_notify() {
    let pg = Postgres::start();
    let c = client(&pg).await;
    admin::submit(&c, spec("c"), &pg_config(&pg), Duration::from_secs(60))
        .await
        .unwrap();
    // A long lease: renewals (which also carry cancels) come every 20 s, so only the
    // notification can be quick.
    let (_d, q) = runner(&pg, Duration::from_secs(60)).await;
    let claimed = q.claim().await.unwrap().unwrap();
    assert!(!q.cancel_requested("c").await);
    let asked = Instant::now();
    assert_eq!(
        admin::cancel(&c, "c").await.unwrap(),
        quest_runner::serve::queue::CancelOutcome::Requested
    );
    while !q.cancel_requested("c").await {
        assert!(
            asked.elapsed() < Duration::from_secs(10),
            "the cancel never arrived"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let latency = asked.elapsed();
    eprintln!("cancel reached the runner {latency:?} after it was asked");
    assert!(
        latency < Duration::from_secs(15),
        "not by a renewal: {latency:?}"
    );
    q.finish(
        claimed,
        ended("c", Outcome::Cancelled(Cancel::Terminate), "cancelled"),
    )
    .await
    .unwrap();
    assert_eq!(show(&pg, "c").await["state"], "cancelled");
    let err = admin::cancel(&c, "c").await.unwrap_err();
    assert!(err.to_string().contains("already cancelled"), "{err}");
    let err = admin::cancel(&c, "nope").await.unwrap_err();
    assert!(err.is_bad_input(), "{err}");

    // A job given back (SIGTERM) while its cancel was pending ends cancelled, not queued.
    admin::submit(&c, spec("c2"), &pg_config(&pg), Duration::from_secs(60))
        .await
        .unwrap();
    let claimed = q.claim().await.unwrap().unwrap();
    admin::cancel(&c, "c2").await.unwrap();
    q.release(
        claimed,
        Interruption {
            reason: "interrupted: the runner got SIGTERM; requeued".into(),
        },
    )
    .await
    .unwrap();
    let v = show(&pg, "c2").await;
    assert_eq!(v["state"], "cancelled", "{v}");
    // A queued job is cancelled at once.
    admin::submit(&c, spec("c3"), &pg_config(&pg), Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(
        admin::cancel(&c, "c3").await.unwrap(),
        quest_runner::serve::queue::CancelOutcome::Dequeued
    );
}

/// A devShell cache entry for `rev`, as the devShell engine writes it.
fn cached_devshell(state: &Path, rev: &str) {
    let entry = state.join("devshell/v1/entries/k1");
    std::fs::create_dir_all(&entry).unwrap();
    let meta = json!({"format": 1, "key": "k1", "rev": rev, "attr": "devShells.x.default",
                      "system": "x86_64-linux", "nix_version": "2.8.0", "created": 0,
                      "shell": null});
    std::fs::write(entry.join("meta.json"), meta.to_string()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_prefer_warm_jobs_without_starving_cold_ones() {
    let pg = Postgres::start();
    let c = client(&pg).await;
    let warm_rev = "1111111111111111111111111111111111111111";
    let with = |id: &str, repo: &str, rev: &str| {
        let mut s = spec(id);
        s.repo = repo.into();
        s.rev = rev.into();
        s
    };
    let (dir, q) = runner(&pg, Duration::from_secs(30)).await;
    let state = StateDir::at(dir.path());
    // This runner has cloned repo B, and cached the devShell of warm_rev.
    let clone = quest_runner::workspace::bare_clone_path(&state, "https://example.invalid/b.git");
    std::fs::create_dir_all(&clone).unwrap();
    cached_devshell(dir.path(), warm_rev);
    let cfg = pg_config(&pg);
    let t = Duration::from_secs(60);
    for s in [
        with("cold", "https://example.invalid/a.git", REV),
        with("cloned", "https://example.invalid/b.git", REV),
        with("devshell", "https://example.invalid/a.git", warm_rev),
    ] {
        admin::submit(&c, s, &cfg, t).await.unwrap();
    }
    let order: Vec<String> = {
        let mut v = Vec::new();
        while let Some(claimed) = q.claim().await.unwrap() {
            v.push(claimed.job.id.clone());
            let id = claimed.job.id.clone();
            q.finish(claimed, succeeded(&id)).await.unwrap();
        }
        v
    };
    assert_eq!(order, ["devshell", "cloned", "cold"], "warmest first");

    // A cold job that has waited longer than the devShell's head start goes first.
    for s in [
        with("old-cold", "https://example.invalid/a.git", REV),
        with("new-warm", "https://example.invalid/a.git", warm_rev),
    ] {
        admin::submit(&c, s, &cfg, t).await.unwrap();
    }
    pg.sql("UPDATE quest_runner.jobs SET queued_at = now() - interval '61 seconds' WHERE id = 'old-cold'");
    let first = q.claim().await.unwrap().unwrap();
    assert_eq!(first.job.id, "old-cold", "no starvation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claims_repository_hash_is_the_bare_clones_name() {
    let pg = Postgres::start();
    let state = StateDir::at("/nonexistent");
    for repo in [
        "https://example.invalid/r.git",
        "/srv/git/ümlaut repo",
        "git@host:x/y",
    ] {
        let sql = quest_runner::serve::pg::claim::REPO_HASH_SQL.replace("j.repo", "$$REPO$$");
        let sql = sql.replace("$$REPO$$", &format!("'{}'", repo.replace('\'', "''")));
        let hash = pg.sql(&format!("SELECT {sql}"));
        let path = quest_runner::workspace::bare_clone_path(&state, repo);
        assert_eq!(
            path.file_name().unwrap().to_string_lossy(),
            format!("{hash}.git"),
            "{repo}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_comes_from_a_file_and_a_wrong_one_is_refused_at_once() {
    let pg = Postgres::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pw");
    std::fs::write(&file, format!("{}\n", postgres::PASSWORD)).unwrap();
    let queue = QueueConfig {
        postgres: pg.tcp_conninfo(),
        password_file: Some(file.clone()),
        lease: None,
    };
    let t = PgTarget::from_config(&queue).unwrap();
    let client = admin::connect(&t).await.unwrap();
    assert_eq!(admin::list(&client).await.unwrap().len(), 0);
    std::fs::write(&file, "wrong\n").unwrap();
    let started = Instant::now();
    let err = admin::connect_waiting(&t).await.err().unwrap().to_string();
    assert!(err.contains("password authentication failed"), "{err}");
    assert!(
        !err.contains("wrong"),
        "the password is not repeated: {err}"
    );
    eprintln!("a wrong password refused in {:?}", started.elapsed());
    // Without the file the server asks for a password and gets none.
    let no_file = PgTarget::from_config(&QueueConfig {
        password_file: None,
        ..queue
    })
    .unwrap();
    assert!(admin::connect(&no_file).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_loses_no_end_even_across_a_runner_restart() {
    let mut pg = Postgres::start();
    let c = client(&pg).await;
    for id in ["o1", "o2"] {
        admin::submit(&c, spec(id), &pg_config(&pg), Duration::from_secs(60))
            .await
            .unwrap();
    }
    drop(c);
    let dir = tempfile::tempdir().unwrap();
    let lease = Duration::from_secs(30);
    let q = Arc::new(open_at(&pg, dir.path(), lease).await.unwrap());
    let first = q.claim().await.unwrap().unwrap();
    let second = q.claim().await.unwrap().unwrap();

    pg.stop();
    assert!(
        q.claim().await.unwrap().is_none(),
        "no claim while it is down"
    );
    // Both jobs end while the database is down: one runner keeps retrying, ...
    let finishing = {
        let q = q.clone();
        let id = first.job.id.clone();
        tokio::spawn(async move { q.finish(first, succeeded(&id)).await })
    };
    // ... the other is stopped before it could record anything.
    let id2 = second.job.id.clone();
    let stopped = {
        let q = q.clone();
        let id = id2.clone();
        tokio::spawn(async move { q.finish(second, succeeded(&id)).await })
    };
    let pending = dir.path().join("serve/pg-pending");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_dir(&pending).map_or(0, |d| d.count()) < 2 {
        assert!(Instant::now() < deadline, "the ends were not kept on disk");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stopped.abort();
    pg.start_again();
    finishing.await.unwrap().unwrap();
    drop(q); // the first end is recorded; this runner stops
    let _ = stopped.await;
    let restarted = open_at(&pg, dir.path(), lease).await.unwrap();
    let c = client(&pg).await;
    for id in ["o1", "o2"] {
        let v = admin::show(&c, id).await.unwrap();
        assert_eq!(v["state"], "done", "{v}");
        assert_eq!(v["attempts"].as_array().unwrap().len(), 1, "ran once: {v}");
    }
    assert_eq!(
        std::fs::read_dir(&pending).unwrap().count(),
        0,
        "nothing left pending"
    );
    assert!(restarted.claim().await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_says_whether_the_queue_is_reachable_and_why_not() {
    let pg = Postgres::start();
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("pw");
    std::fs::write(&pw, postgres::PASSWORD).unwrap();
    let doctor = |queue: Value| -> String {
        let state = dir.path().join("state");
        std::fs::create_dir_all(&state).unwrap();
        std::fs::write(
            state.join("config.json"),
            json!({ "queue": queue }).to_string(),
        )
        .unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_quest-runner"))
            .arg("--state-dir")
            .arg(&state)
            .arg("doctor")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines()
            .skip_while(|l| !l.contains("job queue (PostgreSQL)"))
            .take(2)
            .collect::<Vec<_>>()
            .join("\n")
    };
    let line = doctor(json!({"postgres": pg.tcp_conninfo(), "password_file": pw}));
    assert!(
        line.starts_with("ok") && line.contains("no tables yet"),
        "{line}"
    );
    client(&pg).await; // migrates
    let line = doctor(json!({"postgres": pg.tcp_conninfo(), "password_file": pw}));
    assert!(
        line.starts_with("ok") && line.contains("schema version"),
        "{line}"
    );
    std::fs::write(&pw, "wrong").unwrap();
    let line = doctor(json!({"postgres": pg.tcp_conninfo(), "password_file": pw}));
    assert!(
        line.starts_with("FAIL") && line.contains("password authentication failed"),
        "{line}"
    );
    assert!(line.contains("fix:"), "{line}");
}

/// Seconds since the epoch, as PostgreSQL has `column` of the row `where`.
fn epoch(pg: &Postgres, column: &str, table_where: &str) -> f64 {
    pg.sql(&format!(
        "SELECT extract(epoch FROM {column}) FROM quest_runner.{table_where}"
    ))
    .parse()
    .unwrap()
}

fn now_epoch() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_recorded_after_an_outage_keeps_the_time_the_job_ended() {
    let mut pg = Postgres::start();
    let c = client(&pg).await;
    for id in ["t1", "t2"] {
        admin::submit(&c, spec(id), &pg_config(&pg), Duration::from_secs(60))
            .await
            .unwrap();
    }
    drop(c);
    let dir = tempfile::tempdir().unwrap();
    let q = Arc::new(
        open_at(&pg, dir.path(), Duration::from_secs(60))
            .await
            .unwrap(),
    );
    let first = q.claim().await.unwrap().unwrap();
    let second = q.claim().await.unwrap().unwrap();
    pg.stop();
    // Both end now; one end is retried by this runner, the other by the next one (this one
    // is stopped before it can record it).
    let ended_at = now_epoch();
    let finishing = {
        let (q, id) = (q.clone(), first.job.id.clone());
        tokio::spawn(async move { q.finish(first, succeeded(&id)).await })
    };
    let stopped = {
        let (q, id) = (q.clone(), second.job.id.clone());
        tokio::spawn(async move { q.finish(second, succeeded(&id)).await })
    };
    let pending = dir.path().join("serve/pg-pending");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_dir(&pending).map_or(0, |d| d.count()) < 2 {
        assert!(Instant::now() < deadline, "the ends were not kept on disk");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stopped.abort();
    let _ = stopped.await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    pg.start_again();
    finishing.await.unwrap().unwrap();
    drop(q);
    let _restarted = open_at(&pg, dir.path(), Duration::from_secs(60))
        .await
        .unwrap();
    let recorded_by = now_epoch();
    for id in ["t1", "t2"] {
        let row = format!("jobs WHERE id = '{id}'");
        let finished = epoch(&pg, "finished_at", &row);
        let attempt = epoch(&pg, "ended_at", &format!("attempts WHERE job_id = '{id}'"));
        println!(
            "{id}: stored {:.2} s after it ended, recorded {:.2} s after",
            finished - ended_at,
            recorded_by - ended_at
        );
        assert!(recorded_by - ended_at >= 4.0);
        assert!(
            (finished - ended_at).abs() < 1.5,
            "{id}: {finished} vs {ended_at}"
        );
        assert!(
            (attempt - finished).abs() < 0.01,
            "{id}: {attempt} vs {finished}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requeued_job_keeps_its_place_in_the_queue() {
    let pg = Postgres::start();
    let c = client(&pg).await;
    let submit = |id: &'static str| {
        let (c, config) = (&c, pg_config(&pg));
        async move {
            admin::submit(c, spec(id), &config, Duration::from_secs(60))
                .await
                .unwrap()
        }
    };
    submit("first").await;
    let queued_at = || epoch(&pg, "queued_at", "jobs WHERE id = 'first'");
    let submitted = queued_at();
    let lease = Duration::from_secs(60);
    let dir = tempfile::tempdir().unwrap();
    let dying = open_at(&pg, dir.path(), lease).await.unwrap();
    let claimed = dying.claim().await.unwrap().unwrap();
    assert_eq!(claimed.job.id, "first");
    // Jobs submitted while it runs, a second apart (the claim prefers the longest wait).
    for id in ["second", "third"] {
        tokio::time::sleep(Duration::from_millis(1100)).await;
        submit(id).await;
    }
    // Its runner dies; the restarted one gives it back at once.
    std::mem::forget(claimed);
    drop(dying);
    let restarted = open_at(&pg, dir.path(), lease).await.unwrap();
    assert_eq!(restarted.recover(3).await.unwrap().requeued, ["first"]);
    println!(
        "after a dead runner: queued_at moved {:.2} s",
        queued_at() - submitted
    );
    assert_eq!(queued_at(), submitted, "queued_at kept");
    let v = show(&pg, "first").await;
    assert_eq!(v["attempts"][0]["outcome"], "lost", "{v}");
    assert!(v["attempts"][0]["ended_at"].is_string(), "{v}");
    let again = restarted.claim().await.unwrap().unwrap();
    assert_eq!(again.job.id, "first", "claimed before the later jobs");
    assert_eq!(again.attempt, 2);

    // Given back (SIGTERM): the same.
    let why = Interruption {
        reason: "interrupted: the runner got SIGTERM".into(),
    };
    restarted.release(again, why).await.unwrap();
    assert_eq!(queued_at(), submitted, "queued_at kept");
    let v = show(&pg, "first").await;
    assert_eq!(v["attempts"][1]["outcome"], "interrupted", "{v}");
    let third = restarted.claim().await.unwrap().unwrap();
    assert_eq!((third.job.id.as_str(), third.attempt), ("first", 3));
}

/// The metrics' queue depth with the PostgreSQL queue: every host's queued jobs and the age
/// of the oldest, by the database's clock; a claimed job no longer counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_depth_counts_every_hosts_queued_jobs() {
    let pg = Postgres::start();
    let c = client(&pg).await;
    let (_dir, q) = runner(&pg, Duration::from_secs(30)).await;
    let empty = q.queue_depth().await.unwrap().unwrap();
    assert_eq!(empty.queued, 0);
    for i in 0..3 {
        let id = format!("d{i}");
        admin::submit(&c, spec(&id), &pg_config(&pg), Duration::from_secs(60))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let three = q.queue_depth().await.unwrap().unwrap();
    assert_eq!(three.queued, 3, "{three:?}");
    assert!(three.oldest_age_seconds >= 0.2, "{three:?}");
    let claimed = q.claim().await.unwrap().expect("a job");
    let two = q.queue_depth().await.unwrap().unwrap();
    assert_eq!(two.queued, 2, "{two:?}");
    let id = claimed.job.id.clone();
    q.finish(claimed, succeeded(&id)).await.unwrap();
    eprintln!("queue depth: {empty:?} → {three:?} → {two:?}");
}
