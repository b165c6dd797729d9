//! The names in a checkout the sandbox covers with stubs while a command runs, which git in
//! the job's store must ignore. Defined here, below the sandbox, because the workspace writes
//! the store's exclude before any policy exists; the sandbox policy and the opencode plugin
//! deny writing them.

/// The names srt denies commands to write in every writable tree (its "mandatory deny
/// paths", listed in its README). The opencode plugin refuses its file tools the same names,
/// and the workspace has git ignore the stubs srt mounts for them.
pub const SRT_PROTECTED_NAMES: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".zshrc",
    ".zprofile",
    ".profile",
    ".gitconfig",
    ".gitmodules",
    ".ripgreprc",
    ".mcp.json",
    ".vscode",
    ".idea",
];

/// Files in a checkout through which an agent run on it later would execute code.
///
/// `.claude` is protected by its settings files rather than as a whole: srt mounts its own
/// stubs for `.claude/commands` and `.claude/agents` inside it, which a read-only `.claude`
/// would make impossible (and the sandbox would not start).
pub const AGENT_CONFIG: &[&str] = &[
    ".claude/settings.json",
    ".claude/settings.local.json",
    ".mcp.json",
    ".opencode",
    "opencode.json",
    "opencode.jsonc",
];

/// Paths the sandbox covers with a read-only `/dev/null` (or an empty directory) while a
/// command runs when they do not exist: srt's mandatory write denies and the policy's agent
/// configuration. Git must ignore them, or `git add -A` inside the sandbox fails on a
/// character device. Ignoring them costs nothing: commands cannot write them anyway, and
/// tracked files are not affected by an exclude.
fn sandbox_stubs() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = SRT_PROTECTED_NAMES.to_vec();
    for path in AGENT_CONFIG {
        let top = path.split('/').next().unwrap_or(path);
        if !names.contains(&top) {
            names.push(top);
        }
    }
    names
}

/// The `info/exclude` of a job's git store: the sandbox's stubs.
pub(super) fn exclude_text() -> String {
    let mut text = String::from("# quest-runner: sandbox mount points\n");
    for name in sandbox_stubs() {
        text.push_str(name);
        text.push('\n');
    }
    text
}
