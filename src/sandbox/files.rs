//! What a job's commands may read and write: the system's private places and the runner's
//! denied, the workspace's parts allowed back, and the few files inside the writable trees that
//! stay read-only. Steps of [`super::policy::plan`].

use std::path::{Path, PathBuf};

use super::inputs::{Platform, PolicyInputs};
use crate::workspace::{WorkspacePaths, AGENT_CONFIG};

/// A directory srt makes available to every sandbox when it exists (`doctor` warns).
pub const SRT_SHARED_TMP: &str = "/tmp/claude";

/// System places that hold other users' or services' data and secrets. Everything else of
/// the system (`/usr`, `/nix/store`, `/etc`, `/opt`, ...) stays readable so tools work. The
/// runner's private files are hidden with their own directories wherever they are (see
/// `private`).
pub fn system_denied_reads(platform: Platform) -> Vec<PathBuf> {
    let paths: &[&str] = match platform {
        Platform::Linux => &[
            "/home",
            "/root",
            "/run/user",
            "/tmp",
            "/var/tmp",
            "/var/lib",
            "/var/log",
            "/var/mail",
            "/var/spool",
            "/var/backups",
            "/srv",
            "/mnt",
            "/media",
            "/boot",
            "/etc/shadow",
            "/etc/gshadow",
            "/etc/ssh",
            "/etc/sudoers",
            "/etc/sudoers.d",
            "/etc/nix/netrc",
            // Where secret managers and systemd put secrets for services.
            "/run/secrets",
            "/run/credentials",
            "/run/keys",
            "/run/agenix",
            // Where sops-nix and agenix keep their generations: `/run/secrets` and
            // `/run/agenix` are links into these, switched to a new generation on activation,
            // and both sandboxes hide where a link points when they start, not the link.
            "/run/secrets.d",
            "/run/secrets-for-users",
            "/run/secrets-for-users.d",
            "/run/agenix.d",
            // The host store's database (every path's name and hash, whoever added it) and
            // its daemon, which hands out any path's contents by name: a job's devShell is
            // its repository's store (`devshell::repo_store`), shown path by path.
            "/nix/var/nix/db",
            "/nix/var/nix/daemon-socket",
        ],
        Platform::Macos => &[
            "/Users",
            "/var/root",
            "/private/tmp",
            "/private/var/tmp",
            "/private/var/folders",
            "/private/var/db",
            "/private/var/log",
            "/Library/Keychains",
            "/private/etc/ssh",
            "/private/etc/sudoers",
            "/Volumes",
        ],
    };
    paths.iter().map(PathBuf::from).collect()
}

/// What no command may read: the system's private places, the runner's state, the operator's
/// home, other jobs' temp dirs, and the directories that hide the runner's private files.
pub(super) fn denied_reads(ws: &WorkspacePaths, inputs: &PolicyInputs) -> Vec<PathBuf> {
    let mut deny_read = system_denied_reads(inputs.platform);
    // The temp dirs' parent holds other jobs' temp dirs: `/tmp` is denied above, a `TMPDIR`
    // elsewhere is denied here (the job's own is allowed below).
    let temp_parent = ws.temp_dir.parent().filter(|p| p.parent().is_some());
    for extra in [
        Some(&inputs.state_dir),
        inputs.operator_home.as_ref(),
        temp_parent.map(Path::to_path_buf).as_ref(),
    ]
    .into_iter()
    .flatten()
    {
        push_unique(&mut deny_read, extra.clone());
    }
    if inputs.platform == Platform::Macos {
        if let Some(home) = &inputs.operator_home {
            push_unique(&mut deny_read, home.join("Library/Keychains"));
        }
    }
    // Whole directories, never a file by its name: a mount over a file is lost in a running
    // sandbox once the file is replaced (see `private`).
    for hidden in &inputs.private {
        for dir in &hidden.dirs {
            push_unique(&mut deny_read, dir.dir.clone());
        }
    }
    deny_read
}

/// What commands read back inside the denied trees: the workspace, the parts of the job's
/// store git reads, the shared clone's objects, the devShell script, srt's sockets. (The
/// job's CA files are added when some host is reachable.)
pub(super) fn allowed_reads(ws: &WorkspacePaths) -> Vec<PathBuf> {
    // The store's parts git reads, not the store itself: srt binds an allowed read after the
    // writable binds below it, and a read-only bind of the whole store would cover `objects/`
    // and `refs/` and break `git commit`. Of the shared clone, only the objects, read-only:
    // whoever writes them decides what every later job checks out.
    let mut allow_read = vec![
        ws.checkout.clone(),
        ws.temp_dir.clone(),
        ws.git_store.join("HEAD"),
        ws.git_store.join("config"),
        ws.git_store.join("packed-refs"),
        ws.git_store.join("info"),
        ws.bare_clone.join("objects"),
    ];
    if let Some(script) = &ws.devshell_script {
        allow_read.push(script.clone());
    }
    // srt keeps the sockets its in-sandbox proxy bridge connects to here: hidden, the bridge
    // would answer every request with nothing.
    allow_read.push(ws.helper_tmp.clone());
    allow_read
}

/// The only trees commands write: the checkout, the temp dir, and what `git commit` writes.
pub(super) fn allowed_writes(ws: &WorkspacePaths) -> Vec<PathBuf> {
    // `git commit` in the worktree writes objects, refs and the worktree's own HEAD, index
    // and logs, all in the job's own store; never its config or hooks, nor anything of the
    // shared clone.
    vec![
        ws.checkout.clone(),
        ws.temp_dir.clone(),
        ws.git_store.join("objects"),
        ws.git_store.join("refs"),
        ws.git_store.join("logs"),
        ws.worktree_admin.clone(),
    ]
}

/// What stays read-only inside the writable trees: whatever would aim git, or an agent run on
/// the checkout later, at something of the job's choosing.
pub(super) fn denied_writes(ws: &WorkspacePaths) -> Vec<PathBuf> {
    let mut deny_write = vec![
        // Where the store's objects come from besides its own (the shared clone's), and the
        // derived files git would read beside them.
        ws.git_store.join("objects/info"),
        // The pointers between checkout, admin dir and store, and the admin dir's own config:
        // rewritten, they would aim git that discovers its repository (the agent's own, any
        // tool's) at a directory and configuration of the job's choosing.
        ws.worktree_admin.join("commondir"),
        ws.worktree_admin.join("gitdir"),
        ws.worktree_admin.join("config.worktree"),
        ws.checkout.join(".git"),
        // git's global configuration under HOME: Claude Code runs outside the sandbox with
        // this HOME, and runs git in the checkout. (`~/.gitconfig` is among the names both
        // sandboxes protect on their own, `SRT_PROTECTED_NAMES`; denied here as well, a missing
        // one is mounted unreadable and git fails on it.)
        ws.temp_dir.join(".config/git"),
    ];
    // Agent configuration that runs code wherever it is loaded. The runner's agents never
    // load the checkout's, but a job's commits reach people and tools that do.
    for name in AGENT_CONFIG {
        deny_write.push(ws.checkout.join(name));
    }
    // srt binds its own `/tmp/claude` into every sandbox when it exists on the host, whatever
    // the settings say: shared between all jobs, so at least never writable.
    deny_write.push(PathBuf::from(SRT_SHARED_TMP));
    deny_write
}

fn push_unique(list: &mut Vec<PathBuf>, path: PathBuf) {
    // A path already covered by a denied ancestor adds nothing.
    if !list.iter().any(|p| path.starts_with(p)) {
        list.push(path);
    }
}
