use super::*;

fn line(text: &str) -> Vec<OsString> {
    text.split_whitespace().map(OsString::from).collect()
}

fn text(args: &[OsString]) -> String {
    let words: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    words.join(" ")
}

#[test]
fn an_operation_a_later_one_repeats_goes() {
    // Claude Code's shape: a round of binds, /tmp hidden, the same round again.
    let args = line(
        "--new-session --ro-bind / / --bind /tmp/j /tmp/j --bind /c /c --bind /c /c \
         --tmpfs /tmp --bind /tmp/j /tmp/j --bind /c /c --dev /dev -- sh -c true",
    );
    assert_eq!(
        text(&without_repeats(args)),
        "--new-session --ro-bind / / --tmpfs /tmp --bind /tmp/j /tmp/j --bind /c /c --dev /dev \
         -- sh -c true"
    );
}

#[test]
fn an_operation_stays_when_its_destination_is_touched_before_the_repeat() {
    for between in [
        "--ro-bind /dev/null /c/secret",
        "--tmpfs /c/x",
        "--remount-ro /c",
        "--chmod 0700 /c/x",
        "--bind /d /c",
    ] {
        let args = line(&format!("--bind /c /c {between} --bind /c /c -- true"));
        assert_eq!(without_repeats(args.clone()), args, "{between}");
    }
    // A sibling or a parent of it mounted in between does not.
    let args = line("--bind /c /c --bind /cd /cd --bind /c /c -- true");
    assert_eq!(
        text(&without_repeats(args)),
        "--bind /cd /cd --bind /c /c -- true"
    );
}

#[test]
fn a_line_it_cannot_read_whole_passes_unchanged() {
    for args in [
        "--bind /c /c --frobnicate --bind /c /c -- true",
        "--args 7 --bind /c /c --bind /c /c -- true",
        "--bind /c",
        // `--perms` belongs to the first tmpfs; a parent made read-only in between.
        "--perms 0700 --tmpfs /t --tmpfs /t -- true",
        "--tmpfs /t --bind /s /t/x --remount-ro /t --bind /s /t/x -- true",
    ] {
        let args = line(args);
        assert_eq!(without_repeats(args.clone()), args, "{}", text(&args));
    }
}

#[test]
fn the_command_is_never_read_as_options() {
    let args = line("--bind /c /c -- sh --bind /c /c");
    assert_eq!(without_repeats(args.clone()), args);
    let args = line("--bind /c /c --bind /c /c /bin/true --bind /c /c");
    assert_eq!(
        text(&without_repeats(args)),
        "--bind /c /c /bin/true --bind /c /c"
    );
}
