//! A runner that is its service user (setup (b): the systemd unit, NixOS, home-manager), for
//! benches run as root: `QUEST_RUNNER_BENCH_USER=<user>` names an existing unprivileged user,
//! and the bench starts the same `quest-runner` as that user under `setpriv`, with a state
//! directory of its own and a copy of the sample repository the user owns (git refuses a
//! repository another user owns). Such a runner builds devShells in a store of its own and
//! runs the agent as itself, so its jobs take the paths a root runner's do not.

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct ServiceUser {
    pub name: String,
    uid: u32,
    gid: u32,
    /// The user's state directory (its config beside the root runner's).
    pub state: PathBuf,
    home: PathBuf,
}

impl ServiceUser {
    /// The user `QUEST_RUNNER_BENCH_USER` names, with its own state directory and home under
    /// `work` (made traversable for it); `None` when the variable is unset or this is not root.
    pub fn from_env(work: &Path) -> Option<ServiceUser> {
        let name = std::env::var("QUEST_RUNNER_BENCH_USER").ok()?;
        if !rustix::process::geteuid().is_root() {
            return None;
        }
        let id = |flag: &str| -> u32 {
            let out = Command::new("id").args([flag, &name]).output().expect("id");
            assert!(out.status.success(), "no user {name}");
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .expect("a numeric id")
        };
        let (uid, gid) = (id("-u"), id("-g"));
        let dir = work.join("service-user");
        let (state, home) = (dir.join("state"), dir.join("home"));
        for d in [&state, &home] {
            std::fs::create_dir_all(d).expect("service user dirs");
        }
        set_mode(work, 0o755);
        set_mode(&dir, 0o755);
        let user = ServiceUser {
            name,
            uid,
            gid,
            state,
            home,
        };
        user.give(&dir);
        Some(user)
    }

    /// Hands `path` (a tree) to the user.
    pub fn give(&self, path: &Path) {
        let status = Command::new("chown")
            .arg("-R")
            .arg(format!("{}:{}", self.uid, self.gid))
            .arg(path)
            .status()
            .expect("chown");
        assert!(status.success(), "chown {}", path.display());
    }

    /// A copy of the tree at `src` the user owns, under its directory.
    pub fn own_copy(&self, src: &Path, name: &str) -> PathBuf {
        let dest = self.home.parent().expect("the user's dir").join(name);
        let status = Command::new("cp")
            .arg("-a")
            .arg(src)
            .arg(&dest)
            .status()
            .expect("cp");
        assert!(status.success(), "copying {}", src.display());
        self.give(&dest);
        dest
    }

    /// `program args` as the user, with an environment a service has (`PATH`, its `HOME`) and
    /// `env`, nothing else of root's.
    pub fn command(&self, program: &Path, env: &[(&str, &Path)]) -> Command {
        let (uid, gid) = (self.uid.to_string(), self.gid.to_string());
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid", &uid, "--regid", &gid, "--init-groups", "--"])
            .arg("env")
            .arg("-i")
            .arg(format!(
                "PATH={}",
                std::env::var("PATH").unwrap_or_default()
            ))
            .arg(format!("HOME={}", self.home.display()))
            .arg(format!("USER={}", self.name))
            .arg(format!(
                "NIX_CONFIG={}",
                std::env::var("NIX_CONFIG").unwrap_or_else(|_| "substituters =".into())
            ))
            .arg("RUST_LOG=warn");
        for (k, v) in env {
            cmd.arg(format!("{k}={}", v.display()));
        }
        cmd.arg(program).current_dir("/");
        cmd
    }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}
