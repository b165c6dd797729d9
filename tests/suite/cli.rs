//! The command line's conventions: one exit-code table that `--help` prints and every command
//! follows, a closed pipe that ends quietly, and no colour where there is no terminal.

use crate::support;

use std::process::{Command, Output};

use support::Runner;

const REV: &str = "0123456789abcdef0123456789abcdef01234567";

fn code(out: &Output) -> i32 {
    out.status.code().expect("exited, not killed")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A runner whose config has a good account `work`, and a job for it on a real directory.
fn runner_with_job() -> (Runner, tempfile::TempDir, std::path::PathBuf) {
    let runner = Runner::new();
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, "sk-unused\n").unwrap();
    let config =
        serde_json::json!({"accounts": {"work": {"agent": "claude", "api_key_file": key}}});
    std::fs::write(runner.state().join("config.json"), config.to_string()).unwrap();
    let job = dir.path().join("job.json");
    let spec = serde_json::json!({"repo": dir.path(), "rev": REV, "trust": "trusted",
        "agent": "claude", "account": "work", "prompt": "p"});
    std::fs::write(&job, spec.to_string()).unwrap();
    (runner, dir, job)
}

#[test]
fn help_lists_the_exit_codes_of_src_exit() {
    let out = Command::new(env!("CARGO_BIN_EXE_quest-runner"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let listed: Vec<u8> = help
        .lines()
        .filter_map(|l| {
            l.strip_prefix("  ")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect();
    assert_eq!(listed, [0, 1, 2, 3, 4, 5, 130, 143], "{help}");
    assert!(
        help.contains("3    the host is not ready: a missing binary"),
        "{help}"
    );
}

/// The first line a user reads says what the program does, the same words as the man page's
/// NAME and the binary package's description, not the core library's.
#[test]
fn help_opens_with_what_the_program_does() {
    let binary = env!("CARGO_BIN_EXE_quest-runner");
    let out = Command::new(binary).arg("--help").output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let help = String::from_utf8_lossy(&out.stdout);
    // One line at clap's width (100 columns without a terminal), a paragraph on a narrower one.
    let opening: Vec<&str> = help.lines().take_while(|l| !l.is_empty()).collect();
    assert_eq!(opening, [env!("CARGO_PKG_DESCRIPTION")], "{help}");
    let man = Command::new(binary).arg("man").output().unwrap();
    let page = String::from_utf8_lossy(&man.stdout);
    let name = page
        .lines()
        .skip_while(|l| *l != ".SH NAME")
        .nth(1)
        .unwrap_or_default()
        .replace("\\-", "-")
        .replace("\\*(Aq", "'");
    let expected = format!("quest-runner - {}", env!("CARGO_PKG_DESCRIPTION"));
    assert_eq!(name, expected, "{page}");
}

#[test]
fn a_missing_binary_is_exit_3_for_run_as_help_says() {
    let (runner, _dir, job) = runner_with_job();
    let out = runner
        .command()
        .args(["run", "--job"])
        .arg(&job)
        // The agent is found (any executable), the sandbox is not.
        .env("QUEST_RUNNER_CLAUDE", "/bin/true")
        .env("QUEST_RUNNER_BWRAP", "/nonexistent/bwrap")
        .output()
        .unwrap();
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("host not ready: bwrap"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_bad_config_or_account_file_is_exit_2_for_doctor_submit_and_run() {
    let (runner, dir, job) = runner_with_job();
    let config = runner.state().join("config.json");
    let missing = dir.path().join("missing-key");
    let bad_account =
        serde_json::json!({"accounts": {"work": {"agent": "claude", "api_key_file": missing}}});
    for (text, says) in [
        (
            r#"{"default_timeout": "forever"}"#.to_string(),
            "default_timeout: \"forever\"",
        ),
        (
            bad_account.to_string(),
            "account work: accounts.work.api_key_file: ",
        ),
    ] {
        std::fs::write(&config, &text).unwrap();
        for args in [&["doctor"][..], &["submit"], &["run", "--job"]] {
            let mut cmd = runner.command();
            cmd.args(args);
            if args.len() > 1 || args[0] == "submit" {
                cmd.arg(&job);
            }
            let out = cmd.output().unwrap();
            let (err, all) = (
                stderr(&out),
                String::from_utf8_lossy(&out.stdout).into_owned(),
            );
            assert_eq!(code(&out), 2, "{args:?} on {text}: {err}{all}");
            assert!(
                err.contains(says) || all.contains(says),
                "{args:?}: {err}{all}"
            );
        }
        // `doctor --json`: the same checks and exit code, for monitoring.
        let out = runner
            .command()
            .args(["doctor", "--json"])
            .output()
            .unwrap();
        assert_eq!(code(&out), 2, "{}", stderr(&out));
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let checks = doc["checks"].as_array().unwrap();
        assert!(checks
            .iter()
            .all(|c| ["ok", "warn", "fail"].contains(&c["status"].as_str().unwrap())));
        assert!(
            checks
                .iter()
                .any(|c| c["status"] == "fail" && c["detail"].as_str().unwrap().contains(says)),
            "{doc}"
        );
    }
}

#[test]
fn a_closed_pipe_ends_quietly_and_logs_have_no_colour_off_a_terminal() {
    // The reader (`true`) is gone before the runner writes: its write gets EPIPE.
    let out = Command::new("sh")
        .args([
            "-c",
            r#"{ sleep 0.3; "$0" systemd-unit; echo "exit $?" >&2; } | true"#,
        ])
        .arg(env!("CARGO_BIN_EXE_quest-runner"))
        .output()
        .unwrap();
    assert_eq!(stderr(&out), "exit 0\n");
    // `jobs --json | head -1`, with a job queued.
    let (runner, _dir, job) = runner_with_job();
    let submitted = runner.command().arg("submit").arg(&job).output().unwrap();
    assert_eq!(code(&submitted), 0, "{}", stderr(&submitted));
    let out = Command::new("sh")
        .args([
            "-c",
            r#"{ sleep 0.3; "$0" "$@"; echo "exit $?" >&2; } | true"#,
        ])
        .arg(env!("CARGO_BIN_EXE_quest-runner"))
        .arg("--state-dir")
        .arg(runner.state())
        .args(["jobs", "--json"])
        .output()
        .unwrap();
    // No serve holds this state directory, so `jobs` warns that the queued job waits: that
    // line is expected; the closed pipe must add nothing (no panic, no "Broken pipe").
    let said = stderr(&out);
    let (warning, rest) = said.split_once('\n').unwrap_or(("", &said));
    assert!(warning.contains("no serve is running"), "{said}");
    assert_eq!(rest, "exit 0\n", "{said}");
    // Log lines on a pipe: plain text, whatever TERM says; `--color always` forces escapes.
    let repo = support::Repo::new();
    let rev = repo.commit(&[("README", "no flake here\n")]);
    for (color, escapes) in [("auto", false), ("never", false), ("always", true)] {
        // A state directory each: the answer is cached, and a cache hit logs nothing.
        let out = Runner::new()
            .command()
            .args(["--color", color, "env", "--repo"])
            .arg(repo.src())
            .args(["--rev", &rev])
            .env("TERM", "xterm-256color")
            .output()
            .unwrap();
        let err = stderr(&out);
        assert!(
            err.contains("revision has no flake.nix"),
            "a log line: {out:?}"
        );
        assert_eq!(err.contains('\u{1b}'), escapes, "--color {color}: {err}");
    }
}

#[test]
fn show_logs_and_gc_see_jobs_that_run_made() {
    let (runner, dir, _job) = runner_with_job();
    let missing = format!("file://{}", dir.path().join("no-such-repo").display());
    let out = runner
        .command()
        .args(["run", "--id", "by-run", "--repo", &missing, "--rev", REV])
        .args([
            "--trust",
            "trusted",
            "--agent",
            "claude",
            "--account",
            "work",
        ])
        .args(["--prompt", "p"])
        .env("QUEST_RUNNER_CLAUDE", "/bin/true")
        .output()
        .unwrap();
    assert_eq!(code(&out), 1, "the fetch fails: {}", stderr(&out));
    let show = runner.command().args(["show", "by-run"]).output().unwrap();
    assert_eq!(code(&show), 0, "{}", stderr(&show));
    let shown: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(shown["made_by"], "run");
    assert_eq!(shown["state"], "finished");
    assert_eq!(shown["result"]["outcome"], "error");
    let message = shown["result"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("git said: "), "{message}");
    let logs = runner.command().args(["logs", "by-run"]).output().unwrap();
    assert_eq!(code(&logs), 0, "{}", stderr(&logs));
    let gc = runner
        .command()
        .args(["gc", "--older-than", "0s"])
        .output()
        .unwrap();
    assert_eq!(code(&gc), 0, "{}", stderr(&gc));
    let removed: serde_json::Value = serde_json::from_slice(&gc.stdout).unwrap();
    assert_eq!(removed["removed"], serde_json::json!(["by-run"]));
    let gone = runner.command().args(["show", "by-run"]).output().unwrap();
    assert_eq!(code(&gone), 2, "{}", stderr(&gone));
}

#[test]
fn completions_and_the_man_page_come_from_the_command_definition() {
    let runner = Runner::new();
    let bash = runner
        .command()
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert_eq!(code(&bash), 0, "{}", stderr(&bash));
    let script = String::from_utf8_lossy(&bash.stdout);
    assert!(
        script.contains("quest-runner") && script.contains("--follow"),
        "every subcommand's options: {script:.200}"
    );
    let unknown = runner
        .command()
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(code(&unknown), 2, "{}", stderr(&unknown));
    let man = runner.command().args(["man"]).output().unwrap();
    assert_eq!(code(&man), 0, "{}", stderr(&man));
    let page = String::from_utf8_lossy(&man.stdout);
    assert!(page.contains(".TH quest-runner 1"), "{page:.200}");
}

/// What a job wrote reaches a person's terminal with what could steer it or reorder what it
/// shows escaped, in every form of `logs` (issue 40): an 8-bit OSC (U+009D … U+009C), DEL,
/// bidi overrides and isolates, zero-width characters. `--json` keeps the text, as JSON
/// escapes; `--transcript` is raw for a program and escaped on a terminal.
#[test]
fn logs_show_no_job_text_that_steers_or_reorders_the_terminal() {
    let runner = Runner::new();
    let dir = runner.state().join("jobs/bidi/runner");
    std::fs::create_dir_all(&dir).unwrap();
    let command = "echo \u{202e}gnp.exe\u{2067} \u{200b}rm\u{feff} -rf \u{9d}8;;x\u{9c}\u{7f}";
    let lines = [
        serde_json::json!({"type": "text", "part": {"text": format!("hello \u{9d}0;title\u{9c} {command}")}}),
        serde_json::json!({"type": "tool_use", "part": {"tool": "bash", "state": {
            "status": "completed", "input": {"command": command}, "output": command}}}),
    ];
    let transcript: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(dir.join("transcript.jsonl"), &transcript).unwrap();
    let dangerous = [
        '\u{9d}', '\u{9c}', '\u{7f}', '\u{202e}', '\u{2067}', '\u{200b}', '\u{feff}',
    ];
    let clean = |what: &str, text: &str| {
        let bad: Vec<char> = text.chars().filter(|c| dangerous.contains(c)).collect();
        assert!(bad.is_empty(), "{what}: {bad:?} in {text:?}");
    };
    let human = runner.command().args(["logs", "bidi"]).output().unwrap();
    assert_eq!(code(&human), 0, "{}", stderr(&human));
    let human = String::from_utf8(human.stdout).unwrap();
    clean("logs", &human);
    assert!(human.contains("\\u{202e}gnp.exe\\u{2067}"), "{human}");
    let json = runner
        .command()
        .args(["logs", "bidi", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&json), 0, "{}", stderr(&json));
    let json = String::from_utf8(json.stdout).unwrap();
    clean("logs --json", &json);
    let tool: serde_json::Value = serde_json::from_str(json.lines().nth(1).unwrap()).unwrap();
    assert_eq!(tool["input"], command, "--json keeps the text: {json}");
    // For a program, the transcript as the agent wrote it.
    let raw = runner
        .command()
        .args(["logs", "bidi", "--transcript"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(raw.stdout).unwrap(), transcript);
    // On a terminal (script(1)'s), escaped.
    let bin = env!("CARGO_BIN_EXE_quest-runner");
    let state = runner.state().display().to_string();
    let on_tty = Command::new("script")
        .args([
            "-qec",
            &format!("{bin} --state-dir {state} logs bidi --transcript"),
        ])
        .arg("/dev/null")
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&on_tty.stdout).to_string();
    assert!(shown.contains("\\u{202e}gnp.exe"), "{shown:?}");
    clean("logs --transcript on a terminal", &shown);
}

/// An id git cannot name as the job's ref is refused before anything is made, by `run` and
/// `submit` alike, exit 2, naming the rule (issue 40: `a..b`, `x.lock` and `x.` ran, and the
/// agent's commits were then lost to "invalid refspec").
#[test]
fn an_id_git_cannot_name_is_refused_before_anything_is_made() {
    let (runner, dir, _) = runner_with_job();
    for (id, rule) in [
        ("a..b", "contains `..`"),
        ("x.lock", "ends in `.lock`"),
        ("x.", "ends with a dot"),
    ] {
        let job = dir.path().join(format!("job-{id}.json"));
        let spec = serde_json::json!({"id": id, "repo": dir.path(), "rev": REV,
            "trust": "trusted", "agent": "claude", "account": "work", "prompt": "p"});
        std::fs::write(&job, spec.to_string()).unwrap();
        for args in [&["submit"][..], &["run", "--job"]] {
            let out = runner
                .command()
                .args(args)
                .arg(&job)
                .env("QUEST_RUNNER_CLAUDE", "/bin/true")
                .output()
                .unwrap();
            let err = stderr(&out);
            assert_eq!(code(&out), 2, "{args:?} {id}: {err}");
            assert!(err.contains(rule) && err.contains("not a job id"), "{err}");
        }
        assert!(
            !runner.state().join("jobs").join(id).exists(),
            "{id}: a job dir"
        );
    }
    let queued = std::fs::read_dir(runner.state().join("queue"))
        .map(|d| d.flatten().count())
        .unwrap_or(0);
    assert_eq!(queued, 0, "a refused id was queued");
}
