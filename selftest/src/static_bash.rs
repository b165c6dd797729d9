//! The builder of every devShell the project makes itself: the selftest's sample, the boundary
//! suite's hostile repository, and the tests' and benches' fixtures.
//!
//! Nix builds in a sandbox (on by default on Linux, on NixOS, with the official installer)
//! that holds nothing of the host but the store paths a derivation names: no `/bin/bash`
//! (NixOS has none at all) and no library. And `nix print-dev-env` takes only a builder whose
//! file name is `bash`. With no nixpkgs reachable, these flakes therefore carry a directory
//! [`DIR`] holding `bin/bash`, a copy of a statically linked bash, committed in the
//! repository itself, and build with `"${./builder}/bin/bash"`. The repository brings its
//! builder: a job's nix reads nothing of the host and opens its repository's store only
//! (`quest_runner::devshell::repo_store`), so a path elsewhere, or one added to the host's
//! store, is out of its reach by design. The flake has no input, so its lock is the empty one.
//!
//! The bash comes from `QUEST_RUNNER_BASH_STATIC`, else `bash-static` on `PATH` (Debian's and
//! Ubuntu's `bash-static` package); the Nix package points the variable at nixpkgs' static bash.

use std::path::{Path, PathBuf};

use quest_runner::binaries::{self, BinaryError, Tool};
use quest_runner::util::elf::is_dynamic_elf;
#[cfg(test)]
use quest_runner::util::elf::is_dynamically_linked;
use quest_runner::util::io::{IoContext, IoError};

/// The directory of the repository that holds the builder, and the builder the flake's
/// derivations name (a path literal: the flake's own copy).
pub const DIR: &str = "builder";
pub const BUILDER: &str = "${./builder}/bin/bash";

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

    /// Puts a copy of this builder in the repository checked out at `src` ([`DIR`]), to be
    /// committed with the flake.
    pub fn copy_into(&self, src: &Path) -> Result<(), StaticBashError> {
        BuilderInput::install_from(&self.dir.join("bin/bash"), &src.join(DIR)).map(|_| ())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The NAR hash of the builder's directory.
    pub fn nar_hash(&self) -> &str {
        &self.nar_hash
    }

    /// The flake's `inputs`: none (the builder is the repository's own); the flake's
    /// `outputs` then takes `{ self }`.
    pub fn flake_inputs(&self) -> String {
        String::new()
    }

    /// The `flake.lock` of a flake with no input.
    pub fn lock_file(&self) -> String {
        let lock = serde_json::json!({
            "nodes": { "root": {} },
            "root": "root",
            "version": 7,
        });
        let mut text = serde_json::to_string_pretty(&lock).unwrap_or_default();
        text.push('\n');
        text
    }
}

#[cfg(test)]
#[path = "static_bash_tests.rs"]
mod tests;
