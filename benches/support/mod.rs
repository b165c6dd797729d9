//! What the benchmarks share: a flake repository made on the spot (no nixpkgs: a raw
//! derivation per commit) and the statistics they print.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use quest_runner_selftest::static_bash::{BuilderInput, BUILDER};

pub mod agents_alone;
pub mod pinned;
pub mod service_user;

/// A repository whose every commit has a devShell of its own (the commit's label is in the
/// derivation), so each new revision is a real miss; with a bare clone of it beside.
pub struct SampleRepo {
    dir: PathBuf,
}

impl SampleRepo {
    pub fn new(parent: &Path) -> SampleRepo {
        let dir = parent.join("repo");
        std::fs::create_dir_all(dir.join("src")).expect("repo dir");
        git(&dir.join("src"), &["init", "-q", "-b", "main"]);
        SampleRepo { dir }
    }

    /// The working repository, what a job fetches from.
    pub fn src(&self) -> PathBuf {
        self.dir.join("src")
    }

    /// Its bare clone, updated by every [`Self::commit`].
    pub fn bare(&self) -> PathBuf {
        self.dir.join("bare.git")
    }

    /// Commits a flake whose devShell carries `label`; returns the revision.
    pub fn commit(&self, label: &str) -> String {
        self.commit_with(label, "")
    }

    /// Commits a flake whose devShell carries `label` and `extra` (attributes of its
    /// derivation, e.g. a dependency another repository shares); returns the revision.
    pub fn commit_with(&self, label: &str, extra: &str) -> String {
        let system = format!("{}-linux", std::env::consts::ARCH);
        // Built by a static bash, as the tests' fixtures are (tests/support).
        // In the repository: a confined nix reads nothing of the host.
        let bash = BuilderInput::install(&self.dir.join("bash")).expect("a static bash");
        bash.copy_into(&self.src()).expect("copy the builder");
        let flake = format!(
            r#"{{ {inputs} outputs = {{ self }}: {{ devShells.{system}.default = derivation {{
  name = "bench-shell"; system = "{system}"; builder = "{BUILDER}"; outputs = [ "out" ];
  args = [ "-c" "echo > $out" ]; LABEL = "{label}"; {extra} }}; }}; }}"#,
            inputs = bash.flake_inputs(),
        );
        let src = self.src();
        std::fs::write(src.join("flake.nix"), flake).expect("write flake");
        std::fs::write(src.join("flake.lock"), bash.lock_file()).expect("write lock");
        git(&src, &["add", "-A"]);
        git(&src, &["commit", "-q", "-m", label]);
        if self.bare().exists() {
            git(&self.bare(), &["fetch", "-q", "../src", "+main:main"]);
        } else {
            git(&self.dir, &["clone", "-q", "--bare", "src", "bare.git"]);
        }
        git(&src, &["rev-parse", "HEAD"])
    }
}

pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args([
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@example.invalid",
        ])
        .args(args)
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The resident memory of process `pid`, in KiB (0 once it is gone).
pub fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}
