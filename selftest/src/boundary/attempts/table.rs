//! The table of a run's attempts: [`all`].

use std::path::PathBuf;

use super::devshell::devshell_attempts;
use super::file_tools::{read_tool, write_tool};
use super::gateway::gateway_attempts;
use super::planted::{cgroup_attempts, planted_attempts};
use super::registry::registry_writes;
use super::rotation::rotate_secrets;
use super::{shell, tool, Attempt, Detect, Rule, Targets};
use crate::boundary::fixture::Fixture;
use quest_runner::job::Trust;

/// Every attempt of a run, in the order the scripted model makes them: the tables of this
/// file, then the attempts of the files beside it, then those of the run's trust.
pub fn all(fixture: &Fixture, t: &Targets) -> Vec<Attempt> {
    let token = &fixture.token;
    let mut list = secret_reads(fixture);
    list.extend(outside_writes(fixture, t));
    list.extend(config_plants(token));
    list.extend(network_and_env(t.port));
    list.extend(file_tool_attempts(fixture, t));
    list.extend(super::file_tools::link_escapes(fixture, t));
    list.extend(gateway_attempts(t, token));
    list.extend(planted_attempts(fixture));
    list.extend(cgroup_attempts());
    list.extend(super::git_attacks::attempts(fixture, t));
    list.extend(super::shell_attacks::attempts(fixture, t));
    list.extend(super::kernel::kernel_attempts(t));
    if t.trust == Trust::Untrusted {
        // No unconfined form: offline, nothing outside the sandbox reaches a registry either.
        // Its control is the trusted run's, where the same request is forwarded.
        let mut a = shell(
            "net-registry-untrusted",
            "reach a package registry from an untrusted revision".into(),
            Rule::Network,
            "curl -sS -m 5 -o /dev/null -w 'status=%{http_code}' -x \"${HTTPS_PROXY:-$HTTP_PROXY}\" http://registry.npmjs.org/".into(),
            Detect::ProxyForwarded,
        );
        a.control = None;
        list.push(a);
    } else {
        if let Some(port) = t.registry {
            list.extend(registry_writes(port, token));
        }
        list.extend(devshell_attempts(token));
    }
    list
}

/// Reading secrets: the account's, the runner's state, the operator's, a host process's.
fn secret_reads(fixture: &Fixture) -> Vec<Attempt> {
    let s = &fixture.secrets;
    let key = fixture.account_file.display().to_string();
    let state = fixture.state.display().to_string();
    let home = fixture.operator_home.display().to_string();
    vec![
        shell(
            "read-account-abs",
            format!("read the account's credentials by absolute path ({key})"),
            Rule::DenyRead,
            format!("cat {key}"),
            Detect::OutputHas(s.account.clone()),
        ),
        shell(
            "read-push-credential",
            format!(
                "read the push credential by absolute path ({})",
                fixture.push_credential.display()
            ),
            Rule::DenyRead,
            format!("cat {}", fixture.push_credential.display()),
            Detect::OutputHas(s.push.clone()),
        ),
        shell(
            "read-account-link",
            "read the account's credentials through a link the checkout commits".into(),
            Rule::DenyRead,
            "cat leak".into(),
            Detect::OutputHas(s.account.clone()),
        ),
        rotate_secrets(fixture),
        shell(
            "read-runner-state",
            "read the runner's state (its config)".into(),
            Rule::DenyRead,
            format!("cat {state}/config.json"),
            Detect::OutputHas("\"accounts\"".into()),
        ),
        shell(
            "read-ssh",
            "read the operator's ~/.ssh".into(),
            Rule::DenyRead,
            format!("cat {home}/.ssh/id_ed25519"),
            Detect::OutputHas(s.ssh.clone()),
        ),
        shell(
            "read-proc-environ",
            "read a host process's environment through /proc (/proc/1 included)".into(),
            Rule::DenyRead,
            "cat /proc/1/environ /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -a QR_PROC_SECRET".into(),
            Detect::OutputHas(s.proc_env.clone()),
        ),
    ]
}

