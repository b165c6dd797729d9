//! The opencode plugin's path checks, run in node against a real tree with the links an
//! attacker commits: each call the kernel would send outside the checkout is refused, and the
//! same tools on plain paths inside it pass (so a refusal is not the plugin refusing
//! everything).

use std::path::Path;
use std::process::Command;

use super::opencode::{plugin, Dirs};
use crate::job::Trust;
use crate::sandbox::{plan as plan_policy, Platform, PolicyInputs};
use crate::workspace::WorkspacePaths;

/// Runs each `(tool, args)` through the plugin's `tool.execute.before` hook; one line per
/// call: `allowed` or `refused: <message>`.
fn judge(root: &Path, calls: &[(&str, serde_json::Value)]) -> Vec<String> {
    let node = which::which("node").expect("node on PATH (scripts/setup)");
    let checkout = root.join("checkout");
    let ws = WorkspacePaths {
        checkout: checkout.clone(),
        bare_clone: root.join("state/repos/r.git"),
        git_store: root.join("state/jobs/j1/git"),
        worktree_admin: root.join("state/jobs/j1/git/worktrees/checkout"),
        temp_dir: root.join("tmp/quest-job-abc"),
        job_dir: root.join("state/jobs/j1/runner"),
        helper_tmp: root.join("tmp/quest-srt-abc"),
        devshell_script: None,
    };
    let policy = plan_policy(
        &ws,
        &PolicyInputs {
            platform: Platform::Linux,
            trust: Trust::Untrusted,
            extra_hosts: vec![],
            full_access_hosts: vec![],
            dependency_hosts: Vec::new(),
            state_dir: root.join("state"),
            operator_home: None,
            private: vec![],
        },
    );
    let module = root.join("plugin.mjs");
    std::fs::write(&module, plugin(&policy, &Dirs::new(&ws.job_dir))).unwrap();
    let driver = format!(
        r#"import {{ QuestRunnerConfine }} from {module};
const hooks = await QuestRunnerConfine({{ directory: {dir}, worktree: {dir} }});
for (const [tool, args] of {calls}) {{
  try {{ await hooks["tool.execute.before"]({{ tool }}, {{ args }}); console.log("allowed"); }}
  catch (e) {{ console.log("refused: " + e.message); }}
}}"#,
        module = serde_json::json!(module),
        dir = serde_json::json!(checkout),
        calls = serde_json::json!(calls
            .iter()
            .map(|(t, a)| serde_json::json!([t, a]))
            .collect::<Vec<_>>()),
    );
    let out = Command::new(node)
        .args(["--input-type=module", "-e", &driver])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The tree of the issue: a committed link to a directory outside (`lnk-sub`), a link to a
/// directory inside (`lnk-ddx`) beside a link to the checkout's `.git` pointer (`gp`).
fn hostile_tree() -> tempfile::TempDir {
    use std::os::unix::fs::symlink;
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    for d in ["checkout/src", "checkout/ddx/inner", "secret-dir/sub"] {
        std::fs::create_dir_all(r.join(d)).unwrap();
    }
    std::fs::write(r.join("secret-dir/secret.txt"), "s3cret").unwrap();
    std::fs::write(r.join("checkout/src/main.rs"), "fn main() {}").unwrap();
    std::fs::write(r.join("checkout/.git"), "gitdir: ../state/jobs/j1/git").unwrap();
    symlink(r.join("secret-dir/sub"), r.join("checkout/lnk-sub")).unwrap();
    symlink(r.join("checkout/ddx/inner"), r.join("checkout/lnk-ddx")).unwrap();
    symlink("../.git", r.join("checkout/ddx/gp")).unwrap();
    root
}

#[test]
fn a_dotdot_after_a_link_is_judged_where_the_kernel_goes() {
    let root = hostile_tree();
    let co = root.path().join("checkout");
    let co = co.display();
    // Each form of the issue, by every kind of tool that takes a path (the `task` subagents'
    // calls reach the same hook).
    let attempts = [
        (
            "read",
            serde_json::json!({"filePath": format!("{co}/lnk-sub/../secret.txt")}),
        ),
        (
            "read",
            serde_json::json!({"filePath": "lnk-sub/../secret.txt"}),
        ),
        (
            "write",
            serde_json::json!({"filePath": format!("{co}/lnk-sub/../written-trav.txt"), "content": "x"}),
        ),
        (
            "edit",
            serde_json::json!({"filePath": format!("{co}/lnk-sub/../secret.txt"), "oldString": "s", "newString": "t"}),
        ),
        (
            "list",
            serde_json::json!({"path": format!("{co}/lnk-sub/..")}),
        ),
        (
            "glob",
            serde_json::json!({"pattern": "*", "path": format!("{co}/lnk-sub/..")}),
        ),
        (
            "grep",
            serde_json::json!({"pattern": "s3", "path": format!("{co}/lnk-sub/..")}),
        ),
        (
            "write",
            serde_json::json!({"filePath": format!("{co}/lnk-ddx/../gp"), "content": "gitdir: /"}),
        ),
        (
            "apply_patch",
            serde_json::json!({"patchText": format!("*** Begin Patch\n*** Add File: {co}/lnk-sub/../p.txt\n+x\n*** End Patch")}),
        ),
    ];
    for (call, verdict) in attempts.iter().zip(judge(root.path(), &attempts)) {
        assert!(verdict.starts_with("refused"), "{call:?}: {verdict}");
    }
    // The same tools on plain paths of the checkout, a `..` that follows no link included.
    let permitted = [
        (
            "read",
            serde_json::json!({"filePath": format!("{co}/src/main.rs")}),
        ),
        (
            "read",
            serde_json::json!({"filePath": "src/../src/main.rs"}),
        ),
        (
            "write",
            serde_json::json!({"filePath": format!("{co}/src/new.rs"), "content": "x"}),
        ),
        ("list", serde_json::json!({"path": format!("{co}/src")})),
        (
            "read",
            serde_json::json!({"filePath": format!("{co}/lnk-ddx/x.txt")}),
        ),
    ];
    for (call, verdict) in permitted.iter().zip(judge(root.path(), &permitted)) {
        assert_eq!(verdict, "allowed", "{call:?}");
    }
}

#[test]
fn the_unconfined_kernel_does_follow_the_link_then_go_up() {
    // The attempts above are not vacuous: the path they name does reach the secret.
    let root = hostile_tree();
    let through = root.path().join("checkout/lnk-sub/../secret.txt");
    assert_eq!(std::fs::read_to_string(through).unwrap(), "s3cret");
}
