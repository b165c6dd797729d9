use super::*;

fn shim() -> BwrapShim {
    BwrapShim {
        runner: "/opt/qr/bin/quest-runner".into(),
        bwrap: "/usr/bin/bwrap".into(),
        helper: "/opt/srt/vendor/seccomp/x64/apply-seccomp".into(),
    }
}

#[test]
fn the_script_runs_the_runners_bwrap_mode_with_every_argument() {
    let script = shim().script(Path::new("/opt/claude/bin/claude.exe"));
    assert!(script.starts_with("#!/bin/sh\n"), "{script}");
    assert!(
        script.ends_with(
            "exec '/opt/qr/bin/quest-runner' --quest-bwrap '/usr/bin/bwrap' '/opt/claude/bin/claude.exe' '/opt/srt/vendor/seccomp/x64/apply-seccomp' \"$@\"\n"
        ),
        "{script}"
    );
}

#[test]
fn paths_in_the_script_are_quoted() {
    let mut odd = shim();
    odd.runner = "/opt/it's here/quest-runner".into();
    let script = odd.script(Path::new("/a b/claude"));
    assert!(
        script.contains("'/opt/it'\\''s here/quest-runner'"),
        "{script}"
    );
    assert!(script.contains("'/a b/claude'"), "{script}");
}
