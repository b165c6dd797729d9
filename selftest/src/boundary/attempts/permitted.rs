//! The permitted steps of a run: what commands must be able to do inside the same sandbox
//! (write the checkout and `$TMPDIR`, reach a registry through the proxy, read packages), so
//! that no refusal of an attempt can pass vacuously, and the closing steps after them.

use super::Targets;
use crate::model_server::Step;
use crate::scripts;

/// The shell command that commands run first: writes the checkout and `$TMPDIR`, sees the
/// devShell (an untrusted revision's too: built inside the job's boundary). If it fails,
/// every refusal below would be vacuous.
pub fn permitted(_t: &Targets) -> Step {
    let devshell = "echo \"devshell=$BOUNDARY_VAR\"; cat \"$HOME/shellhook-ran\"";
    Step::bash(format!(
        "echo ok > permitted.txt && echo ok > \"$TMPDIR/permitted\" && cat permitted.txt \"$TMPDIR/permitted\" && {devshell} && echo PERMITTED-RAN"
    ))
}

/// For trusted revisions: a request to a package registry goes through the sandbox's proxy,
/// which forwards it (offline it then fails upstream: any status but 403, or none). If the
/// proxy path were broken, every network refusal would be vacuous.
pub fn permitted_network() -> Step {
    // Over HTTPS too: the runner's proxy terminates TLS with the job's CA, which commands
    // trust through the policy's variables (offline, upstream then fails: a 5xx, not 000).
    Step::bash(
        "curl -sS -m 10 -o /dev/null -w 'status=%{http_code}' -x \"${HTTPS_PROXY:-$HTTP_PROXY}\" http://registry.npmjs.org/ ; curl -sS -m 10 -o /dev/null -w ' https-status=%{http_code}' https://registry.npmjs.org/ ; echo NET-RAN",
    )
}

/// The npm config the registry commands use: the stand-in as the registry, with a token
/// (what a publish needs), written into the command's own temp dir.
pub(super) fn npmrc(port: u16) -> String {
    scripts::fill(scripts::BOUNDARY_NPMRC, &[("PORT", &port.to_string())])
}

/// For trusted revisions: reads from a registry go through the runner's decider: `npm view`,
/// `npm install` (packument and tarball) and a plain `GET` of the stand-in registry. If they
/// failed, the refusals of the writes below would be vacuous.
pub fn permitted_registry_reads(port: u16, token: &str) -> Step {
    Step::bash(scripts::fill(
        scripts::BOUNDARY_REGISTRY_READS,
        &[
            ("NPMRC", &npmrc(port)),
            ("PKG", crate::npm_registry::PACKAGE),
            ("PORT", &port.to_string()),
            ("TOKEN", token),
        ],
    ))
}

/// For trusted runs where the suite planted the host's package-manager configuration (a
/// global npmrc with `cafile`, `strict-ssl` and a company proxy, a pip.conf with `cert` and
/// `proxy`; [`super::host_config`]): every package manager the host has reads `qr-pkg` from the
/// stand-in registry over HTTPS, through the runner's proxy and decider. First it shows that
/// the sandbox reads the planted files, and that without the runner's variable npm and pip
/// fail on them (certificate), so the reads that follow are not vacuous.
///
/// Prints `PLANTED-*`, `WITHOUT <client>: <error>`, and one `READ <client> ok|FAILED|skipped`
/// line per client; `PM-READS-RAN` at the end.
///
/// npm gets a cache of its own here (pip none, uv and deno their own dirs): the job's HOME
/// already holds `qr-pkg`'s tarball from [`permitted_registry_reads`], and npm takes a tarball
/// whose integrity it has cached without asking the registry, so `npm install` would fetch only
/// the packument over HTTPS and no tarball would pass the decider.
pub fn permitted_package_manager_reads(
    tls_port: u16,
    npmrc: &std::path::Path,
    token: &str,
) -> Step {
    let npmrc = quest_runner::util::shell::quote(&npmrc.to_string_lossy());
    Step::bash(scripts::fill(
        scripts::BOUNDARY_PACKAGE_MANAGER_READS,
        &[
            ("TLS_PORT", &tls_port.to_string()),
            ("NPMRC", &npmrc),
            ("MARK", &format!("boundary suite {token}")),
            ("PKG", crate::npm_registry::PACKAGE),
            ("VER", crate::npm_registry::VERSION),
        ],
    ))
}

/// Commits whatever the attempts left, then runs one more command, so any mount point the
/// sandbox leaves behind shows as uncommitted in the job's result.
pub fn closing() -> Vec<Step> {
    vec![
        Step::bash("git add -A && git commit -qm 'boundary run' ; echo CLOSING-RAN"),
        Step::bash("true; echo LAST-RAN"),
    ]
}
