use super::*;
use crate::run::AgentEnclosure;
use std::path::Path;
use std::time::Instant;

const SELF_SYSTEMD: &str = "0::/system.slice/quest-runner.service\n";
const MOUNTINFO_V2: &str = "\
22 1 0:21 / /sys rw,nosuid - sysfs sysfs rw
30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";
/// This CI host: v1 controllers, cgroup2 at /sys/fs/cgroup/unified with only hugetlb.
const SELF_HYBRID: &str = "\
12:memory:/
11:pids:/
1:name=systemd:/
0::/
";
const MOUNTINFO_HYBRID: &str = "\
25 22 0:23 / /sys/fs/cgroup ro,nosuid,nodev,noexec - tmpfs tmpfs ro,mode=755
26 25 0:24 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate
27 25 0:25 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,memory
";

fn all_limits() -> Limits {
    Limits {
        memory: Some(1 << 30),
        pids: Some(256),
        cpus_milli: Some(1500),
        ..Limits::default()
    }
}

fn delegated(controllers: &str) -> OwnState {
    OwnState {
        controllers: controllers.split_whitespace().map(String::from).collect(),
        subtree_control: Vec::new(),
        writable: true,
    }
}

#[test]
fn locate_finds_the_own_group_under_the_cgroup2_mount() {
    let loc = locate(SELF_SYSTEMD, MOUNTINFO_V2).unwrap();
    assert_eq!(
        loc.own,
        Path::new("/sys/fs/cgroup/system.slice/quest-runner.service")
    );
    assert!(!loc.is_root);
    let loc = locate(SELF_HYBRID, MOUNTINFO_HYBRID).unwrap();
    assert_eq!(loc.own, Path::new("/sys/fs/cgroup/unified"));
    assert!(loc.is_root);
    // A container's bind of its own subtree: mount root /a, group /a/b.
    let bind = "40 1 0:30 /a /mnt/cg\\040x rw - cgroup2 cgroup2 rw\n";
    let loc = locate("0::/a/b\n", bind).unwrap();
    assert_eq!(loc.own, Path::new("/mnt/cg x/b"));
    assert!(locate("0::/elsewhere\n", bind).is_err());
    assert!(locate("12:memory:/\n", MOUNTINFO_V2)
        .unwrap_err()
        .contains("no 0:: line"));
    assert!(
        locate(SELF_SYSTEMD, "22 1 0:21 / /sys rw - sysfs sysfs rw\n")
            .unwrap_err()
            .contains("no cgroup v2")
    );
}

#[test]
fn a_delegated_group_gets_every_limit_in_the_jobs_groups() {
    let loc = locate(SELF_SYSTEMD, MOUNTINFO_V2).unwrap();
    let state = delegated("cpuset cpu io memory pids");
    let plan = plan(Ok(&loc), Some(&state), &all_limits(), "quest-runner.k");
    let c = plan.cgroup.as_ref().unwrap();
    let own = Path::new("/sys/fs/cgroup/system.slice/quest-runner.service");
    assert_eq!(c.base, own.join("quest-runner.k"));
    // Controllers in its own group: the runner has to leave it first.
    assert_eq!(c.runner_leaf.as_deref(), Some(own.join("runner").as_path()));
    assert_eq!(
        c.enable,
        [Controller::Memory, Controller::Pids, Controller::Cpu]
    );
    assert!(c.missing.is_empty());
    assert_eq!(
        c.job_files,
        [
            ("memory.max", "1073741824".to_string()),
            ("memory.swap.max", "0".to_string()),
            ("memory.oom.group", "1".to_string()),
            ("pids.max", "256".to_string()),
            ("cpu.max", "150000 100000".to_string()),
        ]
    );
    assert_eq!(plan.rlimits, Limits::default(), "no rlimit fallback needed");
    assert_eq!(plan.why, None);
    let summary = plan.summary();
    assert!(summary.starts_with("cgroup v2: each job in its own group under /sys/fs/cgroup/system.slice/quest-runner.service/quest-runner.k"), "{summary}");
    assert!(
        summary.contains("controllers memory, pids, cpu"),
        "{summary}"
    );
    assert!(summary.contains("pids: pids.max=256"), "{summary}");
    assert_eq!(
        plan.in_force().unwrap(),
        "cpu.max=150000 100000, memory.max=1073741824, pids.max=256"
    );
}

