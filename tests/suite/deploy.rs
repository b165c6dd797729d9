//! The deployment files: every .nix file parses, the printed systemd unit passes
//! `systemd-analyze verify` without a warning about it, the AppArmor profile is printed for the
//! canonical bwrap, flake.lock pins the published nixos-25.11, and the Nix side reads the same
//! unit settings, profile template and npm pins as the Rust side.
//!
//! Checks that need a tool this host lacks (nix-instantiate, systemd-analyze) print why they
//! are skipped; inside the Nix build sandbox that is most of them. AppArmor's own parser runs
//! in scripts/test (Debian 13 rootfs), since this host's kernel has no AppArmor.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use quest_runner::deploy::{apparmor, systemd};

use crate::support::nix_eval;
use nix_eval::{eval as nix_eval, nix_instantiate, root};

fn runner() -> Command {
    Command::new(env!("CARGO_BIN_EXE_quest-runner"))
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Templates among the .nix files: not Nix until quest-runner substitutes a placeholder.
const TEMPLATES: &[(&str, &str, &str)] =
    &[("selftest/src/sample-flake.nix", "@SYSTEM@", "x86_64-linux")];

fn nix_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" || name == "node_modules" {
            continue;
        }
        if path.is_dir() {
            nix_files(&path, found);
        } else if name.ends_with(".nix") {
            found.push(path);
        }
    }
}

#[test]
fn every_nix_file_parses() {
    let Some(nix) = nix_instantiate("every_nix_file_parses") else {
        return;
    };
    let mut files = Vec::new();
    nix_files(&root(), &mut files);
    for expected in [
        "flake.nix",
        "modules/nixos.nix",
        "modules/home-manager.nix",
        "nix/package.nix",
    ] {
        assert!(
            files.contains(&root().join(expected)),
            "{expected} not found"
        );
    }
    let scratch = tempfile::tempdir().unwrap();
    for file in &files {
        let rel = file
            .strip_prefix(root())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let target = match TEMPLATES.iter().find(|(path, _, _)| *path == rel) {
            Some((_, placeholder, value)) => {
                let text = std::fs::read_to_string(file)
                    .unwrap()
                    .replace(placeholder, value);
                let copy = scratch.path().join(file.file_name().unwrap());
                std::fs::write(&copy, text).unwrap();
                copy
            }
            None => file.clone(),
        };
        let out = Command::new(&nix)
            .args(["--readonly-mode", "--store", "dummy://", "--parse"])
            .arg(&target)
            .output()
            .unwrap();
        assert!(out.status.success(), "{rel}: {}", stderr(&out));
    }
    eprintln!("parsed {} .nix files", files.len());
}

#[test]
fn printed_unit_passes_systemd_analyze_verify() {
    let Ok(analyze) = which::which("systemd-analyze") else {
        eprintln!(
            "SKIPPED printed_unit_passes_systemd_analyze_verify: systemd-analyze is not on PATH"
        );
        return;
    };
    // verify needs ExecStart to exist: the binary under test is one.
    let out = runner()
        .args(["systemd-unit", "--exec", env!("CARGO_BIN_EXE_quest-runner")])
        .args(["--environment-file", "/etc/quest-runner/env"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let dir = tempfile::tempdir().unwrap();
    let unit = dir.path().join("quest-runner.service");
    std::fs::write(&unit, &out.stdout).unwrap();
    let verify = Command::new(analyze)
        .args(["verify", "--man=no"])
        .arg(&unit)
        .output()
        .unwrap();
    // Lines about the host (no systemd as PID 1, other units) are not the unit's business.
    let text = format!("{}{}", stdout(&verify), stderr(&verify));
    let about_unit: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("quest-runner.service") || l.contains(&*unit.to_string_lossy()))
        .collect();
    if !text.trim().is_empty() {
        eprintln!("systemd-analyze verify said:\n{text}");
    }
    assert!(
        about_unit.is_empty(),
        "warnings about the unit: {about_unit:#?}"
    );
}

#[test]
fn apparmor_profile_is_printed_for_the_canonical_bwrap() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("store/bin");
    std::fs::create_dir_all(&real).unwrap();
    let bwrap = real.join("bwrap");
    std::fs::write(&bwrap, "#!/bin/sh\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&bwrap, std::fs::Permissions::from_mode(0o755)).unwrap();
    let link = dir.path().join("bwrap-link");
    std::os::unix::fs::symlink(&bwrap, &link).unwrap();

    let out = runner()
        .arg("apparmor-profile")
        .env("QUEST_RUNNER_BWRAP", &link)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let canonical = std::fs::canonicalize(&bwrap).unwrap();
    let header = format!("profile quest_runner_bwrap {} flags=(", canonical.display());
    assert!(stdout(&out).contains(&header), "{}", stdout(&out));

    let missing = runner()
        .arg("apparmor-profile")
        .env("QUEST_RUNNER_BWRAP", dir.path().join("absent"))
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(3), "{}", stderr(&missing));
    assert!(
        stderr(&missing).contains("QUEST_RUNNER_BWRAP"),
        "{}",
        stderr(&missing)
    );
}

