//! The builder of every devShell the project makes itself: the selftest's sample, the boundary
//! suite's hostile repository, and the tests' and benches' fixtures.
//!
//! Nix builds in a sandbox (on by default on Linux, on NixOS, with the official installer)
//! that holds nothing of the host but the store paths a derivation names: no `/bin/bash`
//! (NixOS has none at all) and no library. And `nix print-dev-env` takes only a builder whose
//! file name is `bash`. With no nixpkgs reachable, these flakes therefore take a directory
//! holding `bin/bash`, a copy of a statically linked bash, as a `path:` input (`flake = false`)
//! and build with `"${bash}/bin/bash"`. The lock pins the directory's NAR hash, computed here:
//! no `nix flake lock` run is needed, the runner passes `--no-update-lock-file` as it does for
//! every repository, and Nix refuses the input if the copy changed.
//!
//! The bash comes from `QUEST_RUNNER_BASH_STATIC`, else `bash-static` on `PATH` (Debian's and
//! Ubuntu's `bash-static` package); the Nix package points the variable at nixpkgs' static bash.

use std::path::{Path, PathBuf};

use quest_runner::binaries::{self, BinaryError, Tool};
use quest_runner::util::elf::is_dynamic_elf;
#[cfg(test)]
use quest_runner::util::elf::is_dynamically_linked;
use quest_runner::util::io::{IoContext, IoError};

/// The flake input's name, and the builder the flake's derivations name.
pub const INPUT: &str = "bash";
pub const BUILDER: &str = "${bash}/bin/bash";

#[derive(Debug, thiserror::Error)]
pub enum StaticBashError {
    #[error("no static bash for the devShells the runner builds itself: {0} (Debian and Ubuntu: apt-get install bash-static)")]
    NotFound(#[from] BinaryError),
    #[error(
        "{path} is dynamically linked, and Nix's build sandbox holds no library for it: point \
         QUEST_RUNNER_BASH_STATIC at a statically linked bash (Debian and Ubuntu: apt-get install bash-static)"
    )]
    Dynamic { path: PathBuf },
    #[error(
        "{path} cannot be a Nix path input: only letters, digits and / . _ + - are allowed \
         (Nix reads a path: URL without decoding it); choose a directory with a plainer name"
    )]
    UnsafePath { path: PathBuf },
    #[error("nix store add-path {dir} failed ({status})")]
    NotAdded { dir: PathBuf, status: String },
    #[error(transparent)]
    Io(#[from] IoError),
}

/// A directory holding `bin/bash`, with the NAR hash its lock entry needs.
#[derive(Debug, Clone)]
pub struct BuilderInput {
    dir: PathBuf,
    nar_hash: String,
}

impl BuilderInput {
    /// Puts a copy of the static bash (see the module doc) at `dir/bin/bash`.
    pub fn install(dir: &Path) -> Result<BuilderInput, StaticBashError> {
        BuilderInput::install_from(&binaries::find(Tool::BashStatic)?, dir)
    }

    /// Puts a copy of `bash`, which must be statically linked, at `dir/bin/bash`. An identical
    /// copy already there is kept (the selftest's sample keeps its revision from run to run);
    /// any other is replaced whole, by a rename, so a reader never sees half a file.
    pub fn install_from(bash: &Path, dir: &Path) -> Result<BuilderInput, StaticBashError> {
        let dir = std::path::absolute(dir).at("resolving", dir)?;
        if !dir
            .to_string_lossy()
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._+-".contains(c))
        {
            return Err(StaticBashError::UnsafePath { path: dir });
        }
        let bytes = std::fs::read(bash).at("reading", bash)?;
        if is_dynamic_elf(&bytes) {
            return Err(StaticBashError::Dynamic {
                path: bash.to_path_buf(),
            });
        }
        let bin = dir.join("bin");
        let target = bin.join("bash");
        if std::fs::read(&target).ok().as_deref() != Some(&bytes[..]) {
            std::fs::create_dir_all(&bin).at("creating", &bin)?;
            // The temporary copy sits beside `dir`, not in it: a copy left by a killed run must
            // not become part of the input.
            let parent = dir.parent().unwrap_or(Path::new("/"));
            let mut tmp = tempfile::Builder::new()
                .prefix(".quest-bash-")
                .tempfile_in(parent)
                .at("creating a file in", parent)?;
            std::io::Write::write_all(&mut tmp, &bytes).at("writing", tmp.path())?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o555))
                .at("setting the mode of", tmp.path())?;
            tmp.persist(&target)
                .map_err(|e| e.error)
                .at("writing", &target)?;
        }
        let nar_hash = quest_runner::nar::nar_hash(&dir).at("hashing", &dir)?;
        Ok(BuilderInput { dir, nar_hash })
    }

    /// The same input as a store path (`nix store add-path`): what a nix confined to a job's
    /// boundary can read wherever the copy was made (a temp dir, the state directory: both
    /// hidden from it). The NAR hash, and so the lock, is the copy's.
    pub fn in_store(&self) -> Result<BuilderInput, StaticBashError> {
        let nix = binaries::find(Tool::Nix)?;
        let out = std::process::Command::new(&nix)
            .args(["--extra-experimental-features", "nix-command"])
            .args(["store", "add-path", "--name", INPUT])
            .arg(&self.dir)
            .stderr(std::process::Stdio::inherit())
            .output()
            .at("running", &nix)?;
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !out.status.success() || !text.starts_with('/') {
            return Err(StaticBashError::NotAdded {
                dir: self.dir.clone(),
                status: out.status.to_string(),
            });
        }
        Ok(BuilderInput {
            dir: PathBuf::from(text),
            nar_hash: self.nar_hash.clone(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The input's URL: `path:<dir>`.
    pub fn url(&self) -> String {
        format!("path:{}", self.dir.display())
    }

    /// The flake's `inputs` entry; the flake's `outputs` then takes `{ self, bash }`.
    pub fn flake_inputs(&self) -> String {
        format!(
            "inputs.{INPUT} = {{ url = \"{}\"; flake = false; }};",
            self.url()
        )
    }

    /// The `flake.lock` that goes beside a `flake.nix` with [`flake_inputs`](Self::flake_inputs)
    /// and no other input.
    pub fn lock_file(&self) -> String {
        let dir = self.dir.to_string_lossy();
        let lock = serde_json::json!({
            "nodes": {
                INPUT: {
                    "flake": false,
                    "locked": { "narHash": self.nar_hash, "path": dir, "type": "path" },
                    "original": { "path": dir, "type": "path" },
                },
                "root": { "inputs": { INPUT: INPUT } },
            },
            "root": "root",
            "version": 7,
        });
        // serde_json's map keeps keys sorted, as Nix writes them.
        let mut text = serde_json::to_string_pretty(&lock).unwrap_or_default();
        text.push('\n');
        text
    }
}

#[cfg(test)]
#[path = "static_bash_tests.rs"]
mod tests;
