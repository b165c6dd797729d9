//! `quest-runner env` against the real Nix: cache hits and misses, the script's content,
//! recovery from damaged entries, single flight across processes, cancellation, bad input,
//! and `cache ls/gc`.

use crate::support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

fn as_str(v: &serde_json::Value, field: &str) -> String {
    v[field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} missing in {v}"))
        .to_string()
}

#[test]
fn miss_then_hit_with_the_same_script() {
    let repo = Repo::new();
    let rev = repo.commit(&[("flake.nix", &flake(r#"GREETING = "hi";"#))]);
    let runner = Runner::new();
    let first = runner.env_json(&repo.bare(), &rev, &[]);
    assert_eq!(first["cache"], "miss");
    assert_eq!(first["devshell"], "present");
    let second = runner.env_json(&repo.bare(), &rev, &[]);
    assert_eq!(second["cache"], "hit");
    assert_eq!(first["key"], second["key"]);
    assert_eq!(first["script"], second["script"]);
    let gcroot = as_str(&second, "gcroot");
    assert_eq!(
        std::fs::canonicalize(gcroot).unwrap().to_str().unwrap(),
        as_str(&second, "store_path")
    );
    // The script format prints exactly the cached file.
    let out = runner
        .command()
        .args(["env", "--repo"])
        .arg(repo.bare())
        .args(["--rev", &rev])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        out.stdout,
        std::fs::read(as_str(&second, "script")).unwrap()
    );
    assert!(as_str(&second, "url").contains(&format!("rev={rev}")));
}

#[test]
fn key_changes_with_rev_and_attr() {
    let repo = Repo::new();
    let rev1 = repo.commit(&[("flake.nix", &flake(r#"V = "1";"#))]);
    let rev2 = repo.commit(&[("flake.nix", &flake(r#"V = "2";"#))]);
    let runner = Runner::new();
    let a = runner.env_json(&repo.bare(), &rev1, &[]);
    let b = runner.env_json(&repo.bare(), &rev2, &[]);
    let attr = format!("devShells.{}.other", system());
    let c = runner.env_json(&repo.bare(), &rev1, &["--attr", &attr]);
    assert_ne!(a["key"], b["key"]);
    assert_ne!(a["key"], c["key"]);
    assert_eq!(c["cache"], "miss");
    let script_a = std::fs::read_to_string(as_str(&a, "script")).unwrap();
    let script_b = std::fs::read_to_string(as_str(&b, "script")).unwrap();
    let script_c = std::fs::read_to_string(as_str(&c, "script")).unwrap();
    assert!(script_a.contains("export V='1'"));
    assert!(script_b.contains("export V='2'"));
    assert!(script_c.contains("export OTHER_VAR='other'"));
}

#[test]
fn script_content_and_hook_only_when_sourced() {
    let repo = Repo::new();
    let outside = tempfile::tempdir().unwrap();
    let outside_marker = outside.path().join("hook-ran-outside");
    let extra = format!(
        r#"DEMO_VAR = "hello from flake";
      PATH = "/nix/store/demo-tools/bin";
      shellHook = ''
        demo_fn() {{ echo "fn:$DEMO_VAR"; }}
        echo hook > "$HOME/hook-marker"
        echo hook > {outside}
        echo "hook-saw:$DEMO_VAR"
      '';"#,
        outside = outside_marker.display()
    );
    let rev = repo.commit(&[("flake.nix", &flake(&extra))]);
    let runner = Runner::new();
    let home = tempfile::tempdir().unwrap();
    let out = runner
        .command()
        .env("HOME", home.path())
        .args(["env", "--format", "json", "--repo"])
        .arg(repo.bare())
        .args(["--rev", &rev])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Building and caching the env never runs the hook on the host.
    assert!(!home.path().join("hook-marker").exists());
    assert!(!outside_marker.exists());

    let script_path = as_str(&answer, "script");
    let script = std::fs::read_to_string(&script_path).unwrap();
    assert!(
        !script.contains("HOME="),
        "HOME must come from the sandbox:\n{script}"
    );
    assert!(!script.contains("TMPDIR="), "{script}");
    let hook_at = script.rfind("eval \"${shellHook:-}\"").expect("hook runs");
    assert!(
        script[hook_at..].trim_end().lines().count() == 1,
        "hook is last"
    );

    // Sourcing it (as the sandbox will) runs the hook, with the sandbox's HOME.
    let sandbox_home = tempfile::tempdir().unwrap();
    let sourced = Command::new("bash")
        .args(["--noprofile", "--norc", "-c"])
        .arg(format!(
            ". {script_path}; echo \"var:$DEMO_VAR\"; echo \"path:$PATH\"; demo_fn"
        ))
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", sandbox_home.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&sourced.stdout);
    assert!(
        sourced.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&sourced.stderr)
    );
    assert!(text.contains("hook-saw:hello from flake"), "{text}");
    assert!(text.contains("var:hello from flake"), "{text}");
    assert!(
        text.contains("path:/nix/store/demo-tools/bin:/usr/bin:/bin"),
        "{text}"
    );
    assert!(text.contains("fn:hello from flake"), "{text}");
    assert!(sandbox_home.path().join("hook-marker").exists());
}

#[test]
fn edited_checkout_is_ignored() {
    let repo = Repo::new();
    let rev = repo.commit(&[("flake.nix", &flake(r#"WHICH = "committed";"#))]);
    // The working tree now says something else, uncommitted: it must not be evaluated.
    std::fs::write(repo.src().join("flake.nix"), flake(r#"WHICH = "edited";"#)).unwrap();
    let runner = Runner::new();
    let answer = runner.env_json(&repo.src(), &rev, &[]);
    let script = std::fs::read_to_string(as_str(&answer, "script")).unwrap();
    assert!(script.contains("export WHICH='committed'"), "{script}");
}

#[test]
fn corrupted_entry_and_lost_root_are_rebuilt() {
    let repo = Repo::new();
    let rev = repo.commit(&[("flake.nix", &flake(r#"X = "1";"#))]);
    let mut runner = Runner::new();
    let (nix, count) = counting_nix(runner.state.path());
    runner.nix = Some(nix);
    let first = runner.env_json(&repo.bare(), &rev, &[]);
    let script = as_str(&first, "script");
    let good = std::fs::read(&script).unwrap();
    assert_eq!(runs(&count), 1);

    std::fs::write(&script, b"echo tampered\n").unwrap();
    let again = runner.env_json(&repo.bare(), &rev, &[]);
    assert_eq!(again["cache"], "miss", "a corrupted script is rebuilt");
    assert_eq!(std::fs::read(&script).unwrap(), good);
    assert_eq!(runs(&count), 2);

    let meta = runner
        .devshell_dir("entries")
        .join(as_str(&first, "key"))
        .join("meta.json");
    std::fs::write(&meta, b"{not json").unwrap();
    assert_eq!(runner.env_json(&repo.bare(), &rev, &[])["cache"], "miss");
    assert_eq!(runs(&count), 3);

    std::fs::remove_file(as_str(&first, "gcroot")).unwrap();
    let rebuilt = runner.env_json(&repo.bare(), &rev, &[]);
    assert_eq!(rebuilt["cache"], "miss", "a lost root is rebuilt");
    assert!(Path::new(&as_str(&rebuilt, "gcroot")).exists());
    assert_eq!(runs(&count), 4);
    assert_eq!(runner.env_json(&repo.bare(), &rev, &[])["cache"], "hit");
    assert_eq!(runs(&count), 4);
    // Only the live root remains (one link, which the runner makes to what nix built).
    assert_eq!(
        runner.listing("roots").len(),
        1,
        "{:?}",
        runner.listing("roots")
    );
}

#[test]
fn concurrent_processes_run_nix_once() {
    let repo = Repo::new();
    // A dependency that takes a moment, so the eight requests overlap.
    let extra = format!(
        r#"slow = derivation {{ name = "slow"; system = "{}"; builder = "{BUILDER}"; args = [ "-c" "{}; echo > $out" ]; }};"#,
        system(),
        build_sleep(1)
    );
    let rev = repo.commit(&[("flake.nix", &flake(&extra))]);
    let mut runner = Runner::new();
    let (nix, count) = counting_nix(runner.state.path());
    runner.nix = Some(nix);
    let children: Vec<_> = (0..8)
        .map(|_| {
            let mut cmd = runner.command();
            cmd.args(["env", "--format", "json", "--repo"])
                .arg(repo.bare())
                .args(["--rev", &rev])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            cmd.spawn().unwrap()
        })
        .collect();
    let mut keys = Vec::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        keys.push(v["key"].clone());
    }
    assert!(keys.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(runs(&count), 1, "eight concurrent requests, one nix run");
    assert!(runner.listing("locks").is_empty(), "no lock left behind");
    assert!(runner.listing("tmp").is_empty());
}

#[test]
fn sigint_mid_build_stops_nix_and_leaves_nothing() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        cancel_mid_build(signal);
    }
}

fn cancel_mid_build(signal: i32) {
    let repo = Repo::new();
    let slow = SlowBuild::new();
    let token = slow.token.clone();
    let rev = repo.commit(&[("flake.nix", &flake(&slow.extra))]);
    let runner = Runner::new();
    let mut child = runner
        .command()
        .args(["env", "--repo"])
        .arg(repo.bare())
        .args(["--rev", &rev])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    // Proof the build ran: its builder is waiting.
    while !slow.started() {
        assert!(Instant::now() < deadline, "the slow builder never started");
        assert!(
            child.try_wait().unwrap().is_none(),
            "runner exited before the build"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let sent = Instant::now();
    unsafe { libc::kill(child.id() as i32, signal) };
    let status = child.wait().unwrap();
    let took = sent.elapsed();
    eprintln!("runner stopped {took:?} after signal {signal}");
    assert_eq!(
        status.code(),
        Some(128 + signal),
        "exit code names the signal"
    );
    // Generous bound: the build would otherwise run for 300 s.
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("stopped cleanly"), "{stderr}");

    // Nothing is left: no builder, no nix, no build directory, no cache state.
    let survivors = survivors_after(&token, BUILD_REAPED);
    assert!(
        survivors.is_empty(),
        "a process of the build survived: {survivors:?}"
    );
    let build_dirs = nix_scratch_left(&token);
    assert!(build_dirs.is_empty(), "nix build dir left: {build_dirs:?}");
    runner.assert_nothing_cached();
}

#[test]
fn revision_without_flake_has_no_devshell() {
    let repo = Repo::new();
    let rev = repo.commit(&[("README.md", "bootstrap\n")]);
    let runner = Runner::new();
    let first = runner.env_json(&repo.bare(), &rev, &[]);
    assert_eq!(first["devshell"], "none");
    assert!(first["script"].is_null());
    assert_eq!(runner.env_json(&repo.bare(), &rev, &[])["cache"], "hit");
    let out = runner
        .command()
        .args(["env", "--repo"])
        .arg(repo.bare())
        .args(["--rev", &rev])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("no devShell"));
}

/// Runs `env` expecting failure; returns (exit code, stderr) and checks nothing was cached.
fn expect_failure(runner: &Runner, cmd: &mut Command) -> (i32, String) {
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "expected failure, got {stderr}");
    runner.assert_nothing_cached();
    let last = stderr.lines().last().unwrap_or_default().to_string();
    assert!(
        last.starts_with("quest-runner: "),
        "one clear last line: {stderr}"
    );
    (out.status.code().unwrap_or(-1), stderr)
}

fn env_cmd(runner: &Runner, repo: &Path, rev: &str, extra: &[&str]) -> Command {
    let mut cmd = runner.command();
    cmd.args(["env", "--repo"])
        .arg(repo)
        .args(["--rev", rev])
        .args(extra);
    cmd
}

#[test]
fn bad_input_is_named_and_nothing_is_cached() {
    let repo = Repo::new();
    let rev = repo.commit(&[("flake.nix", &flake(""))]);
    let runner = Runner::new();
    let not_repo = tempfile::tempdir().unwrap();

    let (code, err) = expect_failure(&runner, &mut env_cmd(&runner, not_repo.path(), &rev, &[]));
    assert_eq!(code, 2);
    assert!(
        err.contains("is not a git repository")
            && err.contains(&not_repo.path().display().to_string()),
        "{err}"
    );

    let (code, err) = expect_failure(&runner, &mut env_cmd(&runner, &repo.bare(), "HEAD", &[]));
    assert_eq!(code, 2);
    assert!(err.contains("\"HEAD\" is not a full commit id"), "{err}");

    let (code, err) = expect_failure(
        &runner,
        &mut env_cmd(&runner, &repo.bare(), &rev[..12], &[]),
    );
    assert_eq!(code, 2, "{err}");

    let absent = "0123456789abcdef0123456789abcdef01234567";
    let (code, err) = expect_failure(&runner, &mut env_cmd(&runner, &repo.bare(), absent, &[]));
    assert_eq!(code, 2);
    assert!(
        err.contains(absent) && err.contains("is not a commit"),
        "{err}"
    );

    let (code, err) = expect_failure(
        &runner,
        &mut env_cmd(
            &runner,
            &repo.bare(),
            &rev,
            &["--attr", "devShells.nope.missing"],
        ),
    );
    assert_eq!(code, 1);
    assert!(err.contains("devShells.nope.missing"), "{err}");
    assert!(
        err.contains("does not provide attribute"),
        "nix's own message: {err}"
    );

    let (code, err) = expect_failure(
        &runner,
        &mut env_cmd(&runner, &repo.bare(), &rev, &["--attr", "a#b"]),
    );
    assert_eq!(code, 2);
    assert!(err.contains("\"a#b\""), "{err}");

    let (code, err) = expect_failure(
        &runner,
        env_cmd(&runner, &repo.bare(), &rev, &[]).env("QUEST_RUNNER_NIX", "/nonexistent/nix"),
    );
    assert_eq!(code, 3);
    assert!(
        err.contains("QUEST_RUNNER_NIX") && err.contains("/nonexistent/nix"),
        "{err}"
    );

    // An unusable state directory: its parent is a regular file.
    let blocker = tempfile::NamedTempFile::new().unwrap();
    let bad_state = blocker.path().join("state");
    let out = Command::new(env!("CARGO_BIN_EXE_quest-runner"))
        .arg("--state-dir")
        .arg(&bad_state)
        .args(["env", "--repo"])
        .arg(repo.bare())
        .args(["--rev", &rev])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains(&bad_state.display().to_string()), "{err}");
}

#[test]
fn nix_errors_are_shown_and_not_cached() {
    let repo = Repo::new();
    let runner = Runner::new();
    let syntax = repo.commit(&[("flake.nix", "{ outputs = { self }: { oops ")]);
    let (code, err) = expect_failure(&runner, &mut env_cmd(&runner, &repo.bare(), &syntax, &[]));
    assert_eq!(code, 1);
    assert!(
        err.contains("error:") && err.contains("syntax error"),
        "{err}"
    );

    let broken = format!(
        r#"dep = derivation {{ name = "fails"; system = "{}"; builder = "{BUILDER}"; args = [ "-c" "echo build-broke-on-purpose >&2; exit 3" ]; }};"#,
        system()
    );
    let build = repo.commit(&[("flake.nix", &flake(&broken))]);
    let (code, err) = expect_failure(&runner, &mut env_cmd(&runner, &repo.bare(), &build, &[]));
    assert_eq!(code, 1);
    assert!(
        err.contains("build-broke-on-purpose") || err.contains("fails"),
        "{err}"
    );
    // The same failure is reported again: failures are never cached.
    let (_, again) = expect_failure(&runner, &mut env_cmd(&runner, &repo.bare(), &build, &[]));
    assert!(again.contains("error"), "{again}");
}

#[test]
fn cache_ls_and_gc_remove_entries_with_their_roots() {
    let repo = Repo::new();
    let rev1 = repo.commit(&[("flake.nix", &flake(r#"N = "1";"#))]);
    let rev2 = repo.commit(&[("flake.nix", &flake(r#"N = "2";"#))]);
    let runner = Runner::new();
    let a = runner.env_json(&repo.bare(), &rev1, &[]);
    std::thread::sleep(Duration::from_millis(1100)); // distinct creation seconds
    let b = runner.env_json(&repo.bare(), &rev2, &[]);

    let ls = runner.command().args(["cache", "ls"]).output().unwrap();
    assert!(ls.status.success());
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&ls.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["key"], b["key"], "newest first");
    assert_eq!(lines[0]["status"], "ok");

    let gc = runner
        .command()
        .args(["cache", "gc", "--max-entries", "1"])
        .output()
        .unwrap();
    assert!(
        gc.status.success(),
        "{}",
        String::from_utf8_lossy(&gc.stderr)
    );
    assert!(
        !Path::new(&as_str(&a, "gcroot")).exists(),
        "root of the removed entry"
    );
    assert!(Path::new(&as_str(&b, "gcroot")).exists());
    assert_eq!(runner.env_json(&repo.bare(), &rev2, &[])["cache"], "hit");

    let gc = runner
        .command()
        .args(["cache", "gc", "--older-than", "0s"])
        .output()
        .unwrap();
    assert!(gc.status.success());
    runner.assert_nothing_cached();
}

/// The cache's root keeps the devShell's store path alive, for root's own store and for a
/// user of nix-daemon (an indirect root the daemon records; scripts/test-daemon runs this as
/// such a user): Nix refuses to delete it until `cache gc` removes the root.
#[test]
fn the_cache_root_keeps_the_devshell_from_nix_gc() {
    let repo = Repo::new();
    // A store path of this test alone, so no other root keeps it.
    let rev = repo.commit(&[("flake.nix", &flake(&format!("T = \"{}\";", unique_token())))]);
    let runner = Runner::new();
    let shell = runner.env_json(&repo.bare(), &rev, &[]);
    let path = as_str(&shell, "store_path");
    let delete = || {
        Command::new(real_nix().with_file_name("nix-store"))
            .args(["--delete", &path])
            .output()
            .unwrap()
    };
    let out = delete();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("still alive"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(Path::new(&path).exists());

    let gc = runner
        .command()
        .args(["cache", "gc", "--older-than", "0s"])
        .output()
        .unwrap();
    assert!(gc.status.success());
    let out = delete();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!Path::new(&path).exists(), "deleted once unrooted");
}

fn nix_minor_version() -> (u32, u32) {
    let out = Command::new(real_nix()).arg("--version").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.split_whitespace().last().unwrap().to_string();
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap(), parts.next().unwrap())
}

#[test]
fn refs_nix_needs_are_found_or_asked_for() {
    let repo = Repo::new();
    let on_main = repo.commit(&[("flake.nix", &flake(r#"WHERE = "main";"#))]);
    // A revision only on another branch, which is not what HEAD names.
    git(&repo.src(), &["checkout", "-q", "-b", "feature"]);
    std::fs::write(repo.src().join("flake.nix"), flake(r#"WHERE = "feature";"#)).unwrap();
    git(&repo.src(), &["commit", "-qam", "feature"]);
    let on_feature = git(&repo.src(), &["rev-parse", "HEAD"]);
    // A revision on no branch at all: fetched through a branch that is then deleted.
    std::fs::write(repo.src().join("flake.nix"), flake(r#"WHERE = "nowhere";"#)).unwrap();
    git(&repo.src(), &["commit", "-qam", "dangling"]);
    let dangling = git(&repo.src(), &["rev-parse", "HEAD"]);
    git(&repo.src(), &["checkout", "-q", "main"]);
    git(&repo.src(), &["branch", "-q", "-f", "feature", &on_feature]);
    git(&repo.src(), &["branch", "-q", "gone", &dangling]);
    git(
        &repo.bare(),
        &["fetch", "-q", "../src", "+feature:feature", "+gone:gone"],
    );
    git(&repo.bare(), &["branch", "-q", "-D", "gone"]);

    let runner = Runner::new();
    let script_of = |v: &serde_json::Value| std::fs::read_to_string(as_str(v, "script")).unwrap();
    let main = runner.env_json(&repo.bare(), &on_main, &[]);
    assert!(script_of(&main).contains("WHERE='main'"));
    let feature = runner.env_json(&repo.bare(), &on_feature, &[]);
    assert!(
        as_str(&feature, "url").contains("ref=feature&"),
        "{feature}"
    );
    assert!(script_of(&feature).contains("WHERE='feature'"));
    let explicit = runner.env_json(&repo.bare(), &on_feature, &["--ref", "feature"]);
    assert_eq!(
        explicit["key"], feature["key"],
        "the ref is not part of the key"
    );

    let out = runner.env_output(&repo.bare(), &dangling, &[]);
    if nix_minor_version() >= (2, 20) {
        // Current Nix fetches a bare revision: no ref needed.
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(!as_str(&v, "url").contains("ref="), "{v}");
        assert!(script_of(&v).contains("WHERE='nowhere'"));
    } else {
        // Nix 2.8 cannot fetch a revision without a ref: the runner says so plainly.
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("pass --ref") && err.contains(&dangling),
            "{err}"
        );
    }
}