/// The published lock entry, from ../shared when this checkout has it beside it (as on the
/// project's machines and CI), else the same values as constants.
fn expected_nixpkgs_lock() -> serde_json::Value {
    let shared = root().join("../shared/data/nixpkgs-lock.json");
    match std::fs::read_to_string(&shared) {
        Ok(text) => serde_json::from_str::<serde_json::Value>(&text).unwrap()["nixpkgs"].clone(),
        Err(_) => {
            eprintln!(
                "{} absent: comparing against the built-in values",
                shared.display()
            );
            serde_json::json!({
                "locked": {
                    "lastModified": 1779102034,
                    "narHash": "sha256-vZJZjLo513IeI8hjzHFc6TDezUd4uCE2Eq4SNO3DNNg=",
                    "owner": "NixOS",
                    "repo": "nixpkgs",
                    "rev": "687f05a9184cad4eaf905c48b63649e3a86f5433",
                    "type": "github"
                },
                "original": {
                    "owner": "NixOS",
                    "ref": "nixos-25.11",
                    "repo": "nixpkgs",
                    "type": "github"
                }
            })
        }
    }
}

#[test]
fn flake_lock_pins_the_published_nixpkgs() {
    let text = std::fs::read_to_string(root().join("flake.lock")).unwrap();
    let lock: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(lock["version"], 7);
    let root_node = lock["root"].as_str().unwrap();
    let inputs = lock["nodes"][root_node]["inputs"].as_object().unwrap();
    assert_eq!(
        inputs.keys().collect::<Vec<_>>(),
        ["nixpkgs"],
        "one input, nixpkgs"
    );
    let node = &lock["nodes"][inputs["nixpkgs"].as_str().unwrap()];
    let expected = expected_nixpkgs_lock();
    assert_eq!(node["locked"], expected["locked"]);
    assert_eq!(node["original"], expected["original"]);

    // A real narHash: SRI sha256 of 32 bytes, not a placeholder.
    let nar = node["locked"]["narHash"].as_str().unwrap();
    let b64 = nar.strip_prefix("sha256-").unwrap();
    assert_eq!(b64.len(), 44);
    assert!(b64.ends_with('=') && !b64.trim_end_matches('=').contains('='));
    assert!(!b64.starts_with("AAAAAAAA"), "placeholder hash {nar}");
    let rev = node["locked"]["rev"].as_str().unwrap();
    assert!(rev.len() == 40 && rev.chars().all(|c| c.is_ascii_hexdigit()));

    // flake.nix asks for what the lock holds.
    let flake = std::fs::read_to_string(root().join("flake.nix")).unwrap();
    let original = &expected["original"];
    let url = format!(
        "inputs.nixpkgs.url = \"github:{}/{}/{}\";",
        original["owner"].as_str().unwrap(),
        original["repo"].as_str().unwrap(),
        original["ref"].as_str().unwrap()
    );
    assert!(flake.contains(&url), "flake.nix lacks {url}");
}

