//! Names of users and groups, as the host's user and group databases give them, without ever
//! loading an NSS module into this process.
//!
//! The shipped binary is a static PIE (scripts/release-cargo). glibc's `getpw*`/`getgr*` in a
//! static process still `dlopen` the modules `/etc/nsswitch.conf` names beyond `files`
//! (`systemd`, which Debian's and Ubuntu's `libnss-systemd` adds; `sss`, `ldap`, `winbind`),
//! and such a module brings the dynamic libc into the static process: SIGSEGV, exit 139, no
//! message (issue 24). So `/etc/passwd` and `/etc/group` are read here, as glibc's `files`
//! source reads them, and whatever they do not answer — a `DynamicUser=` or userdb user, a
//! directory's user or group — is asked of `getent` when nsswitch.conf names another source:
//! a dynamically linked program of the C library, which loads those modules in its own
//! process. Used only to word messages and checks, so an unanswered lookup is a number.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::binaries::{self, Tool};

/// The name of `uid`, or its number when it has none.
pub fn user_name(uid: u32) -> String {
    Databases::host().user_and_groups(uid).0
}

/// `"name (uid N)"`, how messages name an owner.
pub fn describe(uid: u32) -> String {
    format!("{} (uid {uid})", user_name(uid))
}

/// This user's name and the names of its groups (its primary group and those that list it),
/// as `getgrouplist` would give them. A uid without a name is shown as its number.
pub fn user_and_groups(uid: u32) -> (String, Vec<String>) {
    Databases::host().user_and_groups(uid)
}

/// The number of members the group `name` lists, `None` when there is no such group.
pub fn group_members(name: &str) -> Option<usize> {
    Databases::host()
        .group(Key::Name(name))
        .map(|g| g.members.len())
}

/// Where the databases are read from; the host's, or a test's files.
#[derive(Debug, Clone)]
pub struct Databases {
    pub passwd: PathBuf,
    pub group: PathBuf,
    pub nsswitch: PathBuf,
    /// The program asked what the files do not answer; `None`: nothing else is asked.
    pub getent: Option<PathBuf>,
}

/// A passwd entry's fields the runner uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

/// A group entry's fields the runner uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub name: String,
    pub gid: u32,
    pub members: Vec<String>,
}

/// What a lookup is keyed by.
#[derive(Debug, Clone, Copy)]
pub enum Key<'a> {
    Id(u32),
    Name(&'a str),
}

impl Key<'_> {
    fn arg(&self) -> String {
        match self {
            Key::Id(id) => id.to_string(),
            Key::Name(name) => name.to_string(),
        }
    }
}

/// How long one `getent` may take: a directory server that does not answer must not hold up
/// `doctor`; its entries are then shown as numbers.
const GETENT_LIMIT: Duration = Duration::from_secs(10);

impl Databases {
    /// The host's: `/etc`'s files, and `getent` found as every program is (`QUEST_RUNNER_GETENT`,
    /// then `PATH`).
    pub fn host() -> Databases {
        Databases {
            passwd: PathBuf::from("/etc/passwd"),
            group: PathBuf::from("/etc/group"),
            nsswitch: PathBuf::from("/etc/nsswitch.conf"),
            getent: binaries::find(Tool::Getent).ok(),
        }
    }

    /// See [`user_and_groups`].
    pub fn user_and_groups(&self, uid: u32) -> (String, Vec<String>) {
        let Some(user) = self.user(Key::Id(uid)) else {
            return (uid.to_string(), Vec::new());
        };
        let mut gids = vec![user.gid];
        let mut add = |gid: u32| {
            if !gids.contains(&gid) {
                gids.push(gid);
            }
        };
        for g in parse_file(&self.group, parse_group) {
            if g.members.contains(&user.name) {
                add(g.gid);
            }
        }
        if let Some(out) = self.ask("group", &["initgroups", &user.name]) {
            // "name   gid gid ...": the supplementary groups of every source.
            for gid in out
                .split_whitespace()
                .skip(1)
                .filter_map(|g| g.parse().ok())
            {
                add(gid);
            }
        }
        let groups = self.group_names(&gids);
        (user.name, groups)
    }

    /// The passwd entry of `key`: `/etc/passwd`'s, else the other sources'.
    pub fn user(&self, key: Key) -> Option<User> {
        let matches = |u: &User| match key {
            Key::Id(id) => u.uid == id,
            Key::Name(name) => u.name == name,
        };
        parse_file(&self.passwd, parse_passwd)
            .into_iter()
            .find(matches)
            .or_else(|| {
                let out = self.ask("passwd", &["passwd", &key.arg()])?;
                out.lines().filter_map(parse_passwd).find(matches)
            })
    }

