//! The systemd system unit of `quest-runner serve`.
//!
//! Every fixed setting (ordering, restart and stop behaviour, directories, hardening) lives in
//! `nix/service-hardening.json`, embedded here and read by the NixOS module too, so
//! `quest-runner systemd-unit` and `services.quest-runner` start the same service. This module
//! only adds what depends on the installation: ExecStart, User, Group, the environment.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::DeployError;

/// The shared settings, as shipped.
pub const SETTINGS_JSON: &str = include_str!("../../nix/service-hardening.json");

/// The user both the printed unit and the NixOS module default to.
pub const DEFAULT_USER: &str = "quest-runner";

/// `nix/service-hardening.json`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnitSettings {
    /// What the file is; not rendered.
    pub about: String,
    pub unit: Vec<Setting>,
    pub service: Vec<Setting>,
    pub install: Vec<Setting>,
}

/// One `Key=value` of a section, with the reason it is there.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Setting {
    pub key: String,
    pub value: Value,
    #[serde(default)]
    pub why: Option<String>,
}

/// The JSON types the file uses; the NixOS module hands the same values to
/// `systemd.services.<name>.serviceConfig`, which renders them the same way.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Value {
    Bool(bool),
    Int(i64),
    Text(String),
    /// One `Key=item` line per item, as NixOS writes lists.
    List(Vec<String>),
}

impl Value {
    fn lines(&self) -> Vec<String> {
        match self {
            // NixOS writes booleans as true/false; systemd reads both spellings alike.
            Value::Bool(b) => vec![b.to_string()],
            Value::Int(i) => vec![i.to_string()],
            Value::Text(s) => vec![s.clone()],
            Value::List(items) => items.clone(),
        }
    }
}

impl UnitSettings {
    /// The `[Service]` value of `key`, if the file sets it.
    pub fn service_value(&self, key: &str) -> Option<&Value> {
        self.service.iter().find(|s| s.key == key).map(|s| &s.value)
    }
}

/// Parses the shipped settings.
pub fn settings() -> Result<UnitSettings, DeployError> {
    serde_json::from_str(SETTINGS_JSON).map_err(DeployError::Settings)
}

/// What differs between installations.
#[derive(Debug, Clone)]
pub struct UnitParams {
    /// The quest-runner binary (for a Nix install, the wrapper that pins the tools).
    pub exec: PathBuf,
    pub user: String,
    pub group: String,
    pub environment_file: Option<PathBuf>,
}

/// The binary a unit should start when none is named: the Nix package's wrapper sets
/// `QUEST_RUNNER_EXE` to itself, because `current_exe` would name the unwrapped binary and
/// lose the pinned tools.
pub fn default_exec() -> Result<PathBuf, DeployError> {
    match std::env::var_os("QUEST_RUNNER_EXE").filter(|v| !v.is_empty()) {
        Some(exe) => Ok(PathBuf::from(exe)),
        None => std::env::current_exe().map_err(DeployError::CurrentExe),
    }
}

