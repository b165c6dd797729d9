use super::*;
use std::process::Command;

const SAMPLE: &str = r#"{
  "bashFunctions": { "greet": "    echo \"hi $1\"\n" },
  "variables": {
    "HOME": {"type": "exported", "value": "/homeless-shelter"},
    "TMPDIR": {"type": "exported", "value": "/tmp/nix-build-x"},
    "TERM": {"type": "exported", "value": "xterm"},
    "BASHPID": {"type": "unknown"},
    "EPOCHSECONDS": {"type": "var", "value": "1"},
    "PATH": {"type": "exported", "value": "/nix/store/aaa-tool/bin"},
    "QUOTED": {"type": "exported", "value": "it's $HOME `x` \"y\"\nline2"},
    "plain": {"type": "var", "value": "not exported"},
    "arr": {"type": "array", "value": ["a b", "c'd"]},
    "assoc": {"type": "associative", "value": {"k 1": "v'1"}},
    "bad-name": {"type": "exported", "value": "x"},
    "shellHook": {"type": "exported", "value": "echo hook:$QUOTED_LEN; greet hook"}
  }
}"#;

fn rendered() -> String {
    render_json(SAMPLE.as_bytes(), "test").unwrap()
}

/// Sources the script in a clean bash and prints what it defines.
fn source_and(script: &str, then: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("env.sh");
    std::fs::write(&path, script).unwrap();
    let out = Command::new("bash")
        .arg("--noprofile")
        .arg("--norc")
        .arg("-c")
        .arg(format!("QUOTED_LEN=1; . {}; {then}", path.display()))
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", "/sandbox/home")
        .env("TMPDIR", "/sandbox/tmp")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn sandbox_variables_are_left_to_the_sandbox() {
    let script = rendered();
    for name in ["HOME", "TMPDIR", "TERM", "BASHPID", "EPOCHSECONDS"] {
        assert!(
            !script.contains(&format!("{name}=")),
            "{name} leaked:\n{script}"
        );
    }
    let out = source_and(&script, "echo $HOME $TMPDIR");
    assert!(out.ends_with("/sandbox/home /sandbox/tmp\n"), "{out}");
}

#[test]
fn path_is_prepended() {
    let out = source_and(&rendered(), "echo $PATH");
    assert!(
        out.ends_with("/nix/store/aaa-tool/bin:/usr/bin:/bin\n"),
        "{out}"
    );
}

#[test]
fn values_survive_quoting() {
    let out = source_and(
        &rendered(),
        r#"printf '%s|' "$QUOTED" "$plain" "${arr[@]}" "${assoc[k 1]}"; env | grep -c '^plain=' || true"#,
    );
    assert!(
        out.contains("it's $HOME `x` \"y\"\nline2|not exported|a b|c'd|v'1|"),
        "{out}"
    );
    assert!(
        out.ends_with("0\n"),
        "plain var must not be exported: {out}"
    );
}

#[test]
fn functions_are_kept_and_hook_runs_last() {
    let script = rendered();
    let hook_at = script.find("eval \"${shellHook:-}\"").unwrap();
    assert!(script.find("greet ()").unwrap() < hook_at);
    assert!(script.find("export QUOTED=").unwrap() < hook_at);
    let out = source_and(&script, "greet after");
    assert_eq!(out, "hook:1\nhi hook\nhi after\n");
}

#[test]
fn names_bash_cannot_define_are_left_out() {
    assert!(!rendered().contains("bad-name"));
}

#[test]
fn quote_handles_single_quotes() {
    assert_eq!(quote("a'b"), "'a'\\''b'");
    assert_eq!(quote(""), "''");
}

#[test]
fn unknown_json_is_an_error() {
    let err = render_json(b"{\"variables\": 3}", "x").unwrap_err();
    assert!(err.to_string().contains("does not understand"));
}