    /// The group entry of `key`: `/etc/group`'s, else the other sources'.
    pub fn group(&self, key: Key) -> Option<Group> {
        let matches = |g: &Group| match key {
            Key::Id(id) => g.gid == id,
            Key::Name(name) => g.name == name,
        };
        parse_file(&self.group, parse_group)
            .into_iter()
            .find(matches)
            .or_else(|| {
                let out = self.ask("group", &["group", &key.arg()])?;
                out.lines().filter_map(parse_group).find(matches)
            })
    }

    /// The names of `gids`, in order; one `getent` for all those the file does not name.
    fn group_names(&self, gids: &[u32]) -> Vec<String> {
        let mut known = parse_file(&self.group, parse_group);
        let missing: Vec<String> = gids
            .iter()
            .filter(|gid| !known.iter().any(|g| g.gid == **gid))
            .map(u32::to_string)
            .collect();
        if !missing.is_empty() {
            let mut args = vec!["group"];
            args.extend(missing.iter().map(String::as_str));
            if let Some(out) = self.ask("group", &args) {
                known.extend(out.lines().filter_map(parse_group));
            }
        }
        gids.iter()
            .filter_map(|gid| known.iter().find(|g| g.gid == *gid))
            .map(|g| g.name.clone())
            .collect()
    }

    /// `getent ARGS`' output, when nsswitch.conf names a source beyond `files` for `database`.
    /// Its exit status is not looked at: with several keys it is 2 when any one is missing,
    /// and the ones found are printed all the same.
    fn ask(&self, database: &str, args: &[&str]) -> Option<String> {
        let getent = self.getent.as_deref()?;
        let config = std::fs::read_to_string(&self.nsswitch).unwrap_or_default();
        if !names_other_sources(&config, database) {
            return None;
        }
        run_bounded(getent, args)
    }
}

/// Whether nsswitch.conf's line for `database` names a source other than `files` (without
/// the file, or the line, glibc reads the files only).
pub fn names_other_sources(config: &str, database: &str) -> bool {
    let Some(sources) = config.lines().find_map(|line| {
        let line = line.split('#').next().unwrap_or_default();
        let (db, sources) = line.split_once(':')?;
        (db.trim() == database).then_some(sources)
    }) else {
        return false;
    };
    let mut in_action = false;
    sources.split_whitespace().any(|word| {
        // `[NOTFOUND=return]` and the like are actions, not sources.
        let action = in_action || word.starts_with('[');
        in_action = action && !word.ends_with(']');
        !action && word != "files"
    })
}

fn run_bounded(program: &Path, args: &[&str]) -> Option<String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    // Read while it runs: a large group fills the pipe before the program exits.
    let mut stdout = child.stdout.take()?;
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut out).map(|_| out)
    });
    let started = Instant::now();
    while matches!(child.try_wait(), Ok(None)) {
        if started.elapsed() > GETENT_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            tracing::warn!(program = %program.display(), ?args, "no answer in time: shown as numbers");
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    reader.join().ok()?.ok()
}

fn parse_file<T>(path: &Path, parse: fn(&str) -> Option<T>) -> Vec<T> {
    std::fs::read_to_string(path)
        .map(|text| text.lines().filter_map(parse).collect())
        .unwrap_or_default()
}

/// `name:password:uid:gid:gecos:home:shell`. NIS's `+`/`-` lines are `compat`'s, not entries.
pub fn parse_passwd(line: &str) -> Option<User> {
    let mut f = line.split(':');
    let name = f
        .next()
        .filter(|n| !n.is_empty() && !n.starts_with(['+', '-', '#']))?;
    let _password = f.next()?;
    let uid = f.next()?.parse().ok()?;
    let gid = f.next()?.parse().ok()?;
    Some(User {
        name: name.to_string(),
        uid,
        gid,
    })
}

/// `name:password:gid:member,member`.
pub fn parse_group(line: &str) -> Option<Group> {
    let mut f = line.split(':');
    let name = f
        .next()
        .filter(|n| !n.is_empty() && !n.starts_with(['+', '-', '#']))?;
    let _password = f.next()?;
    let gid = f.next()?.parse().ok()?;
    let members = f
        .next()
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .map(str::to_string)
        .collect();
    Some(Group {
        name: name.to_string(),
        gid,
        members,
    })
}

#[cfg(test)]
#[path = "users_tests.rs"]
mod tests;
