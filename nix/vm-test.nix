# A NixOS machine with services.quest-runner.enable = true: the service starts, `doctor`
# passes, and a job runs through the service's own settings — the boundary suite's Claude Code
# job against the built-in scripted model (`quest-runner selftest --agent claude`), as the
# service's user, under the service's hardening, with AppArmor restricting unprivileged user
# namespaces so bwrap works only through the module's profile. The suite's world (its runner
# state, config and account key) lives inside the service's state directory, so its
# read-runner-state and read-account attempts test exactly what a job must not read there.
{ pkgs, self }:
pkgs.testers.runNixOSTest {
  name = "quest-runner";

  nodes.machine =
    {
      config,
      lib,
      pkgs,
      ...
    }:
    let
      service = config.systemd.services.quest-runner;
      stateDir = config.services.quest-runner.stateDir;
      # A oneshot unit with everything the service has (user, hardening, PATH, environment),
      # running another subcommand.
      asTheService = name: args: extra: {
        inherit (service) path;
        # PATH comes from `path` above; defining it twice would conflict.
        environment = removeAttrs service.environment [ "PATH" ] // extra;
        serviceConfig = removeAttrs service.serviceConfig [ "ExecReload" ] // {
          Type = "oneshot";
          ExecStart = "${lib.getExe config.services.quest-runner.package} ${args}";
          Restart = "no";
          TimeoutStartSec = "30min";
          # Its own: systemd removes a runtime directory when the unit stops, and this one
          # stops while the service runs.
          RuntimeDirectory = "quest-runner-${name}";
        };
      };
    in
    {
      imports = [ self.nixosModules.default ];

      virtualisation = {
        memorySize = 4096;
        cores = 2;
        diskSize = 4096;
      };

      # No binary cache in the sandbox of a test. Nothing else: the selftest's devShells build
      # in Nix's sandbox as NixOS configures it, with the package's static bash.
      nix.settings.substituters = lib.mkForce [ ];

      security.apparmor.enable = true;
      # What Ubuntu 24.04 sets: without a profile allowing `userns`, no unprivileged user
      # namespace. (The kernel has it since 6.7; the test checks it took.)
      boot.kernel.sysctl."kernel.apparmor_restrict_unprivileged_userns" = 1;

      services.quest-runner = {
        enable = true;
        apparmor.enable = true;
        concurrency = 1;
        settings.nix.options.substituters = "";
      };

      systemd.services.quest-runner-doctor = asTheService "doctor" "doctor" { };
      systemd.services.quest-runner-selftest = asTheService "selftest" "selftest --agent claude" {
        TMPDIR = "${stateDir}/selftest";
      };
      systemd.tmpfiles.rules = [
        "d ${stateDir}/selftest 0700 quest-runner quest-runner -"
        "d ${stateDir}/limits 0700 quest-runner quest-runner -"
      ];

      # Per-job cgroup limits, enforced: a second runner as the service (Delegate=yes, on a
      # pure cgroup v2 host), on a state dir of its own, whose "agent" is a stand-in that
      # does what the job's prompt says: grow without bound (tail of /dev/zero never meets
      # a newline) or fork until refused. It is started exactly like Claude Code, so it runs
      # in the job's group with the job's limits. dash, not bash: bash retries a refused
      # fork for seconds.
      systemd.services.quest-runner-limits =
        let
          agent = pkgs.writeScript "limits-agent" ''
            #!${pkgs.dash}/bin/dash
            prompt=$(${pkgs.coreutils}/bin/cat)
            case "$prompt" in
              *grow-memory*) exec ${pkgs.coreutils}/bin/tail /dev/zero ;;
              *fork-bomb*)
                i=0
                while [ $i -lt 500 ]; do ${pkgs.coreutils}/bin/sleep 60 & i=$((i+1)); done
                wait ;;
            esac
          '';
          base =
            asTheService "limits"
              "--state-dir ${stateDir}/limits serve --poll 200ms --limit-memory 128M --limit-pids 40 --limit-cpus 0.5"
              { QUEST_RUNNER_CLAUDE = "${agent}"; };
        in
        base
        // {
          serviceConfig = base.serviceConfig // {
            Type = "notify";
          };
        };
      environment.systemPackages = [ pkgs.git ];
    };

  testScript =
    { nodes, ... }:
    ''
      machine.wait_for_unit("multi-user.target")

      with subtest("AppArmor restricts user namespaces; the package's bwrap gets them through its profile"):
          machine.succeed("test \"$(cat /proc/sys/kernel/apparmor_restrict_unprivileged_userns)\" = 1")
          machine.succeed("grep -q '^quest_runner_bwrap ' /sys/kernel/security/apparmor/profiles")
          bwrap = "${nodes.machine.services.quest-runner.package.passthru.bwrap}"
          sandbox = f"runuser -u quest-runner -- {bwrap} --unshare-user --unshare-pid --unshare-net --ro-bind / / --dev /dev --proc /proc --"
          nested = f"{sandbox} {bwrap} --unshare-user --unshare-pid --unshare-net --ro-bind / / --dev /dev --proc /proc --"
          label = machine.succeed(f"{sandbox} cat /proc/self/attr/apparmor/current")
          assert "quest_runner_bwrap_agent" in label, f"the job's namespace runs as {label}"
          # The job's namespace may not make a user namespace itself, but its bwrap may make
          # the commands' sandbox; what that runs may not make one either.
          machine.fail(f"{sandbox} unshare --user true")
          label = machine.succeed(f"{nested} cat /proc/self/attr/apparmor/current")
          assert "quest_runner_bwrap_sandbox" in label, f"the commands' sandbox runs as {label}"
          machine.fail(f"{nested} unshare --user true")

      with subtest("the service runs serve with its hardening"):
          machine.wait_for_unit("quest-runner.service")
          show = machine.succeed("systemctl show quest-runner.service -p User -p ProtectSystem -p PrivateTmp -p NoNewPrivileges -p KillMode -p Delegate")
          for expected in ["User=quest-runner", "ProtectSystem=strict", "PrivateTmp=yes", "NoNewPrivileges=yes", "KillMode=mixed", "Delegate=yes"]:
              assert expected in show, f"{expected} not in {show}"

      with subtest("doctor passes as the service"):
          machine.succeed("systemctl start quest-runner-doctor.service")
          print(machine.succeed("journalctl -u quest-runner-doctor.service -o cat"))

      with subtest("a Claude Code job through the service's settings: every attempt refused"):
          status, _ = machine.execute("systemctl start quest-runner-selftest.service", timeout=1800)
          out = machine.succeed("journalctl -u quest-runner-selftest.service -o cat")
          print(out)
          assert status == 0, "selftest failed"
          assert "ESCAPED" not in out, "an attempt escaped the sandbox"
          assert "control FAILED" not in out, "a control failed"
          for attempt in ["read-runner-state", "read-account-abs", "write-runner-state"]:
              assert any(line.startswith("refused") and attempt in line for line in out.splitlines()), f"{attempt} not refused"
          assert "selftest: the boundary holds" in out
          # Nothing a job wrote reached the service's state directory.
          machine.succeed("test -z \"$(find /var/lib/quest-runner -name 'pwned-*')\"")

      with subtest("per-job cgroups: memory.max OOM and pids.max are enforced and named in the result"):
          import json
          qr = "runuser -u quest-runner -- ${nodes.machine.services.quest-runner.package}/bin/quest-runner --state-dir /var/lib/quest-runner/limits"
          limits_dir = "/var/lib/quest-runner/limits"
          config = {"accounts": {"work": {"agent": "claude", "api_key_file": f"{limits_dir}/key"}}}
          machine.succeed(f"echo sk-test > {limits_dir}/key")
          machine.succeed(f"echo '{json.dumps(config)}' > {limits_dir}/config.json")
          machine.succeed(f"chown quest-runner: {limits_dir}/key {limits_dir}/config.json")
          machine.succeed(
              f"runuser -u quest-runner -- git init -q -b main {limits_dir}/repo && "
              f"runuser -u quest-runner -- git -C {limits_dir}/repo -c user.name=t -c user.email=t@t commit -q --allow-empty -m x"
          )
          rev = machine.succeed("runuser -u quest-runner -- git -C /var/lib/quest-runner/limits/repo rev-parse HEAD").strip()
          machine.succeed("systemctl start quest-runner-limits.service")
          doctor = machine.succeed("journalctl -u quest-runner-limits.service -o cat")
          print(doctor)
          assert "controllers memory, pids, cpu" in doctor, "the runner's plan has no cgroup limits"
          for job_id, prompt in [("oom", "grow-memory"), ("bomb", "fork-bomb")]:
              job = {"id": job_id, "repo": "/var/lib/quest-runner/limits/repo", "rev": rev, "ref": "main",
                     "trust": "trusted", "agent": "claude", "account": "work", "prompt": prompt, "timeout": "3m"}
              machine.succeed(f"echo '{json.dumps(job)}' | {qr} submit -")
              machine.wait_until_succeeds(f"{qr} show {job_id} | grep -Eq '\"state\": \"(done|failed)\"'", timeout=240)
              shown = json.loads(machine.succeed(f"{qr} show {job_id}"))
              print(json.dumps(shown["result"], indent=2))
              result = shown["result"]
              expected = "memory" if job_id == "oom" else "pids"
              assert result.get("limit_fired") == expected, f"{job_id}: {result}"
              assert ("memory.max=134217728" if job_id == "oom" else "pids.max=40") in result["message"], result["message"]
          # Every job's group is gone; only the runner's own leaf and the state dir's group stay.
          groups = machine.succeed("find /sys/fs/cgroup/system.slice/quest-runner-limits.service -name 'job-*'")
          assert groups.strip() == "", f"job groups left: {groups}"
          machine.succeed("systemctl stop quest-runner-limits.service")
    '';
}
