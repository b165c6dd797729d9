//! `quest-runner doctor`: every check a job would make of this host (both agents'), facts
//! about the host (user namespaces, Nix, limits, temp dirs), and this runner's own state
//! (disk, queue, state directory, private files, each account's files). Exit 2 when the
//! config or an account's file is bad, as `run` and `submit` exit on it; else 3 when a check
//! fails.

use super::{Context, Failure, Globals};
use crate::exit::Exit;
use crate::job::AgentKind;
use crate::preflight::{self, Check, Status};

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// The checks as one JSON document (`checks`: name, status ok|warn|fail, detail, fix),
    /// for monitoring; the exit code is the same.
    #[arg(long)]
    pub json: bool,
}

pub(super) fn doctor(globals: &Globals, args: &DoctorArgs) -> Result<(), Failure> {
    let mut checks = host_checks();
    // `doctor` reports the state directory's owner among its checks.
    match super::context(globals, false) {
        Ok(ctx) => {
            checks.push(disk_check(&ctx));
            checks.push(file_systems_check(&ctx));
            checks.push(checkouts_check(&ctx));
            checks.push(deps_check(&ctx));
            checks.push(isolation_check(&ctx));
            if let Some(queue) = &ctx.config.queue {
                checks.push(queue_check(queue));
            }
            if let Some(addr) = ctx.config.metrics.listen {
                checks.push(serve_check(addr));
            }
            checks.push(Check::new(
                "state directory",
                ctx.state.check_owner().is_ok(),
                match ctx.state.check_owner() {
                    Ok(()) => format!(
                        "{} (this user's, or made on first use)",
                        ctx.state.root().display()
                    ),
                    Err(e) => e.to_string(),
                },
                None,
            ));
            checks.push(private_files_check(&ctx));
            checks.extend(account_checks(&ctx));
        }
        Err(e) => checks.push(Check::fail(PRIVATE_FILES_CHECK, e.message, None)),
    }
    match args.json {
        true => print_json(&checks)?,
        false => print_text(&checks)?,
    }
    let failed = checks.iter().filter(|c| !c.passed()).count();
    let bad_input = checks.iter().any(|c| {
        !c.passed() && (c.name == PRIVATE_FILES_CHECK || c.name.starts_with(ACCOUNT_CHECK))
    });
    match (failed, bad_input) {
        (0, _) => Ok(()),
        (n, true) => Err(Failure::new(
            Exit::BadInput,
            format!("{n} check(s) failed; the config or an account's file is bad"),
        )),
        (n, false) => Err(Failure::new(
            Exit::HostNotReady,
            format!("{n} check(s) failed"),
        )),
    }
}

fn print_text(checks: &[Check]) -> Result<(), Failure> {
    for c in checks {
        let mark = match c.status {
            Status::Fail => "FAIL",
            Status::Warn => "warn",
            Status::Ok => "ok",
        };
        super::out(format_args!("{mark:<4} {:<40} {}", c.name, c.detail))?;
        match &c.fix {
            Some(fix) if c.status != Status::Ok => super::out(format_args!("     fix: {fix}"))?,
            _ => {}
        }
    }
    Ok(())
}

fn print_json(checks: &[Check]) -> Result<(), Failure> {
    let failed = checks.iter().filter(|c| !c.passed()).count();
    let doc = serde_json::json!({"checks": checks, "failed": failed});
    super::out(serde_json::to_string_pretty(&doc).unwrap_or_default())
}

const ACCOUNT_CHECK: &str = "account ";

/// Each account's files, read as a job's open reads them.
fn account_checks(ctx: &Context) -> Vec<Check> {
    ctx.config
        .accounts
        .iter()
        .map(|(name, account)| {
            let checked = crate::gateway::account_check::check(name, account);
            Check::new(
                format!("{ACCOUNT_CHECK}{name}"),
                checked.is_ok(),
                checked.unwrap_or_else(|e| e.to_string()),
                None,
            )
        })
        .collect()
}

/// The PostgreSQL queue: reachable with this config, its schema one this runner knows.
fn queue_check(queue: &crate::config::QueueConfig) -> Check {
    use crate::serve::pg;
    let status = pg::target::PgTarget::from_config(queue)
        .map_err(|e| format!("config queue: {e}"))
        .and_then(|target| {
            super::runtime::runtime(None)
                .map_err(|f| f.message)?
                .block_on(pg::admin::status(&target))
                .map_err(|e| e.to_string())
        });
    let name = "job queue (PostgreSQL)";
    match status {
        Ok(detail) => Check::ok(name, detail),
        Err(detail) => Check::fail(
            name,
            detail,
            Some(
                "check queue.postgres and password_file in the config, that the server runs and \
                 this host may connect (pg_hba.conf), and that this runner is not older than the \
                 schema"
                    .into(),
            ),
        ),
    }
}

