//! Mutation checks: each weakens one rule of the policy, and the suite must then show the
//! escape that rule exists to stop. A suite that still passes under a mutation would pass
//! vacuously.

use std::path::{Path, PathBuf};

use serde::Serialize;

use quest_runner::sandbox::SandboxPolicy;

/// The disk pair's attempt ([`super::disk`]): the one the disk-limit mutation lets escape.
pub const DISK_FILL: &str = "disk-fill";

/// One weakened rule, and the attempt that must escape because of it (a mutation run makes
/// only that attempt, after the permitted command).
///
/// | mutation                | the rule it weakens                         | escapes          |
/// |-------------------------|---------------------------------------------|------------------|
/// | `write-shared-tmp`      | writes confined to checkout and temp dir    | write-shared-tmp |
/// | `write-bare-clone`      | the bare clone is read-only but for commits | write-bare-info  |
/// | `no-deny-write`         | the deny-write list (agent config)          | plant-opencode-plugin |
/// | `no-deny-read`          | the deny-read list (secrets, state, homes)  | read-account-abs |
/// | `allow-loopback`        | the network allowlist                       | net-proxy        |
/// | `pass-all-env`          | the environment allowlist                   | env-scan         |
/// | `unconfined-agent`      | the agent in the job's namespace, and its own file-tool rules | every `tool-*` attempt |
/// | `registry-writes`       | registries answer reads only (the decider)  | npm-publish      |
/// | `shared-clone-writable` | jobs write only their own git store         | loose-object     |
/// | `admin-pointers-writable` | the admin dir's commondir and gitdir are read-only | commondir-redirect |
/// | `no-disk-limit`         | `limits.disk` (not a policy rule: the suite runs the disk pair without it) | disk-fill |
/// | `private-by-name`       | private files hidden with their directories, not by name | rotate-secrets |
/// | `private-real-dir-only` | ...and with the directories their links point into | rotate-secrets |
/// | `host-kernel`           | `gvisor` isolation: the commands on gVisor's kernel (only in `gvisor` runs) | kernel-version |
///
/// The agent's own rules alone (Claude Code's permission rules, opencode's plugin) are no
/// mutation: with them off and the namespace in force every file-tool attempt must still be
/// refused (`SuiteConfig::agent_rules_off`); only taking the namespace away as well frees them.
///
/// Some attempts are refused by two layers: the bare clone's `hooks/` and `config`, the
/// worktree's `.git` file, `.claude/` and `.mcp.json` are also among srt's own mandatory
/// write denies, so weakening the policy alone does not free them. Each mutation is paired
/// with an attempt that only the policy's rule refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mutation {
    WriteSharedTmp,
    WriteBareClone,
    NoDenyWrite,
    NoDenyRead,
    AllowLoopback,
    PassAllEnv,
    UnconfinedAgent,
    RegistryWrites,
    SharedCloneWritable,
    AdminPointersWritable,
    NoDiskLimit,
    PrivateByName,
    PrivateRealDirOnly,
    HostKernel,
}

impl Mutation {
    pub const ALL: [Mutation; 13] = [
        Mutation::WriteSharedTmp,
        Mutation::WriteBareClone,
        Mutation::NoDenyWrite,
        Mutation::NoDenyRead,
        Mutation::AllowLoopback,
        Mutation::PassAllEnv,
        Mutation::UnconfinedAgent,
        Mutation::RegistryWrites,
        Mutation::SharedCloneWritable,
        Mutation::AdminPointersWritable,
        Mutation::NoDiskLimit,
        Mutation::PrivateByName,
        Mutation::PrivateRealDirOnly,
    ];

    /// The mutations this host can check: the disk pair needs root (it mounts a tmpfs).
    pub fn here() -> Vec<Mutation> {
        let root = rustix::process::geteuid().is_root();
        Self::ALL
            .into_iter()
            .filter(|m| root || *m != Mutation::NoDiskLimit)
            .collect()
    }

    /// [`Mutation::here`], and in `gvisor` runs the one that takes gVisor away.
    pub fn here_for(isolation: quest_runner::sandbox::gvisor::Isolation) -> Vec<Mutation> {
        let mut all = Self::here();
        if isolation == quest_runner::sandbox::gvisor::Isolation::Gvisor {
            all.push(Mutation::HostKernel);
        }
        all
    }

