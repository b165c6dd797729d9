//! Secrets the fixture planted in host places only root may create (`/root`, `/home`,
//! `/run/user`, another job's temp dir, `/var/lib`, `/run/secrets`), `/etc/shadow`, and the
//! cgroup root: each attempt exists only where the suite itself can reach the place, or its
//! unconfined control could not escape.

use std::path::PathBuf;

use super::{shell, Attempt, Detect, Rule};
use crate::boundary::fixture::Fixture;

/// Reads of every secret the fixture could plant, and a write into another job's temp dir
/// (first, as the table has always listed it).
pub(super) fn planted_attempts(fixture: &Fixture) -> Vec<Attempt> {
    let s = &fixture.secrets;
    let mut list = Vec::new();
    let mut planted_reads = Vec::new();
    if let Some(p) = &fixture.root_secret {
        planted_reads.push(("read-root", "read /root", p.clone(), s.root.clone()));
    }
    if let Some(p) = &fixture.home_secret {
        planted_reads.push(("read-home", "read /home", p.clone(), s.home.clone()));
    }
    if let Some(p) = &fixture.run_user_secret {
        planted_reads.push((
            "read-run-user",
            "read /run/user",
            p.clone(),
            s.run_user.clone(),
        ));
    }
    if let Some(dir) = &fixture.other_job_dir {
        planted_reads.push((
            "read-other-job",
            "read another job's temp dir",
            dir.join("secret"),
            s.other_job.clone(),
        ));
        list.push(shell(
            "write-other-job",
            "write into another job's temp dir".into(),
            Rule::AllowWrite,
            format!("echo pwned > {}/pwned", dir.display()),
            Detect::HostPath(dir.join("pwned")),
        ));
    }
    for (id, path) in &fixture.system_secrets {
        let what = match *id {
            "read-var-lib" => "read /var/lib (services' data)",
            _ => "read /run/secrets (secrets for services)",
        };
        planted_reads.push((id, what, path.clone(), s.root.clone()));
    }
    // Only where the suite itself may read it, or its unconfined control could not escape.
    if std::fs::read("/etc/shadow").is_ok() {
        planted_reads.push((
            "read-shadow",
            "read /etc/shadow",
            PathBuf::from("/etc/shadow"),
            "root:".to_string(),
        ));
    }
    for (id, what, path, secret) in planted_reads {
        list.push(shell(
            id,
            what.into(),
            Rule::DenyRead,
            format!("cat {}", path.display()),
            Detect::OutputHas(secret),
        ));
    }
    list
}

/// Moving out of its cgroup, where this process may write the cgroup v2 root's `cgroup.procs`.
pub(super) fn cgroup_attempts() -> Vec<Attempt> {
    let Some(procs) = writable_cgroup_procs() else {
        return Vec::new();
    };
    // A job's limits and its kill are its cgroup (`serve`); a command that could write a
    // cgroup.procs file could move itself out of both. Only where the suite itself may
    // write it (root on a host with cgroup v2), or its unconfined control could not escape.
    vec![shell(
        "cgroup-escape",
        "move itself out of its cgroup (write the cgroup v2 root's cgroup.procs)".into(),
        Rule::AllowWrite,
        format!("echo $$ > {} && echo CGROUP-MOVED", procs.display()),
        Detect::OutputHas("CGROUP-MOVED".into()),
    )]
}

/// The `cgroup.procs` of the cgroup v2 hierarchy's root, when this process may write it.
fn writable_cgroup_procs() -> Option<PathBuf> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let located = quest_runner::serve::cgroup::locate(&cgroup, &mountinfo).ok()?;
    let procs = located.mount.join("cgroup.procs");
    rustix::fs::access(&procs, rustix::fs::Access::WRITE_OK)
        .is_ok()
        .then_some(procs)
}