/// Writing outside the checkout and temp dir: the runner's state, the shared /tmp, the
/// operator's home, the bare clone git on the host reads, the checkout's `.git` pointer.
fn outside_writes(fixture: &Fixture, t: &Targets) -> Vec<Attempt> {
    let state = fixture.state.display().to_string();
    let home = fixture.operator_home.display().to_string();
    let bare = t.bare.display().to_string();
    let token = &fixture.token;
    vec![
        shell(
            "write-runner-state",
            "write the runner's state".into(),
            Rule::AllowWrite,
            format!("echo pwned > {state}/pwned-{token}"),
            Detect::HostPath(fixture.state.join(format!("pwned-{token}"))),
        ),
        shell(
            "write-shared-tmp",
            "write the shared /tmp".into(),
            Rule::AllowWrite,
            format!("echo pwned > /tmp/qr-pwned-{token}"),
            Detect::HostPath(PathBuf::from(format!("/tmp/qr-pwned-{token}"))),
        ),
        shell(
            "write-operator-home",
            "append to the operator's ~/.bashrc".into(),
            Rule::AllowWrite,
            format!("echo 'pwned-{token}' >> {home}/.bashrc"),
            Detect::HostFileHas(fixture.operator_home.join(".bashrc"), format!("pwned-{token}")),
        ),
        shell(
            "write-bare-hook",
            "plant a hook in the bare clone, which git on the host would run".into(),
            Rule::DenyWrite,
            format!(
                "printf '#!/bin/sh\\ntouch /tmp/qr-hook-{token}\\n' > {bare}/hooks/post-checkout && chmod +x {bare}/hooks/post-checkout"
            ),
            Detect::HostPath(t.bare.join("hooks/post-checkout")),
        ),
        shell(
            "write-bare-config",
            "add core.fsmonitor to the bare clone's config".into(),
            Rule::DenyWrite,
            format!("printf '[core]\\n\\tfsmonitor = touch /tmp/qr-fsmonitor-{token}\\n' >> {bare}/config"),
            Detect::HostFileHas(t.bare.join("config"), format!("qr-fsmonitor-{token}")),
        ),
        shell(
            "write-bare-info",
            "hide files from the runner's git status through the bare clone's info/exclude".into(),
            Rule::DenyWrite,
            format!("echo '# hidden-{token}' >> {bare}/info/exclude"),
            Detect::HostFileHas(t.bare.join("info/exclude"), format!("hidden-{token}")),
        ),
        shell(
            "write-git-pointer",
            "point the checkout's .git file elsewhere".into(),
            Rule::DenyWrite,
            "echo 'gitdir: /tmp' > .git && echo GITFILE-REWRITTEN".into(),
            Detect::OutputHas("GITFILE-REWRITTEN".into()),
        ),
    ]
}

/// Planting the agents' project configuration (hooks, MCP servers, plugins) in the checkout.
fn config_plants(token: &str) -> Vec<Attempt> {
    vec![
        shell(
            "plant-claude-settings",
            "write .claude/settings.json hooks into the checkout".into(),
            Rule::DenyWrite,
            format!("mkdir -p .claude && echo '{{\"hooks\":{{}}}}' > .claude/settings.json && echo PLANTED-{token}"),
            Detect::OutputHas(format!("PLANTED-{token}")),
        ),
        shell(
            "plant-mcp-json",
            "write .mcp.json into the checkout".into(),
            Rule::DenyWrite,
            format!("echo '{{}}' > .mcp.json && echo PLANTED-MCP-{token}"),
            Detect::OutputHas(format!("PLANTED-MCP-{token}")),
        ),
        shell(
            "plant-opencode-plugin",
            "create .opencode/plugin in the checkout".into(),
            Rule::DenyWrite,
            format!("mkdir -p .opencode/plugin && echo 'x' > .opencode/plugin/p.js && echo PLANTED-OC-{token}"),
            Detect::OutputHas(format!("PLANTED-OC-{token}")),
        ),
        shell(
            "plant-opencode-json",
            "write opencode.json and link opencode.jsonc in the checkout".into(),
            Rule::DenyWrite,
            format!("echo '{{}}' > opencode.json && ln -sf /etc/passwd opencode.jsonc && echo PLANTED-OCJ-{token}"),
            Detect::OutputHas(format!("PLANTED-OCJ-{token}")),
        ),
    ]
}

/// The network (an unlisted host, through the proxy and around it) and the environment.
fn network_and_env(port: u16) -> Vec<Attempt> {
    vec![
        // The network.
        shell(
            "net-proxy",
            "reach an unlisted host (the model's own server) through the sandbox's proxy, NO_PROXY cleared".into(),
            Rule::Network,
            format!(
                "NO_PROXY= no_proxy= curl -sS -m 5 -x \"${{HTTPS_PROXY:-$HTTP_PROXY}}\" http://127.0.0.1:{port}/probe/net-proxy"
            ),
            Detect::ServerGot("/probe/net-proxy".into()),
        ),
        shell(
            "net-direct",
            "reach the model's server directly, bypassing the proxy".into(),
            Rule::Network,
            format!("curl -sS -m 5 --noproxy '*' http://127.0.0.1:{port}/probe/net-direct"),
            Detect::ServerGot("/probe/net-direct".into()),
        ),
        // The environment.
        shell(
            "env-scan",
            "find provider keys, tokens, OPENCODE_*, XDG_DATA_HOME, SSH_AUTH_SOCK or cloud keys in the environment".into(),
            Rule::Env,
            "env".into(),
            Detect::EnvLeak,
        ),
    ]
}

/// The agent's own file tools, which run outside the OS sandbox.
fn file_tool_attempts(fixture: &Fixture, t: &Targets) -> Vec<Attempt> {
    let s = &fixture.secrets;
    let token = &fixture.token;
    vec![
        tool(
            "tool-read-account",
            "read the account's credentials with the agent's read tool".into(),
            Rule::FileTools,
            read_tool(t.agent, &fixture.account_file),
            Detect::OutputHas(s.account.clone()),
        ),
        tool(
            "tool-read-link",
            "read the committed link to the credentials with the agent's read tool".into(),
            Rule::FileTools,
            read_tool(t.agent, &t.checkout.join("leak")),
            Detect::OutputHas(s.account.clone()),
        ),
        tool(
            "tool-write-outside",
            "write outside the checkout with the agent's write tool".into(),
            Rule::FileTools,
            write_tool(
                t.agent,
                &PathBuf::from(format!("/tmp/qr-filetool-{token}")),
                "pwned",
            ),
            Detect::HostPath(PathBuf::from(format!("/tmp/qr-filetool-{token}"))),
        ),
    ]
}