/// memory.oom.group goes with the memory controller: written in each job's group exactly
/// when memory.max is, never where the controller is not enabled for the jobs (the file
/// would not exist).
#[test]
fn memory_oom_group_is_set_wherever_the_memory_controller_is_enabled() {
    let loc = locate(SELF_SYSTEMD, MOUNTINFO_V2).unwrap();
    let files = |controllers: &str, limits: &Limits| {
        plan(Ok(&loc), Some(&delegated(controllers)), limits, "b")
            .cgroup
            .unwrap()
            .job_files
    };
    let memory_only = Limits {
        memory: Some(128 << 20),
        ..Limits::default()
    };
    let with_memory = files("memory", &memory_only);
    assert_eq!(
        with_memory,
        [
            ("memory.max", "134217728".to_string()),
            ("memory.swap.max", "0".to_string()),
            ("memory.oom.group", "1".to_string()),
        ]
    );
    // No memory limit: the controller is not enabled for the jobs.
    let pids_only = Limits {
        pids: Some(40),
        ..Limits::default()
    };
    let without = files("memory pids", &pids_only);
    assert_eq!(without, [("pids.max", "40".to_string())]);
    // A memory limit the host cannot enforce: no memory files at all.
    let undelegated = files("pids", &all_limits());
    assert!(
        undelegated.iter().all(|(f, _)| !f.starts_with("memory.")),
        "{undelegated:?}"
    );
    // Written in order, after memory.max; skipped, like memory.swap.max, by a kernel
    // without it.
    assert!(OPTIONAL_FILES.contains(&"memory.oom.group"));
}

/// What a job's group counted, from its files; a group OOM kill says the whole job went.
#[test]
fn a_report_reads_the_groups_counters() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("memory.events"),
        "low 0\nhigh 0\nmax 12\noom 1\noom_kill 3\noom_group_kill 1\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("pids.events"), "max 2\n").unwrap();
    std::fs::write(
        dir.path().join("cpu.stat"),
        "usage_usec 10\nnr_throttled 4\nthrottled_usec 9000\n",
    )
    .unwrap();
    let report = Report::read(dir.path());
    assert_eq!(
        report,
        Report {
            oom_kills: 3,
            oom_group_kills: 1,
            pids_refused: 2,
            cpu_throttled: 4,
            cpu_throttled_usec: 9000,
        }
    );
    let loc = locate(SELF_SYSTEMD, MOUNTINFO_V2).unwrap();
    let c = plan(
        Ok(&loc),
        Some(&delegated("memory pids")),
        &all_limits(),
        "b",
    )
    .cgroup
    .unwrap();
    let (name, why) = report.fired(&c).unwrap();
    assert_eq!(name, "memory");
    assert!(
        why.contains("killed the whole job, 3 process(es), as memory.oom.group asks"),
        "{why}"
    );
    assert_eq!(Report::read(&dir.path().join("gone")), Report::default());
}