/// The disk limits in force, and whether a job could start now (the reserve).
/// What the `serve` on the config's `metrics.listen` says at `/readyz`: the same checks it
/// takes jobs by (queue, disk reserve, devShell engine), as it sees them now.
fn serve_check(addr: std::net::SocketAddr) -> Check {
    let name = "serve";
    match crate::serve::health::ask_ready(addr) {
        Ok((200, _)) => Check::ok(name, format!("the serve on {addr} takes jobs (/readyz)")),
        Ok((status, body)) => Check::fail(
            name,
            format!("the serve on {addr} takes no jobs (/readyz {status}): {}", body.replace('\n', "; ")),
            Some("each line names the check that fails; its log says more (journalctl -u quest-runner)".into()),
        ),
        Err(e) => Check::warn(
            name,
            format!("no serve answers on {addr} (metrics.listen): {e}"),
            Some("start it (systemctl start quest-runner, or quest-runner serve)".into()),
        ),
    }
}

fn disk_check(ctx: &Context) -> Check {
    let runner = crate::run::Runner::new(ctx.state.clone(), ctx.config.clone());
    let room = runner.room_to_start();
    Check::new(
        "disk limits",
        room.is_ok(),
        match &room {
            Ok(()) => runner.disk().summary(),
            Err(why) => why.to_string(),
        },
        room.is_err().then(|| {
            "free space (or remove files, for inodes) on that file system, or lower \
                 limits.disk_reserve (limits.disk_reserve_files)"
                .into()
        }),
    )
}

/// The free bytes and inodes of the file systems jobs write: what a job filling one would
/// take, and what the reserve is kept of.
fn file_systems_check(ctx: &Context) -> Check {
    let temp = crate::workspace::temp_parent();
    Check::ok(
        "job file systems",
        crate::disk::rooms(&[
            ("state dir", ctx.state.root()),
            ("temp dirs", temp.path.as_path()),
        ]),
    )
}

/// How jobs get their checkout: layered on a revision's shared tree (ready in milliseconds at
/// any size), or written whole for each job, and why (`workspace::overlay`). Information, not
/// a warning: a full checkout is as safe, only slower on a large repository. A runner that is
/// not root layers them too where it may make a user namespace (`workspace::owned_mount`).
fn checkouts_check(ctx: &Context) -> Check {
    let trees = ctx
        .state
        .root()
        .join(crate::workspace::revision_tree::TREES_DIR);
    match crate::workspace::overlay::available(&trees) {
        Ok(()) => Check::ok(
            "job checkouts",
            format!(
                "an overlay per job on the revision's tree, written once in {}{}",
                trees.display(),
                match rustix::process::geteuid().is_root() {
                    true => "",
                    false => ", mounted in a user namespace of the job's own",
                }
            ),
        ),
        Err(why) => Check::ok(
            "job checkouts",
            format!("a full checkout per job, its start growing with the repository's size: {why}"),
        ),
    }
}

/// What the dependency cache holds against its bound: information, as the cache trims itself
/// after a job's fetch.
fn deps_check(ctx: &Context) -> Check {
    let bound = crate::disk::human(ctx.config.deps.cache_size);
    let held = match crate::deps::DepCache::existing(ctx.state.root()) {
        Some(cache) => {
            let s = cache.stats();
            format!(
                "{} artifacts, {} in {}",
                s.objects,
                crate::disk::human(s.bytes),
                cache.root().display()
            )
        }
        None => "empty (made by the first job with locks)".into(),
    };
    Check::ok(
        "dependency cache",
        format!(
            "{held}; at most {bound} (deps.cache_size), artifacts of at most {} \
             (deps.max_artifact)",
            crate::disk::human(ctx.config.deps.max_artifact)
        ),
    )
}

/// Where each trust level's commands run, and whether runsc runs here: a level set to
/// `gvisor` where it cannot refuses its jobs, which fails the check.
fn isolation_check(ctx: &Context) -> Check {
    let levels = ctx.config.isolation;
    let probe = super::runtime::runtime(None)
        .map_err(|f| f.message)
        .map(|rt| rt.block_on(crate::sandbox::gvisor::probe()));
    let gvisor = match &probe {
        Ok(p) => p.describe(),
        Err(e) => e.clone(),
    };
    let works = probe.as_ref().is_ok_and(|p| p.works());
    let detail = format!(
        "untrusted: {}, trusted: {}; gVisor: {gvisor}",
        levels.untrusted.name(),
        levels.trusted.name()
    );
    match (levels.uses_gvisor(), works) {
        (true, false) => Check::fail(
            "commands' kernel",
            format!("{detail}: the gvisor level's jobs are refused"),
            Some(
                "install runsc 0.0~20240729 or later (Debian: bookworm-backports or trixie), or \
                 set that level of isolation to \"namespace\""
                    .into(),
            ),
        ),
        _ => Check::ok("commands' kernel", detail),
    }
}

