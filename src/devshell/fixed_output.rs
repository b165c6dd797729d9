//! Fixed-output derivations of an untrusted revision, which gets no network for its builds.
//!
//! Nix gives a fixed-output build the network of whoever builds it: the daemon the runner
//! starts for the run, in the job's network (`super::daemon`). An untrusted revision gets no
//! network for its builds at all. So there, before anything is built, the devShell's closure
//! is read (`nix show-derivation -r`, inside the boundary) and the build is refused when a
//! fixed-output derivation's output is neither in the repository's store already nor in a
//! configured substituter: substituting it fetches from the operator's cache, never from
//! where the revision points.

use std::process::Stdio;

use tokio::process::Command;

use super::{build::nix_command, DevShellError, DevShells, Prepared};
use crate::process;

/// How many of the refused derivations the error names.
const NAMED: usize = 5;

pub(super) async fn refuse_unconfinable(
    shells: &DevShells,
    p: &Prepared,
    installable: &str,
) -> Result<(), DevShellError> {
    let scratch = super::scratch::Scratch::create()
        .map_err(|e| DevShellError::io("creating a directory in", &std::env::temp_dir(), e))?;
    let tail = [
        "show-derivation",
        "--recursive",
        "--no-update-lock-file",
        installable,
    ];
    let run = nix_command(shells, p, &tail, scratch.path()).await?;
    let out = process::run_captured(run.cmd, "nix")
        .await
        .map_err(|e| DevShellError::io("running", &p.nix.path, e))?;
    if !out.status.success() {
        return Err(DevShellError::Nix {
            what: format!("nix show-derivation --recursive {installable}"),
            message: super::network::without_network_hint(p, out.error_message()),
        });
    }
    let substituters = substituters(shells, p).await;
    let mut missing = Vec::new();
    for (drv, output) in fixed_outputs(&out.stdout) {
        if !available(shells, p, &output, &substituters).await {
            missing.push(drv);
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    let mut drvs: Vec<String> = missing.iter().take(NAMED).cloned().collect();
    if missing.len() > NAMED {
        drvs.push(format!("and {} more", missing.len() - NAMED));
    }
    // Only an untrusted revision's are refused: a trusted one's build in the daemon the runner
    // started for the run, in the job's network.
    Err(DevShellError::UnconfinedFixedOutput {
        drvs: drvs.join(", "),
    })
}

/// The fixed-output derivations of `nix show-derivation`'s JSON and their outputs' paths.
pub(super) fn fixed_outputs(json: &[u8]) -> Vec<(String, String)> {
    let Ok(serde_json::Value::Object(drvs)) = serde_json::from_slice(json) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (drv, value) in drvs {
        let Some(outputs) = value["outputs"].as_object() else {
            continue;
        };
        for output in outputs.values() {
            if output.get("hash").is_some() || output.get("hashAlgo").is_some() {
                if let Some(path) = output["path"].as_str() {
                    out.push((drv.clone(), path.to_string()));
                }
            }
        }
    }
    out
}

/// Whether `path` is valid in the repository's store (never the host's: what another tenant
/// built is not this one's), or in one of `substituters`. Asked by the runner's own nix,
/// outside the boundary: the caches are the operator's, not the revision's.
async fn available(shells: &DevShells, p: &Prepared, path: &str, substituters: &[String]) -> bool {
    let own = shells.repo_store(&p.repo).uri();
    for store in std::iter::once(&own).chain(substituters) {
        let mut cmd = Command::new(&p.nix.path);
        cmd.args(["--extra-experimental-features", "nix-command flakes"]);
        for (name, value) in &shells.nix_options {
            cmd.arg("--option").arg(name).arg(value);
        }
        cmd.args(["path-info", "--store", store]);
        cmd.arg(path).stdin(Stdio::null());
        if process::run_captured(cmd, "nix")
            .await
            .is_ok_and(|out| out.status.success())
        {
            return true;
        }
    }
    false
}

/// The substituters the runner's nix uses: the config's `nix.options`, else nix's own.
async fn substituters(shells: &DevShells, p: &Prepared) -> Vec<String> {
    let value = match shells.nix_options.get("substituters") {
        Some(v) => v.clone(),
        None => {
            let mut cmd = Command::new(&p.nix.path);
            cmd.args(["--extra-experimental-features", "nix-command flakes"]);
            cmd.args(["show-config"]).stdin(Stdio::null());
            let out = process::run_captured(cmd, "nix").await;
            let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
            text.unwrap_or_default()
                .lines()
                .find_map(|l| l.strip_prefix("substituters = ").map(str::to_string))
                .unwrap_or_default()
        }
    };
    value.split_whitespace().map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_outputs_are_the_hashed_ones() {
        let json = br#"{
          "/nix/store/a.drv": {"outputs": {"out": {"path": "/nix/store/a", "hashAlgo": "sha256", "hash": "00"}}},
          "/nix/store/b.drv": {"outputs": {"out": {"path": "/nix/store/b"}}}
        }"#;
        assert_eq!(
            fixed_outputs(json),
            vec![("/nix/store/a.drv".to_string(), "/nix/store/a".to_string())]
        );
        assert!(fixed_outputs(b"not json").is_empty());
    }
}