#[test]
fn the_hybrid_host_places_jobs_but_falls_back_to_rlimits_for_limits() {
    let loc = locate(SELF_HYBRID, MOUNTINFO_HYBRID).unwrap();
    let state = delegated("hugetlb");
    let plan = plan(Ok(&loc), Some(&state), &all_limits(), "quest-runner.k");
    let c = plan.cgroup.as_ref().unwrap();
    assert_eq!(c.base, Path::new("/sys/fs/cgroup/unified/quest-runner.k"));
    assert_eq!(
        c.runner_leaf, None,
        "nothing to enable: the runner stays put"
    );
    assert!(c.enable.is_empty());
    assert_eq!(
        c.missing,
        [Controller::Memory, Controller::Pids, Controller::Cpu]
    );
    assert!(c.job_files.is_empty());
    assert!(plan.why.as_deref().unwrap().contains("hybrid host"));
    // pids falls back to RLIMIT_NPROC; memory and cpu have no honest rlimit.
    assert_eq!(plan.rlimits.nproc, Some(256));
    let hows: Vec<(&str, &How)> = plan.applied.iter().map(|a| (a.limit, &a.how)).collect();
    assert!(matches!(hows[0], ("memory", How::Not { .. })));
    assert!(matches!(
        hows[1],
        (
            "pids",
            How::Rlimit {
                name: "RLIMIT_NPROC",
                ..
            }
        )
    ));
    assert!(matches!(hows[2], ("cpus", How::Not { .. })));
    assert_eq!(plan.in_force().unwrap(), "RLIMIT_NPROC=256");
}

#[test]
fn the_root_group_with_controllers_enables_them_without_moving_the_runner() {
    let loc = locate("0::/\n", MOUNTINFO_V2).unwrap();
    let plan = plan(
        Ok(&loc),
        Some(&delegated("memory pids")),
        &all_limits(),
        "b",
    );
    let c = plan.cgroup.unwrap();
    assert_eq!(c.runner_leaf, None);
    assert_eq!(c.enable, [Controller::Memory, Controller::Pids]);
    assert_eq!(c.missing, [Controller::Cpu]);
    assert!(plan.why.unwrap().contains("not delegated"));
}

#[test]
fn an_undelegated_or_missing_group_means_rlimits_only_with_the_reason() {
    let loc = locate(SELF_SYSTEMD, MOUNTINFO_V2).unwrap();
    let mut state = delegated("memory pids cpu");
    state.writable = false;
    let limits = Limits {
        nproc: Some(100),
        cpu_seconds: Some(60),
        ..all_limits()
    };
    let p = plan(Ok(&loc), Some(&state), &limits, "b");
    assert!(p.cgroup.is_none());
    assert!(p.why.as_deref().unwrap().contains("not writable"));
    assert!(p.summary().starts_with("rlimits only"), "{}", p.summary());
    // Asked for by name: its own value wins over the pids fallback.
    assert_eq!(p.rlimits.nproc, Some(100));
    assert_eq!(p.rlimits.cpu_seconds, Some(60));
    assert_eq!(p.in_force().unwrap(), "RLIMIT_CPU=60s, RLIMIT_NPROC=100");

    let p = plan(
        Err("no cgroup v2 hierarchy is mounted"),
        None,
        &Limits::default(),
        "b",
    );
    assert!(p.cgroup.is_none());
    assert_eq!(p.in_force(), None);
    assert!(
        p.summary().contains("no cgroup v2 hierarchy"),
        "{}",
        p.summary()
    );
}

#[test]
fn the_base_name_is_stable_and_differs_by_state_dir() {
    let a = base_name(Path::new("/var/lib/quest-runner"));
    assert_eq!(a, base_name(Path::new("/var/lib/quest-runner")));
    assert_ne!(a, base_name(Path::new("/tmp/other")));
    assert!(a.starts_with("quest-runner.") && a.len() == "quest-runner.".len() + 16);
}