#[test]
fn nix_modules_read_the_settings_the_unit_is_printed_from() {
    let Some(nix) = nix_instantiate("nix_modules_read_the_settings_the_unit_is_printed_from")
    else {
        return;
    };
    let from_nix = nix_eval(
        &nix,
        "{ root }: import (root + \"/nix/service-settings.nix\")",
    );
    let settings = systemd::settings().unwrap();
    for (section, list) in [
        ("unit", &settings.unit),
        ("service", &settings.service),
        ("install", &settings.install),
    ] {
        let attrs = from_nix[section].as_object().unwrap();
        assert_eq!(attrs.len(), list.len(), "{section}");
        for s in list {
            let value = serde_json::to_value(match &s.value {
                systemd::Value::Bool(b) => serde_json::json!(b),
                systemd::Value::Int(i) => serde_json::json!(i),
                systemd::Value::Text(t) => serde_json::json!(t),
                systemd::Value::List(l) => serde_json::json!(l),
            })
            .unwrap();
            assert_eq!(attrs[&s.key], value, "{section}.{}", s.key);
        }
    }
}

#[test]
fn nix_renders_the_same_apparmor_profile() {
    let Some(nix) = nix_instantiate("nix_renders_the_same_apparmor_profile") else {
        return;
    };
    let bwrap = "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-bubblewrap-0.11.0/bin/bwrap";
    let seccomp = "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-sandbox-runtime-0.0.1/lib/node_modules/@anthropic-ai/sandbox-runtime/vendor/seccomp/x64/apply-seccomp";
    let daemon = "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-nix-2.28.0/bin/nix";
    let from_nix = nix_eval(
        &nix,
        &format!(
            "{{ root }}: import (root + \"/nix/apparmor/profile.nix\") {{ bwrap = \"{bwrap}\"; applySeccomp = \"{seccomp}\"; nixDaemon = \"{daemon}\"; }}"
        ),
    );
    let programs = apparmor::Programs {
        bwrap: bwrap.into(),
        apply_seccomp: seccomp.into(),
        nix_daemon: daemon.into(),
    };
    assert_eq!(
        from_nix.as_str().unwrap(),
        apparmor::render(&programs).unwrap()
    );
}

#[test]
fn sandbox_runtime_is_fetched_at_the_npm_pins() {
    let Some(nix) = nix_instantiate("sandbox_runtime_is_fetched_at_the_npm_pins") else {
        return;
    };
    let pins = nix_eval(
        &nix,
        "{ root }: (import (root + \"/nix/npm-lock.nix\") (root + \"/npm/package-lock.json\")).closure \"@anthropic-ai/sandbox-runtime\"",
    );
    let lock: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("npm/package-lock.json")).unwrap(),
    )
    .unwrap();
    let packages = &lock["packages"];
    // The closure of sandbox-runtime's dependencies, computed independently here.
    let mut want = vec!["@anthropic-ai/sandbox-runtime".to_string()];
    let mut i = 0;
    while i < want.len() {
        let entry = &packages[format!("node_modules/{}", want[i])];
        if let Some(deps) = entry["dependencies"].as_object() {
            for dep in deps.keys() {
                if !want.contains(dep) {
                    want.push(dep.clone());
                }
            }
        }
        i += 1;
    }
    let pins = pins.as_array().unwrap();
    let mut got: Vec<String> = pins
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    for pin in pins {
        let name = pin["name"].as_str().unwrap();
        let entry = &packages[format!("node_modules/{name}")];
        assert_eq!(pin["version"], entry["version"], "{name}");
        let integrity = entry["integrity"].as_str().unwrap();
        assert!(integrity.starts_with("sha512-"), "{name}: {integrity}");
        assert_eq!(pin["hash"], integrity, "{name}");
        let unscoped = name.rsplit('/').next().unwrap();
        let url = format!(
            "https://registry.npmjs.org/{name}/-/{unscoped}-{}.tgz",
            entry["version"].as_str().unwrap()
        );
        assert_eq!(pin["url"], url.as_str(), "{name}");
    }
    assert_eq!(pins[0]["version"], "0.0.83", "the pinned srt");
}
