//! The Nix setup the runner finds, and what is wrong with it: `doctor` reports it and
//! `selftest` refuses to start on a failure, instead of failing at its first devShell.
//!
//! The setups the runner supports (docs/nix.md, "Supported Nix setups"):
//! - (a) the runner as root with single-user Nix (a local store): Nix builds as the users of
//!   `build-users-group`, in its sandbox. What `scripts/setup` makes on Debian and Ubuntu.
//! - (b) the runner as any user through `nix-daemon` (NixOS, the official multi-user
//!   installer, Debian's `nix-setup-systemd`): the daemon builds, in its sandbox, as its build
//!   users; the user must be in the daemon's `allowed-users`.
//!
//! Which store a `nix` opens follows Nix's own rule for the default `store = auto`: the local
//! store when its state directory is writable, else the daemon when its socket exists.
//! Facts are gathered first ([`Facts::gather`]), then judged by a pure function ([`checks`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::binaries::{self, Tool};
use crate::preflight::Check;

/// What the checks need to know about the host.
#[derive(Debug, Clone)]
pub struct Facts {
    pub uid: u32,
    pub user: String,
    /// The groups the user is in, by name.
    pub groups: Vec<String>,
    /// `nix --version`'s number, or why it could not be had.
    pub version: Result<String, String>,
    /// `nix show-config`, as this user's nix sees it (nix.conf, `NIX_CONFIG`).
    pub config: BTreeMap<String, String>,
    /// Nix's state directory (`NIX_STATE_DIR`, else `/nix/var/nix`) and whether this user may
    /// write it (then `store = auto` opens the local store).
    pub state_dir: PathBuf,
    pub state_dir_exists: bool,
    pub state_dir_writable: bool,
    /// The daemon's socket (`NIX_DAEMON_SOCKET_PATH`, else under the state directory).
    pub socket: PathBuf,
    pub socket_exists: bool,
    /// `nix store ping` through the daemon, when the daemon is the store.
    pub ping: Option<Result<(), String>>,
    /// The members of the group `build-users-group` names, `None` when it does not exist.
    pub build_group_members: Option<usize>,
}

/// Which store this user's `nix` opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Store {
    Local,
    Daemon(PathBuf),
    /// Neither: no write access to the local store and no daemon socket.
    Unreachable,
    /// No `/nix` at all for a user who is not root: Nix would make a store under
    /// `~/.local/share/nix/root`, whose paths are not under `/nix/store` where a job's sandbox
    /// looks for them.
    Chroot,
    /// A store URL the runner does not judge (`ssh://`, a chroot store, ...).
    Other(String),
}

impl Facts {
    pub fn store(&self) -> Store {
        // Nix's own order for `auto`: a writable state directory, then the daemon's socket,
        // then (Linux, not root, no state directory) a chroot store, else the local store,
        // which only root can create.
        let url = self.config.get("store").map(String::as_str);
        match url.unwrap_or("auto") {
            "auto" | "" if self.state_dir_writable => Store::Local,
            "auto" | "" if self.socket_exists => Store::Daemon(self.socket.clone()),
            "auto" | "" if self.uid != 0 && !self.state_dir_exists => Store::Chroot,
            "auto" | "" if self.uid == 0 => Store::Local,
            "auto" | "" => Store::Unreachable,
            "local" => Store::Local,
            "daemon" => Store::Daemon(self.socket.clone()),
            url => match url.strip_prefix("unix://") {
                Some(path) => Store::Daemon(PathBuf::from(path)),
                None => Store::Other(url.to_string()),
            },
        }
    }

    /// Asks the host: the `nix` the runner would use, this process's user, the group database.
    pub fn gather() -> Facts {
        let uid = rustix::process::geteuid().as_raw();
        let (user, groups) = crate::users::user_and_groups(uid);
        let state_dir = std::env::var_os("NIX_STATE_DIR")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/nix/var/nix"));
        let socket = std::env::var_os("NIX_DAEMON_SOCKET_PATH")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| state_dir.join("daemon-socket/socket"));
        let mut facts = Facts {
            uid,
            user,
            groups,
            version: Err("not asked".into()),
            config: BTreeMap::new(),
            ping: None,
            build_group_members: None,
            state_dir_writable: rustix::fs::access(
                &state_dir,
                rustix::fs::Access::READ_OK | rustix::fs::Access::WRITE_OK,
            )
            .is_ok(),
            socket_exists: socket.exists(),
            state_dir_exists: state_dir.exists(),
            state_dir,
            socket,
        };
        let nix = match binaries::find(Tool::Nix) {
            Ok(nix) => nix,
            Err(e) => {
                facts.version = Err(e.to_string());
                return facts;
            }
        };
        facts.version = nix_output(&nix, &["--version"]).map(|text| {
            // "nix (Nix) 2.8.0"
            text.split_whitespace()
                .last()
                .unwrap_or_default()
                .to_string()
        });
        if let Ok(text) = nix_output(&nix, &["show-config"]) {
            facts.config = text
                .lines()
                .filter_map(|l| l.split_once(" = "))
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .collect();
        }
        if matches!(facts.store(), Store::Daemon(_)) {
            facts.ping = Some(nix_output(&nix, &["store", "ping"]).map(drop));
        }
        if let Some(group) = facts
            .config
            .get("build-users-group")
            .filter(|g| !g.is_empty())
        {
            facts.build_group_members = crate::users::group_members(group);
        }
        facts
    }
}