#[test]
fn a_report_names_the_limit_that_fired() {
    let loc = locate(SELF_SYSTEMD, MOUNTINFO_V2).unwrap();
    let plan = plan(
        Ok(&loc),
        Some(&delegated("memory pids cpu")),
        &all_limits(),
        "b",
    );
    let c = plan.cgroup.unwrap();
    assert_eq!(Report::default().fired(&c), None);
    let oom = Report {
        oom_kills: 1,
        pids_refused: 3,
        ..Report::default()
    };
    let (name, why) = oom.fired(&c).unwrap();
    assert_eq!(name, "memory");
    assert!(why.contains("memory.max=1073741824"), "{why}");
    assert!(why.contains("killed 1 process(es) of the job"), "{why}");
    let (name, why) = Report {
        pids_refused: 3,
        ..Report::default()
    }
    .fired(&c)
    .unwrap();
    assert_eq!(name, "pids");
    assert!(why.contains("pids.max=256 refused 3 fork(s)"), "{why}");
    let throttled = Report {
        cpu_throttled: 4,
        cpu_throttled_usec: 12_000,
        ..Report::default()
    };
    assert_eq!(throttled.fired(&c), None, "throttling is not a kill");
    assert!(throttled.throttled().unwrap().contains("never kills"));
}

// ---- On the real kernel -------------------------------------------------------------

/// The plan of this host for a fresh state dir, or `None` (printed why) where this process
/// cannot make groups: then the real-kernel tests have nothing to test.
fn real_plan(state: &Path) -> Option<CgroupPlan> {
    let plan = probe(&Limits::default(), state);
    if plan.cgroup.is_none() {
        eprintln!(
            "SKIPPED (real-kernel part): no writable cgroup v2 group here: {}",
            plan.summary()
        );
    }
    plan.cgroup
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

fn with_token(token: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| cmdline(*p).contains(token) && *p != std::process::id())
        .collect()
}

fn group_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("0::").map(str::to_string))
        .unwrap_or_default()
}

fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Through serve's own enclosure: an agent-like tree that detaches every way it can
/// (setsid, a double fork, a cleared environment) stays in the job's group, and finishing
/// the enclosure kills all of it, removes the group and reports what it counted.
#[test]
fn a_job_group_holds_a_detaching_tree_and_its_end_kills_all_of_it() {
    let state = tempfile::tempdir().unwrap();
    let Some(group) = real_plan(state.path()) else {
        return;
    };
    setup(&group).unwrap();
    let limits = crate::serve::enforce::Enforcement {
        plan: Plan {
            cgroup: Some(group.clone()),
            why: None,
            rlimits: Limits::default(),
            applied: Vec::new(),
        },
    };
    let token = format!(
        "qrcg{}x{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
    );
    // The tokens are put together by the shell, so the agent's own command line holds
    // none of the detached ones' names.
    let script = format!(
        "T={token}\n\
         setsid sh -c \"sleep 300; : ${{T}}-setsid\" &\n\
         ( sh -c \"sleep 300; : ${{T}}-double\" & )\n\
         env -i /bin/sh -c \"sleep 300; : ${{T}}-noenv\" &\n\
         sleep 300\n"
    );
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.args(["-c", &script]);
    let (guard, place) = limits.enter("t1").unwrap();
    place.expect("a hook that places the job's commands")(&mut cmd);
    let job_dir = group.base.join("job-t1");
    assert!(job_dir.is_dir());
    let mut agent = cmd.spawn().unwrap();
    let agent_pid = agent.id();
    let kinds = ["-setsid", "-double", "-noenv"];
    wait_until("the tree to start", || {
        kinds
            .iter()
            .all(|k| with_token(&format!("{token}{k}")).len() == 1)
    });
    let expected = format!(
        "/{}",
        job_dir.strip_prefix(locate_self().mount).unwrap().display()
    );
    let detached: Vec<u32> = kinds
        .iter()
        .map(|k| with_token(&format!("{token}{k}"))[0])
        .collect();
    for pid in detached.iter().chain([&agent_pid]) {
        assert_eq!(group_of(*pid), expected, "{} is outside", cmdline(*pid));
    }
    // The setsid one leaves the agent's session (found by its command line, it may not have
    // called setsid() yet); the double-forked one lost its parent.
    let sid = |pid: u32| unsafe { libc::getsid(pid as i32) };
    wait_until("the setsid one to leave the agent's session", || {
        sid(detached[0]) != sid(agent_pid)
    });
    // Every member, the sleeps included: 4 shells, 4 sleeps (which may still be starting).
    wait_until("4 shells and 4 sleeps in the group", || {
        members(&job_dir).len() >= 8
    });
    let members = members(&job_dir);
    for pid in &members {
        assert_eq!(group_of(*pid), expected);
    }

    // The agent dies; what it detached lives on, in the group.
    agent.kill().unwrap();
    agent.wait().unwrap();
    assert_eq!(
        with_token(&token).len(),
        3,
        "the detached ones outlive the agent"
    );
    let report = limits.finish(guard).unwrap().unwrap();
    wait_until("the tree to be gone", || with_token(&token).is_empty());
    assert!(!job_dir.exists(), "the job's group is removed");
    assert_eq!(report, Report::default(), "no limit fired");
    let _ = std::fs::remove_dir(&group.base);
}

