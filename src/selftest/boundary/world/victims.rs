//! Files the world writes that the attempts and the suite name too: the hostile revision's
//! victim blobs, and the scripted model's account file.

use crate::job::AgentKind;

/// Files of the hostile revision whose blobs the attempts rewrite in the shared clone, each
/// with content of its own (one blob each), so the two cannot mask each other.
pub const LOOSE_VICTIM: &str = "notes/loose.md";
pub const REPLACE_VICTIM: &str = "notes/replace.md";

/// A victim's content in the revision.
pub fn victim_text(file: &str) -> String {
    format!("{file}: the revision's own text\n")
}

/// Writes the scripted model's credential for `agent` at `path`: Claude Code's key file, or
/// opencode's `auth.json`.
pub(crate) fn write_scripted_account(
    agent: AgentKind,
    path: &std::path::Path,
    key: &str,
) -> std::io::Result<()> {
    let text = match agent {
        AgentKind::Claude => key.to_string(),
        AgentKind::Opencode => {
            serde_json::json!({"scripted": {"type": "api", "key": key}}).to_string()
        }
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, text)
}
