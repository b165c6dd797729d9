//! Turning `nix print-dev-env --json` into a bash script to source inside the sandbox.
//!
//! `nix develop` does this itself, but its script also resets the variables a shell needs from
//! its surroundings (HOME, TMPDIR, TERM, ...) to the values they had in the Nix builder, and it
//! would run on whatever machine executes it. Ours is rendered once, cached, and sourced only
//! inside a job's sandbox, so it leaves those variables to the sandbox, prepends search paths
//! instead of replacing them, keeps the bash functions, and runs `shellHook` last.

use crate::util::shell::quote;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Deserialize;

/// The JSON document `nix print-dev-env --json` prints.
#[derive(Debug, Deserialize)]
pub struct DevEnv {
    #[serde(default)]
    pub variables: BTreeMap<String, Variable>,
    #[serde(default, rename = "bashFunctions")]
    pub bash_functions: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Variable {
    Exported {
        value: String,
    },
    Var {
        value: String,
    },
    Array {
        value: Vec<String>,
    },
    Associative {
        value: BTreeMap<String, String>,
    },
    /// Bash internals Nix could not serialise (BASHOPTS, BASHPID, ...).
    #[serde(other)]
    Unknown,
}

/// Variables whose value must come from where the script is sourced, not from the Nix build
/// that produced it: the sandbox's private HOME and TMPDIR, its terminal and shell, and bash's
/// own bookkeeping. The first group mirrors `nix develop`'s list.
const FROM_SANDBOX: &[&str] = &[
    // nix develop's own list
    "BASHOPTS",
    "HOME",
    "NIX_BUILD_TOP",
    "NIX_ENFORCE_PURITY",
    "NIX_LOG_FD",
    "NIX_REMOTE",
    "PPID",
    "SHELLOPTS",
    "SSL_CERT_FILE",
    "NIX_SSL_CERT_FILE",
    "TEMP",
    "TEMPDIR",
    "TERM",
    "TMP",
    "TMPDIR",
    "TZ",
    "UID",
    // the builder's shell and identity, which are not the sandbox's
    "SHELL",
    "USER",
    "LOGNAME",
    "HOSTNAME",
    "PWD",
    "OLDPWD",
    "SHLVL",
    "_",
    // bash internals that are read-only, per-process, or describe the build machine's bash
    "BASH",
    "BASHPID",
    "BASH_ARGC",
    "BASH_ARGV",
    "BASH_ARGV0",
    "BASH_COMMAND",
    "BASH_LINENO",
    "BASH_SOURCE",
    "BASH_SUBSHELL",
    "BASH_VERSINFO",
    "BASH_VERSION",
    "BASH_EXECUTION_STRING",
    "COMP_WORDBREAKS",
    "DIRSTACK",
    "EPOCHREALTIME",
    "EPOCHSECONDS",
    "EUID",
    "FUNCNAME",
    "GROUPS",
    "HISTCMD",
    "HOSTTYPE",
    "IFS",
    "LINENO",
    "MACHTYPE",
    "OPTERR",
    "OPTIND",
    "OSTYPE",
    "PIPESTATUS",
    "PS4",
    "RANDOM",
    "SECONDS",
    "SRANDOM",
];

/// Search paths that are prepended to the sandbox's own value instead of replacing it.
const PREPENDED: &[&str] = &["PATH", "XDG_DATA_DIRS"];

/// The variable that holds the hook `nix develop` runs on entry.
const SHELL_HOOK: &str = "shellHook";

#[derive(Debug, Clone, thiserror::Error)]
pub enum RenderError {
    #[error("nix print-dev-env printed JSON this runner does not understand: {0}")]
    Json(String),
}

/// Parses nix's JSON and renders the script. `header` is written as a comment at the top.
pub fn render_json(json: &[u8], header: &str) -> Result<String, RenderError> {
    let env: DevEnv = serde_json::from_slice(json).map_err(|e| RenderError::Json(e.to_string()))?;
    Ok(render(&env, header))
}

pub fn render(env: &DevEnv, header: &str) -> String {
    let mut out = String::new();
    for line in header.lines() {
        let _ = writeln!(out, "# {line}");
    }
    let mut skipped = Vec::new();
    for (name, var) in &env.variables {
        if FROM_SANDBOX.contains(&name.as_str()) || name == SHELL_HOOK {
            continue;
        }
        if !is_variable_name(name) {
            skipped.push(name.as_str());
            continue;
        }
        match var {
            Variable::Exported { value } if PREPENDED.contains(&name.as_str()) => {
                let _ = writeln!(
                    out,
                    "export {name}={}\"${{{name}:+:${name}}}\"",
                    quote(value)
                );
            }
            Variable::Exported { value } => {
                let _ = writeln!(out, "export {name}={}", quote(value));
            }
            Variable::Var { value } => {
                let _ = writeln!(out, "{name}={}", quote(value));
            }
            Variable::Array { value } => {
                let items: Vec<String> = value.iter().map(|v| quote(v)).collect();
                let _ = writeln!(out, "declare -a {name}=({})", items.join(" "));
            }
            Variable::Associative { value } => {
                let items: Vec<String> = value
                    .iter()
                    .map(|(k, v)| format!("[{}]={}", quote(k), quote(v)))
                    .collect();
                let _ = writeln!(out, "declare -A {name}=({})", items.join(" "));
            }
            Variable::Unknown => {}
        }
    }
    for (name, body) in &env.bash_functions {
        if !is_function_name(name) {
            skipped.push(name.as_str());
            continue;
        }
        // The same shape `nix develop` writes: nix hands over the body without its braces.
        let _ = write!(out, "{name} ()\n{{\n{body}");
        if !body.ends_with('\n') {
            out.push('\n');
        }
        out.push_str("}\n");
    }
    if !skipped.is_empty() {
        tracing::warn!(names = ?skipped, "devShell names that bash cannot define were left out");
    }
    // Last, as `nix develop` does: the hook sees every variable and function above.
    if let Some(Variable::Exported { value } | Variable::Var { value }) =
        env.variables.get(SHELL_HOOK)
    {
        let _ = writeln!(out, "{SHELL_HOOK}={}", quote(value));
        let _ = writeln!(out, "eval \"${{{SHELL_HOOK}:-}}\"");
    }
    out
}

fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Bash accepts many characters in function names; these are the ones that cannot break the
/// script's structure.
fn is_function_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || "_.:+-@".contains(c))
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;
