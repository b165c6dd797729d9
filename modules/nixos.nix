# services.quest-runner: `quest-runner serve` as a hardened system service, modelled on
# nixpkgs' services.github-runners.
#
# The unit's fixed settings — ordering, stop behaviour, directories and hardening, and the
# reason for every relaxation bwrap needs — come from nix/service-hardening.json, the file
# `quest-runner systemd-unit` prints for hosts without NixOS. Each is lib.mkDefault here:
# override one with systemd.services.quest-runner.serviceConfig.<Key> or serviceOverrides.
{
  config,
  lib,
  pkgs,
  ...
}:
let
  inherit (lib) mkIf mkOption types;
  cfg = config.services.quest-runner;
  shared = import ./options.nix { inherit lib pkgs; };
  unit = import ../nix/service-settings.nix;
  configFile = shared.configFile cfg;

  # StateDirectory= takes a name below /var/lib; the state directory option is a full path.
  stateDirName = lib.removePrefix "/var/lib/" cfg.stateDir;

  # Places the sandbox hides from jobs' commands (src/sandbox/policy.rs), where account files
  # belong. Only used for a warning.
  hiddenPrefixes = [
    "${cfg.stateDir}/"
    "/var/lib/"
    "/home/"
    "/root/"
    "/run/user/"
  ];
  exposedAccountFiles = lib.filter (
    f: !lib.any (prefix: lib.hasPrefix prefix f.path) hiddenPrefixes
  ) (shared.accountFiles cfg);
in
{
  options.services.quest-runner =
    shared.options {
      defaultStateDir = "/var/lib/quest-runner";
      where = "system service";
    }
    // {
      user = mkOption {
        type = types.str;
        default = "quest-runner";
        description = ''
          The user the service runs as. The default, quest-runner, is created as a system
          user whose home is the state directory; any other must exist.
        '';
      };

      group = mkOption {
        type = types.str;
        default = "quest-runner";
        description = "The service's group (created when it is the default).";
      };

      serviceOverrides = mkOption {
        type = types.attrsOf types.anything;
        default = { };
        example = {
          ProtectHome = "tmpfs";
        };
        description = ''
          systemd [Service] settings merged over the defaults from
          nix/service-hardening.json. Read the reason given there before relaxing or
          tightening one: several defaults exist because bwrap needs them.
        '';
      };

      apparmor.enable = lib.mkEnableOption ''
        the AppArmor profile that lets the package's bwrap (and only it) create user
        namespaces, through security.apparmor.policies. Needed where AppArmor restricts
        unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1); the
        template is nix/apparmor/quest-runner-bwrap.in'';
    };

  config = mkIf cfg.enable {
    assertions = shared.assertions cfg ++ [
      {
        assertion = lib.hasPrefix "/var/lib/" cfg.stateDir && stateDirName != "";
        message = "services.quest-runner.stateDir must be below /var/lib (systemd's StateDirectory= creates and owns it), not ${cfg.stateDir}.";
      }
      {
        assertion = !cfg.apparmor.enable || (cfg.package.passthru.bwrap or null) != null;
        message = "services.quest-runner.apparmor.enable needs a package that names its bwrap (passthru.bwrap), as the flake's does.";
      }
      {
        assertion = !cfg.apparmor.enable || config.security.apparmor.enable;
        message = "services.quest-runner.apparmor.enable needs security.apparmor.enable = true.";
      }
    ];

    warnings = map (
      f:
      "services.quest-runner.accounts.${f.name}: ${f.path} is outside the directories the sandbox hides (the state directory, /var/lib, /home, /root, /run/user), so jobs' commands could read it."
    ) exposedAccountFiles;

    users.users = mkIf (cfg.user == "quest-runner") {
      quest-runner = {
        isSystemUser = true;
        inherit (cfg) group;
        home = cfg.stateDir;
        description = "quest-runner service";
      };
    };
    users.groups = mkIf (cfg.group == "quest-runner") { quest-runner = { }; };

    # In /etc rather than on the command line, so a change reloads the service (SIGHUP) instead
    # of restarting it and its jobs.
    environment.etc."quest-runner/config.json".source = configFile;

    systemd.services.quest-runner = {
      description = unit.unit.Description;
      after = unit.unit.After;
      wants = unit.unit.Wants;
      wantedBy = unit.install.WantedBy;

      path = shared.basePackages ++ cfg.extraPackages;

      environment = {
        QUEST_RUNNER_STATE_DIR = cfg.stateDir;
        QUEST_RUNNER_CONFIG = "/etc/quest-runner/config.json";
        HOME = cfg.stateDir;
        XDG_CACHE_HOME = "/var/cache/${unit.service.CacheDirectory}";
        # The system's Nix rather than the package's pin: its client then always speaks the
        # daemon's protocol version.
        QUEST_RUNNER_NIX = lib.mkDefault "${config.nix.package}/bin/nix";
      };

      reloadTriggers = [ configFile ];

      serviceConfig =
        lib.mapAttrs (_: lib.mkDefault) unit.service
        // {
          ExecStart = "${lib.getExe cfg.package} serve";
          # serve reloads its configuration on SIGHUP.
          ExecReload = "${pkgs.coreutils}/bin/kill -HUP $MAINPID";
          User = cfg.user;
          Group = cfg.group;
          StateDirectory = stateDirName;
        }
        // lib.optionalAttrs (cfg.environmentFile != null) { EnvironmentFile = cfg.environmentFile; }
        // cfg.serviceOverrides;
    };

    security.apparmor.policies.quest-runner-bwrap = mkIf cfg.apparmor.enable {
      profile = import ../nix/apparmor/profile.nix cfg.package.passthru.bwrap;
    };
  };
}