/// Renders the unit file.
pub fn render(params: &UnitParams) -> Result<String, DeployError> {
    let settings = settings()?;
    let exec = unit_path("ExecStart binary", &params.exec)?;
    let user = unit_name("User", &params.user)?;
    let group = unit_name("Group", &params.group)?;
    let env_file = params
        .environment_file
        .as_deref()
        .map(|p| unit_path("EnvironmentFile", p))
        .transpose()?;
    // The runner's paths follow the directories the settings create, so renaming one there
    // moves both the directory and the variable pointing at it.
    let dir = |key: &str| match settings.service_value(key) {
        Some(Value::Text(name)) => Ok(name.clone()),
        _ => Err(DeployError::UnitValue {
            what: "setting",
            value: key.to_string(),
            reason: "nix/service-hardening.json must name this directory",
        }),
    };
    let state = dir("StateDirectory")?;
    let cache = dir("CacheDirectory")?;

    let mut out = String::new();
    out.push_str(
        "# quest-runner's system service, printed by `quest-runner systemd-unit`.\n\
         # The settings come from nix/service-hardening.json, which the NixOS module\n\
         # (services.quest-runner) uses too. Install as /etc/systemd/system/quest-runner.service;\n\
         # change settings with a drop-in (`systemctl edit quest-runner`), not by editing this\n\
         # file. A list setting (one line per item: SystemCallFilter=, RestrictAddressFamilies=,\n\
         # CapabilityBoundingSet=, ...) is extended by the drop-in's lines: `SystemCallFilter=~@clock`\n\
         # keeps the allow-list below and takes @clock from it, `RestrictAddressFamilies=AF_PACKET`\n\
         # keeps AF_UNIX and the rest. An empty assignment first (`SystemCallFilter=`) replaces\n\
         # the list. A scalar line replaces the value here.\n",
    );
    section(&mut out, "Unit", &settings.unit, &[]);
    let mut own = vec![
        (
            Some("This installation's binary; the shared settings follow."),
            "ExecStart",
            format!("{exec} serve"),
        ),
        (
            Some("serve reloads its configuration on SIGHUP."),
            "ExecReload",
            "/bin/kill -HUP $MAINPID".to_string(),
        ),
        (None, "User", user.to_string()),
        (None, "Group", group.to_string()),
        (
            Some("The state directory StateDirectory= creates; HOME too, for the tools the runner starts."),
            "Environment",
            format!("QUEST_RUNNER_STATE_DIR=%S/{state}"),
        ),
        (None, "Environment", format!("HOME=%S/{state}")),
        (None, "Environment", format!("XDG_CACHE_HOME=%C/{cache}")),
    ];
    if let Some(file) = env_file {
        own.push((
            Some(
                "Operator's variables (RUST_LOG, proxies); keep secrets in account files instead.",
            ),
            "EnvironmentFile",
            file.to_string(),
        ));
    }
    section(&mut out, "Service", &settings.service, &own);
    section(&mut out, "Install", &settings.install, &[]);
    Ok(out)
}

type OwnLine<'a> = (Option<&'a str>, &'a str, String);

fn section(out: &mut String, name: &str, settings: &[Setting], first: &[OwnLine]) {
    out.push_str(&format!("\n[{name}]\n"));
    for (why, key, value) in first {
        if let Some(why) = why {
            comment(out, why);
        }
        out.push_str(&format!("{key}={value}\n"));
    }
    for s in settings {
        if let Some(why) = &s.why {
            comment(out, why);
        }
        for line in s.value.lines() {
            out.push_str(&format!("{}={line}\n", s.key));
        }
    }
}

/// Writes `text` as `#` lines of at most about 96 columns.
fn comment(out: &mut String, text: &str) {
    let mut line = String::from("#");
    for word in text.split_whitespace() {
        if line.len() > 1 && line.len() + 1 + word.len() > 96 {
            out.push_str(&line);
            out.push('\n');
            line = String::from("#");
        }
        line.push(' ');
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
}

/// An absolute path written into the unit as it is. systemd would expand `%` specifiers and
/// `$` variables and split on spaces, so such paths are refused rather than escaped.
fn unit_path<'a>(what: &'static str, path: &'a Path) -> Result<&'a str, DeployError> {
    let bad = |reason| DeployError::UnitValue {
        what,
        value: path.display().to_string(),
        reason,
    };
    let text = path.to_str().ok_or_else(|| bad("it is not UTF-8"))?;
    if !path.is_absolute() {
        return Err(bad("it must be an absolute path"));
    }
    let unsafe_char = |c: char| {
        c.is_whitespace() || c.is_control() || matches!(c, '%' | '$' | '"' | '\'' | '\\' | ';')
    };
    if text.chars().any(unsafe_char) {
        return Err(bad(
            "it holds a space, quote, backslash, %, $ or ; that systemd would interpret",
        ));
    }
    Ok(text)
}

/// A user or group name: what useradd accepts, and nothing systemd would interpret.
fn unit_name<'a>(what: &'static str, name: &'a str) -> Result<&'a str, DeployError> {
    let valid = !name.is_empty()
        && !name.starts_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if valid {
        Ok(name)
    } else {
        Err(DeployError::UnitValue {
            what,
            value: name.to_string(),
            reason: "a user or group name is letters, digits, '_', '-' and '.'",
        })
    }
}

#[cfg(test)]
#[path = "systemd_tests.rs"]
mod tests;
