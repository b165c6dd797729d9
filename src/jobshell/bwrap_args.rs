//! Claude Code's bubblewrap line without the mounts a later one repeats (issue 42).
//!
//! Claude Code's sandbox binds each writable path in two rounds, and the checkout three times
//! in each (it is the working directory, the project and a write rule): a line of ~127 mount
//! operations, 12 of them the same as a later one. bubblewrap reads the whole mount table
//! again for every mount it makes, and inside a job's namespace that table is long, so every
//! mount costs every command.
//!
//! An operation that is repeated later, with nothing mounted at or under its destination in
//! between, leaves no trace in the view the command gets: the later one mounts the same
//! source (bubblewrap resolves every source in the original tree, never in the one it builds)
//! over everything at that destination. Dropping the earlier one is then exact. Anything that
//! touches the destination in between (a mount at or below it, a `--chmod`, a `--remount-ro`
//! of it or of a parent) keeps it, as does a `--perms` or `--size` attached to it; a line with
//! an option this parser does not know, or with `--args` (more options from a descriptor), is
//! passed on whole.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The operations that may be dropped: a source and a destination, or a destination.
const DROPPABLE: &[&[u8]] = &[
    b"--bind",
    b"--bind-try",
    b"--ro-bind",
    b"--ro-bind-try",
    b"--dev-bind",
    b"--dev-bind-try",
    b"--tmpfs",
];

/// How many values each option takes, and whether its last one is a path it mounts or
/// changes (its destination).
fn arity(option: &[u8]) -> Option<(usize, bool)> {
    Some(match option {
        b"--unshare-all"
        | b"--share-net"
        | b"--unshare-user"
        | b"--unshare-user-try"
        | b"--unshare-ipc"
        | b"--unshare-pid"
        | b"--unshare-net"
        | b"--unshare-uts"
        | b"--unshare-cgroup"
        | b"--unshare-cgroup-try"
        | b"--clearenv"
        | b"--new-session"
        | b"--die-with-parent"
        | b"--as-pid-1"
        | b"--disable-userns"
        | b"--assert-userns-disabled"
        | b"--level-prefix" => (0, false),
        b"--argv0" | b"--userns" | b"--userns2" | b"--pidns" | b"--uid" | b"--gid"
        | b"--hostname" | b"--chdir" | b"--unsetenv" | b"--lock-file" | b"--sync-fd"
        | b"--exec-label" | b"--file-label" | b"--seccomp" | b"--add-seccomp-fd"
        | b"--block-fd" | b"--userns-block-fd" | b"--info-fd" | b"--json-status-fd"
        | b"--cap-add" | b"--cap-drop" | b"--perms" | b"--size" | b"--overlay-src" => (1, false),
        b"--remount-ro" | b"--proc" | b"--dev" | b"--tmpfs" | b"--mqueue" | b"--dir"
        | b"--tmp-overlay" | b"--ro-overlay" => (1, true),
        b"--setenv" => (2, false),
        b"--bind" | b"--bind-try" | b"--dev-bind" | b"--dev-bind-try" | b"--ro-bind"
        | b"--ro-bind-try" | b"--bind-fd" | b"--ro-bind-fd" | b"--file" | b"--bind-data"
        | b"--ro-bind-data" | b"--symlink" | b"--chmod" => (2, true),
        b"--overlay" => (3, true),
        _ => return None,
    })
}

/// One option with its values.
struct Op<'a> {
    words: &'a [OsString],
}

impl Op<'_> {
    fn name(&self) -> &[u8] {
        self.words[0].as_bytes()
    }

    fn destination(&self) -> Option<&Path> {
        match arity(self.name()) {
            Some((n, true)) if n > 0 => self.words.last().map(|d| Path::new(d.as_os_str())),
            _ => None,
        }
    }
}

/// `args` (bubblewrap's, the command after `--` or the first word that is no option) with
/// every droppable operation a later identical one repeats removed; `args` unchanged when any
/// option is unknown.
pub fn without_repeats(args: Vec<OsString>) -> Vec<OsString> {
    let Some((ops, command_at)) = parse(&args) else {
        return args;
    };
    let mut drop = vec![false; ops.len()];
    for (i, op) in ops.iter().enumerate() {
        let attached = i > 0 && matches!(ops[i - 1].name(), b"--perms" | b"--size");
        let droppable = DROPPABLE.contains(&op.name());
        let Some(dest) = op.destination().filter(|_| droppable && !attached) else {
            continue;
        };
        for later in &ops[i + 1..] {
            if later.words == op.words {
                drop[i] = true;
                break;
            }
            let touches = later.destination().is_some_and(|d| {
                // Below it; or a parent made read-only, where the repeat's mount point
                // could no longer be made without the first.
                d.starts_with(dest) || (later.name() == b"--remount-ro" && dest.starts_with(d))
            });
            if touches {
                break;
            }
        }
    }
    let mut out: Vec<OsString> = ops
        .iter()
        .zip(&drop)
        .filter(|(_, dropped)| !**dropped)
        .flat_map(|(op, _)| op.words.iter().cloned())
        .collect();
    out.extend(args[command_at..].iter().cloned());
    out
}

/// The options up to the command, and where the command starts; `None` for an option this
/// does not know, or `--args`.
fn parse(args: &[OsString]) -> Option<(Vec<Op<'_>>, usize)> {
    let mut ops = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let word = args[i].as_bytes();
        if word == b"--" || !word.starts_with(b"--") {
            return Some((ops, i));
        }
        let (n, _) = arity(word)?;
        let end = i + 1 + n;
        ops.push(Op {
            words: args.get(i..end)?,
        });
        i = end;
    }
    Some((ops, i))
}

#[cfg(test)]
#[path = "bwrap_args_tests.rs"]
mod tests;