const PRIVATE_FILES_CHECK: &str = "config and secrets";

/// The config loads, and every secret it names (and the config file itself) can be hidden
/// from jobs' commands as a whole directory: what a job would refuse to start over.
fn private_files_check(ctx: &Context) -> Check {
    let name = PRIVATE_FILES_CHECK.to_string();
    match ctx.config.hide_private_files(Some(&ctx.config_path)) {
        Ok(hidden) => {
            let mut dirs: Vec<String> = hidden
                .iter()
                .flat_map(|h| h.dirs.iter().map(|d| d.dir.display().to_string()))
                .collect();
            dirs.sort();
            dirs.dedup();
            Check::ok(
                name,
                match hidden.len() {
                    0 => "no config file, no account".to_string(),
                    n => format!(
                        "{n} private file(s), hidden from jobs with their directories: {}",
                        dirs.join(", ")
                    ),
                },
            )
        }
        Err(e) => Check::fail(name, e.to_string(), None),
    }
}

/// Everything `doctor` reports: the checks of both agents plus facts about the host.
fn host_checks() -> Vec<Check> {
    let mut all = preflight::checks_for(AgentKind::Claude, true);
    for c in preflight::checks_for(AgentKind::Opencode, false) {
        if !all.iter().any(|a| a.name == c.name) {
            all.push(c);
        }
    }
    let restrict = preflight::read_sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
    all.push(Check::new(
        "apparmor_restrict_unprivileged_userns",
        restrict.as_deref() != Some("1")
            || all
                .iter()
                .any(|c| c.name == "user namespaces" && c.passed()),
        match restrict.as_deref() {
            None => "not present (no AppArmor userns restriction on this kernel)".into(),
            Some("1") => {
                "1: unprivileged user namespaces need an AppArmor profile for bwrap".into()
            }
            Some(v) => format!("{v}: not restricted"),
        },
        (restrict.as_deref() == Some("1"))
            .then(|| "install the profile printed by `quest-runner apparmor-profile`".into()),
    ));
    let max_userns = preflight::read_sysctl("/proc/sys/user/max_user_namespaces");
    let disabled = max_userns.as_deref() == Some("0");
    all.push(Check::new(
        "user.max_user_namespaces",
        !disabled,
        max_userns.unwrap_or_else(|| "unknown".into()),
        disabled.then(|| "sysctl user.max_user_namespaces=15000".into()),
    ));
    all.extend(crate::nix_setup::checks(&crate::nix_setup::Facts::gather()));
    all.push(crate::nix_setup::bash_static_check());
    let (cgroups, limits) = crate::serve::cgroup::host_support();
    // A limit the config sets and this host cannot enforce is not `ok`.
    let weak = !cgroups || limits.contains("not enforced");
    let fix = match cgroups {
        false => "optional: run serve under the systemd unit (Delegate=yes) for a delegated cgroup",
        true => "optional: enable the controllers named above in the delegated cgroup",
    };
    all.push(Check::new("per-job limits", true, limits, Some(fix.into())).warn_if(weak));
    let temp = crate::workspace::temp_parent();
    all.push(Check::new(
        "job temp dirs",
        true,
        match &temp.why_not_tmpdir {
            None => format!("in {}", temp.path.display()),
            Some(why) => format!("in {}: {why}", temp.path.display()),
        },
        temp.why_not_tmpdir.as_ref().map(|_| {
            format!(
                "optional: a TMPDIR of at most {} characters",
                crate::workspace::TMPDIR_MAX
            )
        }),
    ));
    let shared = std::path::Path::new(crate::sandbox::policy::SRT_SHARED_TMP);
    let exists = shared.exists();
    all.push(Check::new(
        crate::sandbox::policy::SRT_SHARED_TMP,
        !exists,
        if exists {
            "exists: srt shows it to every sandbox it makes outside a job's namespace \
             (read-only under the runner's policy; a job's namespace hides it), so anything in \
             it is readable by such a job"
                .into()
        } else {
            "absent (srt would show it to every sandbox)".into()
        },
        exists.then(|| format!("remove {}", crate::sandbox::policy::SRT_SHARED_TMP)),
    ));
    all
}