    pub fn name(self) -> &'static str {
        match self {
            Mutation::WriteSharedTmp => "write-shared-tmp",
            Mutation::WriteBareClone => "write-bare-clone",
            Mutation::NoDenyWrite => "no-deny-write",
            Mutation::NoDenyRead => "no-deny-read",
            Mutation::AllowLoopback => "allow-loopback",
            Mutation::PassAllEnv => "pass-all-env",
            Mutation::UnconfinedAgent => "unconfined-agent",
            Mutation::RegistryWrites => "registry-writes",
            Mutation::SharedCloneWritable => "shared-clone-writable",
            Mutation::AdminPointersWritable => "admin-pointers-writable",
            Mutation::NoDiskLimit => "no-disk-limit",
            Mutation::PrivateByName => "private-by-name",
            Mutation::PrivateRealDirOnly => "private-real-dir-only",
            Mutation::HostKernel => "host-kernel",
        }
    }

    /// The attempts that must escape under this mutation.
    pub fn caught_by(self) -> &'static [&'static str] {
        match self {
            Mutation::WriteSharedTmp => &["write-shared-tmp"],
            Mutation::WriteBareClone => &["write-bare-info"],
            Mutation::NoDenyWrite => &["plant-opencode-plugin"],
            Mutation::NoDenyRead => &["read-account-abs"],
            Mutation::AllowLoopback => &["net-proxy"],
            Mutation::PassAllEnv => &["env-scan"],
            Mutation::UnconfinedAgent => FILE_TOOL_ATTEMPTS,
            Mutation::RegistryWrites => &["npm-publish"],
            Mutation::SharedCloneWritable => &["loose-object"],
            Mutation::AdminPointersWritable => &["commondir-redirect"],
            Mutation::NoDiskLimit => &[DISK_FILL],
            Mutation::PrivateByName | Mutation::PrivateRealDirOnly => &["rotate-secrets"],
            Mutation::HostKernel => &["kernel-version"],
        }
    }

    /// Weakens `policy` (whose bare clone is `bare`).
    pub fn apply(self, policy: &mut SandboxPolicy, bare: &Path) {
        match self {
            Mutation::WriteSharedTmp => policy.allow_write.push(PathBuf::from("/tmp")),
            Mutation::WriteBareClone => {
                policy.allow_write.push(bare.to_path_buf());
                policy.deny_write.retain(|p| !p.starts_with(bare));
                writable_by_the_agent(bare);
            }
            Mutation::NoDenyWrite => policy.deny_write.clear(),
            Mutation::NoDenyRead => {
                policy.deny_read.clear();
                policy.allow_read.clear();
            }
            Mutation::AllowLoopback => policy.allowed_hosts.push("127.0.0.1".into()),
            Mutation::PassAllEnv => policy.env.pass.push("*".into()),
            Mutation::UnconfinedAgent => {
                policy.confine_file_tools = false;
                policy.confine_agent = false;
                for checkout in &policy.allow_write {
                    if quest_runner::workspace::checkout_layer(checkout).is_some() {
                        owned_by_the_runner(checkout);
                    }
                }
            }
            // The decider's rule as a weaker policy would write it: registries take PUT.
            Mutation::RegistryWrites => policy.read_only_methods.push("PUT".into()),
            // As before jobs had stores of their own: the shared clone's objects and refs.
            Mutation::SharedCloneWritable => {
                policy.allow_write.push(bare.join("objects"));
                policy.allow_write.push(bare.join("refs"));
                writable_by_the_agent(bare);
            }
            Mutation::AdminPointersWritable => policy.deny_write.retain(|p| {
                !p.file_name()
                    .is_some_and(|n| n == "commondir" || n == "gitdir")
            }),
            // Not in the policy: the suite runs the disk pair without the limit.
            Mutation::NoDiskLimit => {}
            // As the policy was: each file by its name, and by its real path when a link.
            Mutation::PrivateByName => hide_private_instead(policy, |file| {
                let mut paths = vec![file.to_path_buf()];
                paths.extend(std::fs::canonicalize(file));
                paths
            }),
            // As a fix that forgot links would be: the directory the file really is in now.
            // The runner's policy says gvisor; the commands run in the namespace.
            Mutation::HostKernel => {
                policy.isolation = quest_runner::sandbox::gvisor::Isolation::Namespace;
            }
            Mutation::PrivateRealDirOnly => hide_private_instead(policy, |file| {
                file.parent()
                    .and_then(|d| std::fs::canonicalize(d).ok())
                    .into_iter()
                    .collect()
            }),
        }
    }
}

/// A root runner's agent runs as an identity of its own, which cannot write the runner's
/// files whatever the policy says: for a mutation that lets jobs write the shared clone to
/// free its attempt, the clone (the suite's own) is handed to that identity too, as it would
/// be in a runner that writes everything as the agent's uid (the service user's setup).
fn writable_by_the_agent(bare: &Path) {
    if rustix::process::geteuid().is_root() {
        if let Err(e) = quest_runner::run::confine::chown_tree(bare) {
            tracing::warn!(path = %bare.display(), "handing the shared clone to the agent: {e}");
        }
    }
}

/// An agent that runs unconfined runs as the runner (root), and the sandbox it starts maps
/// no other owner into its user namespace: a root runner's layered checkout, whose shared
/// files are the agent's identity's, is handed back to the runner through the mount (which
/// copies the suite's small tree up into the job's layer), as a full checkout is before any
/// hand-over.
fn owned_by_the_runner(path: &Path) {
    if let Err(e) = quest_runner::agent_id::chown_tree_to(path, 0) {
        tracing::warn!(path = %path.display(), "handing the checkout back to the runner: {e}");
    }
}

/// The attempts of the agent's own file tools: each must escape once neither the namespace
/// nor the agent's rules confine them, and none while the namespace alone does.
pub const FILE_TOOL_ATTEMPTS: &[&str] = &[
    "tool-read-account",
    "tool-read-link",
    "tool-write-outside",
    "tool-read-link-up",
    "tool-write-link-up",
    "tool-edit-link-up",
    "tool-list-link-up",
];

/// Replaces the directories that hide the policy's private files with what `paths` gives for
/// each file.
fn hide_private_instead(policy: &mut SandboxPolicy, paths: impl Fn(&Path) -> Vec<PathBuf>) {
    let dirs: Vec<PathBuf> = policy
        .private
        .iter()
        .flat_map(|h| h.dirs.iter().map(|d| d.dir.clone()))
        .collect();
    policy.deny_read.retain(|p| !dirs.contains(p));
    for hidden in &policy.private {
        policy.deny_read.extend(paths(&hidden.file));
    }
}
