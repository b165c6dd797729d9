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

      # No binary cache in the sandbox of a test; and the selftest's sample devShell is built
      # with /bin/bash, which NixOS does not have.
      nix.settings = {
        substituters = lib.mkForce [ ];
        extra-sandbox-paths = [ "/bin/bash=${pkgs.bash}/bin/bash" ];
      };

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
      systemd.tmpfiles.rules = [ "d ${stateDir}/selftest 0700 quest-runner quest-runner -" ];
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
          label = machine.succeed(f"{sandbox} cat /proc/self/attr/apparmor/current")
          assert "quest_runner_bwrap_sandbox" in label, f"the sandbox runs as {label}"
          # What bwrap runs may not create user namespaces of its own.
          machine.fail(f"{sandbox} unshare --user true")

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
    '';
}