/// A group left with processes (a dead runner's) is killed and removed by name, and a
/// new group of the same job replaces it.
#[test]
fn a_leftover_group_is_killed_and_replaced() {
    let state = tempfile::tempdir().unwrap();
    let Some(group) = real_plan(state.path()) else {
        return;
    };
    setup(&group).unwrap();
    let token = format!("qrleft{}", std::process::id());
    let old = JobCgroup::create(&group, "t2").unwrap();
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.args([
        "-c",
        &format!("setsid sh -c 'sleep 300; : {token}' & exec sleep 300"),
    ]);
    old.place(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    wait_until("the leftover", || with_token(&token).len() == 1);
    assert_eq!(
        job_groups(&group.base),
        [("t2".to_string(), old.dir.clone())]
    );
    let fresh = JobCgroup::create(&group, "t2").unwrap();
    assert!(
        with_token(&token).is_empty(),
        "the old group's processes are killed"
    );
    child.wait().unwrap();
    assert!(fresh.members().is_empty());
    assert_eq!(fresh.finish().unwrap(), Report::default());
    assert!(job_groups(&group.base).is_empty());
    let _ = std::fs::remove_dir(&group.base);
}

fn locate_self() -> Located {
    locate(
        &std::fs::read_to_string("/proc/self/cgroup").unwrap(),
        &std::fs::read_to_string("/proc/self/mountinfo").unwrap(),
    )
    .unwrap()
}

/// Only empty `quest-runner.<key>` directories besides the kept one go; one with a job's
/// group inside is in use (a plain directory says ENOTEMPTY where cgroupfs says EBUSY).
#[test]
fn only_empty_state_dir_groups_are_swept() {
    let own = tempfile::tempdir().unwrap();
    let name = |p: &str| base_name(Path::new(p));
    let empty = own.path().join(name("/a"));
    let busy = own.path().join(name("/b"));
    let keep = own.path().join(name("/c"));
    let others = [
        own.path().join("quest-runner.other"),
        own.path().join(format!("{}0", name("/d"))),
        own.path().join("runner"),
    ];
    for dir in [&empty, &busy, &keep].into_iter().chain(&others) {
        std::fs::create_dir(dir).unwrap();
    }
    std::fs::create_dir(busy.join("job-x")).unwrap();
    std::fs::write(own.path().join(name("/e")), "").unwrap();

    let swept = remove_empty_bases(own.path(), &keep);
    assert_eq!(swept.removed, std::slice::from_ref(&empty));
    assert_eq!(swept.in_use, std::slice::from_ref(&busy));
    assert!(swept.failed.is_empty(), "{:?}", swept.failed);
    assert!(!empty.exists());
    for dir in [&busy, &keep].into_iter().chain(&others) {
        assert!(dir.is_dir(), "{} was removed", dir.display());
    }
    assert!(own.path().join(name("/e")).is_file());

    let gone = remove_empty_bases(&own.path().join("missing"), &keep);
    assert!(gone.removed.is_empty());
    assert!(
        gone.failed[0].to_string().contains("listing"),
        "{:?}",
        gone.failed
    );
}

/// Kills and removes the groups it holds when dropped, so a failing test leaves none.
struct Removed(Vec<PathBuf>);

impl Drop for Removed {
    fn drop(&mut self) {
        for dir in &self.0 {
            let _ = kill_and_remove(dir);
        }
    }
}

/// On the kernel: an empty state-dir group beside this one is removed, one with a process
/// or a job's group is in use (EBUSY) and kept, and a runner whose own group was swept
/// while idle makes it again for its next job.
#[test]
fn the_sweep_of_empty_state_dir_groups_spares_live_ones_and_runners_recover() {
    let state = tempfile::tempdir().unwrap();
    let Some(group) = real_plan(state.path()) else {
        return;
    };
    let sibling = |what: &str| group.own.join(base_name(&state.path().join(what)));
    let (empty, with_process, with_job) = (sibling("e"), sibling("p"), sibling("j"));
    let _cleanup = Removed(vec![
        empty.clone(),
        with_process.clone(),
        with_job.clone(),
        group.base.clone(),
    ]);
    for dir in [&empty, &with_process, &with_job] {
        std::fs::create_dir(dir).unwrap();
    }
    std::fs::create_dir(with_job.join("job-x")).unwrap();
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.args(["-c", "exec sleep 300"]);
    JobCgroup::at(with_process.clone()).unwrap().place(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    wait_until("the member", || members(&with_process).len() == 1);

    setup(&group).unwrap();
    let swept = remove_empty_bases(&group.own, &group.base);
    assert!(swept.removed.contains(&empty), "{swept:?}");
    assert!(swept.in_use.contains(&with_process), "{swept:?}");
    assert!(swept.in_use.contains(&with_job), "{swept:?}");
    assert!(swept.failed.is_empty(), "{swept:?}");
    assert!(group.base.is_dir(), "the kept group stays");
    assert!(with_process.is_dir() && with_job.join("job-x").is_dir());
    assert!(
        kill_and_remove(&with_process).unwrap(),
        "it had its process"
    );
    child.wait().unwrap();

    // Swept while idle (by another state dir's runner): the next job makes it again.
    std::fs::remove_dir(&group.base).unwrap();
    let job = JobCgroup::create(&group, "t3").unwrap();
    assert!(job.dir.is_dir());
    assert_eq!(job.finish().unwrap(), Report::default());
}

/// Values the kernel would refuse for every job are planned as ones it takes: a quota
/// under its 1 ms minimum gets a longer period, a pids.max over its maximum is no limit.
#[test]
fn limits_the_kernel_would_refuse_are_planned_as_ones_it_takes() {
    assert_eq!(cpu_max(1500), "150000 100000");
    assert_eq!(cpu_max(10), "1000 100000");
    assert_eq!(cpu_max(9), "9000 1000000");
    assert_eq!(cpu_max(1), "1000 1000000");
    assert_eq!(cpu_max(0), "1000 1000000");
    assert_eq!(cpu_max(4_096_000), "409600000 100000");
    assert_eq!(pids_max(40), "40");
    assert_eq!(pids_max(PIDS_MAX), "4194304");
    assert_eq!(pids_max(PIDS_MAX + 1), "max");
    assert_eq!(pids_max(u64::MAX), "max");
}

/// A job id that is not one is refused before anything is made.
#[test]
fn a_bad_job_id_makes_no_group() {
    let base = tempfile::tempdir().unwrap();
    let plan = CgroupPlan {
        own: base.path().to_path_buf(),
        base: base.path().join("b"),
        runner_leaf: None,
        enable: Vec::new(),
        missing: Vec::new(),
        job_files: Vec::new(),
    };
    for id in ["", "../x", "a/b", ".hidden", "x\0y", &"x".repeat(65)] {
        let err = JobCgroup::create(&plan, id).unwrap_err();
        assert!(matches!(err, CgroupError::BadId(..)), "{id:?}: {err}");
        assert!(err.to_string().contains("not a job id"), "{err}");
    }
    assert_eq!(std::fs::read_dir(base.path()).unwrap().count(), 0);
}

/// Only groups named `job-<job id>` are jobs'; every other group under the state dir's is
/// a stray for the sweep.
#[test]
fn job_groups_and_strays_are_told_apart() {
    use std::os::unix::ffi::OsStrExt;
    let base = tempfile::tempdir().unwrap();
    let b = base.path();
    for name in ["job-a1", "job-.x", "job-", "foo", "runner"] {
        std::fs::create_dir(b.join(name)).unwrap();
    }
    let odd = b.join(std::ffi::OsStr::from_bytes(b"job-\xff"));
    std::fs::create_dir(&odd).unwrap();
    std::fs::write(b.join("job-file"), "").unwrap();
    assert_eq!(job_groups(b), [("a1".to_string(), b.join("job-a1"))]);
    let mut strays = vec![
        b.join("job-.x"),
        b.join("job-"),
        b.join("foo"),
        b.join("runner"),
        odd,
    ];
    strays.sort();
    assert_eq!(stray_groups(b), strays);
    assert!(job_groups(&b.join("missing")).is_empty());
}

/// On the kernel: a job's group whose limits cannot be written is removed again and the
/// error names the file and the value (not EACCES for a file the group lacks: no
/// `O_CREAT`); an optional file the kernel lacks is skipped; a state dir's group whose
/// controllers cannot be enabled is not left behind.
#[test]
fn a_group_whose_limits_fail_is_not_left_and_the_error_says_why() {
    let state = tempfile::tempdir().unwrap();
    let Some(mut group) = real_plan(state.path()) else {
        return;
    };
    let _cleanup = Removed(vec![group.base.clone()]);
    setup(&group).unwrap();
    let job_dir = group.base.join("job-t4");
    let absent = "cgroup.no-such-file";
    let present = ["cgroup.max.depth", "cgroup.max.descendants"];
    for (file, value, says) in [
        (absent, "1", "No such file"),
        (present[0], "not-a-number", "Invalid argument"),
    ] {
        group.job_files = vec![(present[1], "10".into()), (file, value.into())];
        let err = JobCgroup::create(&group, "t4").unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(&format!(
                "writing {value:?} to {}",
                job_dir.join(file).display()
            )) && text.contains(says),
            "{text}"
        );
        assert!(!job_dir.exists(), "{file}: the half-made group is left");
    }
    // Optional files the group does not have are skipped (where the memory controller is
    // not enabled for it, as on this CI host, there is no memory.oom.group; elsewhere the
    // value is simply written).
    group.job_files = vec![("memory.oom.group", "1".into()), (present[1], "10".into())];
    let made = JobCgroup::create(&group, "t4").unwrap();
    assert_eq!(
        std::fs::read_to_string(job_dir.join(present[1]))
            .unwrap()
            .trim(),
        "10"
    );
    made.finish().unwrap();

    // A controller that cannot be enabled: the state dir's group made for it goes again.
    let available = std::fs::read_to_string(group.own.join("cgroup.controllers")).unwrap();
    if let Some(c) = [Controller::Memory, Controller::Pids, Controller::Cpu]
        .into_iter()
        .find(|c| !available.split_whitespace().any(|a| a == c.name()))
    {
        std::fs::remove_dir(&group.base).unwrap();
        group.enable = vec![c];
        let err = ensure_base(&group).unwrap_err();
        assert!(err.to_string().contains("cgroup.subtree_control"), "{err}");
        assert!(
            !group.base.exists(),
            "a group without its controllers is left"
        );
    }
}
