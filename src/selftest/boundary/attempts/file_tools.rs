//! The agent's own file tools as attempts use them: they run outside the OS sandbox, so only
//! the runner's rules for them stand between the agent and the host's files.

use serde_json::json;

use crate::job::AgentKind;
use crate::selftest::model_server::Step;

/// The agent's file tools, by the names and arguments each agent knows them by.
pub(super) fn read_tool(agent: AgentKind, path: &std::path::Path) -> Step {
    match agent {
        AgentKind::Claude => Step::Tool {
            name: "Read".into(),
            input: json!({"file_path": path}),
        },
        AgentKind::Opencode => Step::Tool {
            name: "read".into(),
            input: json!({"filePath": path}),
        },
    }
}

pub(super) fn write_tool(agent: AgentKind, path: &std::path::Path, content: &str) -> Step {
    match agent {
        AgentKind::Claude => Step::Tool {
            name: "Write".into(),
            input: json!({"file_path": path, "content": content}),
        },
        AgentKind::Opencode => Step::Tool {
            name: "write".into(),
            input: json!({"filePath": path, "content": content}),
        },
    }
}