/// Runs the runner's `nix` with the features the runner enables for its own runs.
fn nix_output(nix: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new(nix)
        .args(["--extra-experimental-features", "nix-command flakes"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running {}: {e}", nix.display()))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        // Nix's last line is its error; earlier lines are warnings.
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        Err(last.trim().trim_start_matches("error: ").to_string())
    }
}

/// The checks of the Nix setup, in the order a fix is needed.
pub fn checks(f: &Facts) -> Vec<Check> {
    let mut checks = vec![flakes_check(f), store_check(f)];
    if f.store() == Store::Local && f.uid == 0 {
        checks.push(build_users_check(f));
    }
    checks.push(sandbox_check(f));
    checks.extend(boundary_check(f));
    checks
}

/// What the job's boundary holds of the devShell's Nix in this setup (see
/// `devshell::confine`); none for a store the runner does not judge.
fn boundary_check(f: &Facts) -> Option<Check> {
    use crate::sandbox::boundary::NixStore;
    let (store, state, log) = (
        crate::store_path::store_dir(),
        f.state_dir.clone(),
        PathBuf::new(),
    );
    let nix = match f.store() {
        Store::Local if f.uid == 0 => NixStore::LocalAsRoot { store, state, log },
        Store::Local => NixStore::LocalAsUser { store, state, log },
        Store::Daemon(socket) => NixStore::Daemon { socket },
        _ => return None,
    };
    let detail = crate::devshell::confine::describe(&nix);
    Some(Check::new("nix job boundary", true, detail, None))
}

fn flakes_check(f: &Facts) -> Check {
    match &f.version {
        Err(e) => Check::new(
            "nix flakes",
            false,
            format!("nix --version failed: {e}"),
            Some("apt-get install nix-bin, or set QUEST_RUNNER_NIX".into()),
        ),
        Ok(v) if !crate::devshell::version_at_least(v, (2, 4)) => Check::new(
            "nix flakes",
            false,
            format!("Nix {v} has no flakes; the runner builds every devShell from a flake"),
            Some("install Nix 2.4 or later".into()),
        ),
        Ok(v) => Check::new(
            "nix flakes",
            true,
            format!(
                "Nix {v}; the runner enables nix-command and flakes for its own runs \
                 (--extra-experimental-features), whatever nix.conf says"
            ),
            None,
        ),
    }
}

fn store_check(f: &Facts) -> Check {
    let name = "nix store";
    match f.store() {
        Store::Local if f.uid == 0 => Check::new(
            name,
            true,
            format!(
                "local store ({}), as root: single-user Nix",
                f.state_dir.display()
            ),
            None,
        ),
        Store::Local => Check::new(
            name,
            true,
            format!(
                "local store ({} writable by {}): single-user Nix owned by this user",
                f.state_dir.display(),
                f.user
            ),
            None,
        ),
        Store::Daemon(socket) => daemon_check(f, &socket),
        Store::Unreachable => Check::new(
            name,
            false,
            format!(
                "{} (uid {}) cannot write the Nix store ({}) and no nix-daemon socket exists at {}",
                f.user,
                f.uid,
                f.state_dir.display(),
                f.socket.display()
            ),
            no_store_fix(),
        ),
        Store::Chroot => Check::new(
            name,
            false,
            format!(
                "no {} and no nix-daemon: Nix would keep {}'s store under \
                 ~/.local/share/nix/root, where a job's sandbox (which reads /nix/store) cannot \
                 see it",
                f.state_dir.display(),
                f.user
            ),
            no_store_fix(),
        ),
        Store::Other(url) => Check::new(
            name,
            true,
            format!("store = {url} (not checked by the runner)"),
            None,
        ),
    }
}

/// A store through nix-daemon: it answers this user, it is not running, or it refuses them.
fn daemon_check(f: &Facts, socket: &Path) -> Check {
    let name = "nix store";
    match &f.ping {
        Some(Ok(())) | None => Check::new(
            name,
            true,
            format!(
                "nix-daemon at {}, which answers {}",
                socket.display(),
                f.user
            ),
            None,
        ),
        Some(Err(e)) if e.contains("cannot connect") || e.contains("Connection refused") => {
            Check::new(
                name,
                false,
                format!("no nix-daemon answers at {}: {e}", socket.display()),
                Some(
                    "start nix-daemon (systemctl start nix-daemon; NixOS and the official \
                     multi-user installer run it)"
                        .into(),
                ),
            )
        }
        Some(Err(e)) => Check::new(
            name,
            false,
            format!(
                "the nix-daemon at {} refused {}: {e}{}",
                socket.display(),
                f.user,
                allowed_users_note(f)
            ),
            Some(format!(
                "add {} (or @group) to allowed-users in the daemon's nix.conf \
                 (NixOS: nix.settings.allowed-users) and restart nix-daemon",
                f.user
            )),
        ),
    }
}

/// For a user whose `nix` has no store the runner can use: the two supported setups.
fn no_store_fix() -> Option<String> {
    Some(
        "run the runner as root with single-user Nix (scripts/setup), or as this user through \
         nix-daemon: NixOS and the official multi-user installer run it; Debian and Ubuntu: \
         apt-get install nix-setup-systemd"
            .into(),
    )
}

/// Why the daemon's `allowed-users` may not name this user, as far as this user's nix.conf
/// shows it (the daemon may read another).
fn allowed_users_note(f: &Facts) -> String {
    let Some(allowed) = f.config.get("allowed-users") else {
        return String::new();
    };
    let names: Vec<&str> = allowed.split_whitespace().collect();
    let named = names.iter().any(|n| {
        *n == "*"
            || *n == f.user
            || n.strip_prefix('@')
                .is_some_and(|g| f.groups.iter().any(|m| m == g))
    });
    if named {
        String::new()
    } else {
        format!(" (allowed-users = {allowed} does not name {})", f.user)
    }
}

fn build_users_check(f: &Facts) -> Check {
    let name = "nix build users";
    let group = f
        .config
        .get("build-users-group")
        .cloned()
        .unwrap_or_default();
    let fix = || {
        Some(format!(
            "scripts/setup makes them; by hand: groupadd --system {group}, then for i in 1..10: \
             useradd --system --no-create-home --home-dir /var/empty --shell /usr/sbin/nologin \
             --gid {group} --groups {group} {group}$i"
        ))
    };
    if group.is_empty() {
        return Check::new(
            name,
            true,
            "none (build-users-group is empty): builds run as root, still in Nix's sandbox".into(),
            None,
        );
    }
    match f.build_group_members {
        None => Check::new(
            name,
            false,
            format!(
                "build-users-group = {group}, but the group {group} does not exist: Nix refuses \
                 to build as root"
            ),
            fix(),
        ),
        Some(0) => Check::new(
            name,
            false,
            format!("the group {group} (build-users-group) has no members: Nix cannot build"),
            fix(),
        ),
        Some(n) => Check::new(
            name,
            true,
            format!("{n} users in {group}: builds run as one of them"),
            None,
        ),
    }
}

fn sandbox_check(f: &Facts) -> Check {
    let value = f.config.get("sandbox").map(String::as_str);
    let whose = match f.store() {
        Store::Daemon(_) => " (as this user's nix.conf says; the daemon's own nix.conf decides)",
        _ => "",
    };
    let c = match value {
        Some("true") => Check::new(
            "nix build sandbox",
            true,
            format!("on{whose}: a trusted revision's builds see nothing of the host"),
            None,
        ),
        Some(v) => Check::new(
            "nix build sandbox",
            true,
            format!(
                "{v}{whose}: a trusted revision's devShell builds run with the runner's rights \
                 and see the host's files (evaluation always does)"
            ),
            Some("remove `sandbox = false` from nix.conf, or set `sandbox = true`".into()),
        ),
        None => Check::new(
            "nix build sandbox",
            true,
            "unknown (nix show-config gave no answer)".into(),
            None,
        ),
    };
    c.warn_if(!matches!(value, Some("true") | None))
}

/// The static bash the selftest's devShells build with.
pub fn bash_static_check() -> Check {
    let name = "bash-static";
    let fix = Some("apt-get install bash-static, or set QUEST_RUNNER_BASH_STATIC".to_string());
    match binaries::find(Tool::BashStatic) {
        Err(e) => Check::new(name, false, e.to_string(), fix),
        Ok(path) => match crate::util::elf::is_dynamically_linked(&path) {
            Ok(false) => Check::new(
                name,
                true,
                format!(
                    "{} (builds the selftest's devShells in Nix's sandbox)",
                    path.display()
                ),
                None,
            ),
            Ok(true) => Check::new(
                name,
                false,
                format!(
                    "{} is dynamically linked: Nix's sandbox has no library for it",
                    path.display()
                ),
                fix,
            ),
            Err(e) => Check::new(name, false, format!("reading {}: {e}", path.display()), fix),
        },
    }
}

#[cfg(test)]
#[path = "nix_setup_tests.rs"]
mod tests;
