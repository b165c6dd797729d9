# services.quest-runner: `quest-runner serve` as a hardened system service, modelled on
# nixpkgs' services.github-runners.
#
# The unit's fixed settings — ordering, stop behaviour, directories and hardening, and the
# reason for every relaxation bwrap needs — come from nix/service-hardening.json, the file
# `quest-runner systemd-unit` prints for hosts without NixOS. A list (SystemCallFilter,
# RestrictAddressFamilies, CapabilityBoundingSet, ...) is extended by an operator's entries and
# replaced only by lib.mkForce; a scalar is lib.mkDefault, replaced by any setting. Set them
# with systemd.services.quest-runner.serviceConfig.<Key> or serviceOverrides, alike.
{
  config,
  lib,
  pkgs,
  ...
}:
let
  inherit (lib) mkIf mkOption types;
  cfg = config.services.quest-runner;
  shared = import ./lib.nix { inherit lib pkgs; };
  unit = import ../nix/service-settings.nix;
  configFile = shared.configFile cfg;

  # StateDirectory= takes a name below /var/lib; the state directory option is a full path.
  stateDirName = lib.removePrefix "/var/lib/" cfg.stateDir;

  createLocally = cfg.queue.postgresql.enable && cfg.queue.postgresql.createLocally;

  # The unit's settings as they end up, defaults and overrides merged.
  service = config.systemd.services.quest-runner.serviceConfig;
  enabled = v: v != false && v != "no";
  # A unit setting as systemd reads it.
  show =
    v:
    if v == true then
      "true"
    else if v == false then
      "false"
    else
      toString v;
  protectHome = service.ProtectHome or false;
  writablePaths =
    [
      cfg.stateDir
      "/var/cache/${unit.service.CacheDirectory}"
      "/var/log/${unit.service.LogsDirectory}"
      "/run/${unit.service.RuntimeDirectory}"
    ]
    ++ map (lib.removePrefix "-") (lib.toList (service.ReadWritePaths or [ ]));

  # Account files the service itself cannot use, given its unit's sandbox. The file is read (and
  # for a login, rewritten) by the agent, which runs as the service.
  unusableAccountFile =
    f:
    let
      at = "${f.option} = ${f.path}";
      inHome = lib.any (dir: shared.within dir f.path) [
        "/home"
        "/root"
        "/run/user"
      ];
      inTmp = lib.any (dir: shared.within dir f.path) [
        "/tmp"
        "/var/tmp"
      ];
      writeFix = ''services.quest-runner.serviceOverrides = { ProtectHome = false; ReadWritePaths = [ "${dirOf f.path}" ]; }'';
    in
    if inHome && lib.elem protectHome [ true "yes" "tmpfs" ] then
      "${at}: the service cannot read it: its unit has ProtectHome=${show protectHome}, which hides /home, /root and /run/user from it. Keep the file under the state directory (${cfg.stateDir}), or set ${
        if f.rewritten then writeFix else ''services.quest-runner.serviceOverrides.ProtectHome = "read-only"''
      }."
    else if inHome && f.rewritten && protectHome == "read-only" then
      "${at}: the service cannot write it (ProtectHome=read-only), and the agent rewrites it when it refreshes the login. Keep the file under the state directory (${cfg.stateDir}), or set ${writeFix}."
    else if inTmp && enabled (service.PrivateTmp or false) then
      "${at}: the service cannot see it: its unit has PrivateTmp=${show service.PrivateTmp}, a /tmp and /var/tmp of its own. Keep the file under the state directory (${cfg.stateDir})."
    else
      null;

  # A login the agent rewrites, where ProtectSystem=strict leaves it read-only to the service.
  readOnlyLogins = lib.filter (
    f:
    f.rewritten
    && (service.ProtectSystem or null) == "strict"
    && !lib.any (dir: shared.within dir f.path) writablePaths
    && unusableAccountFile f == null
  ) (shared.accountFiles cfg);

in
{
  imports = [
    (import ./options.nix {
      defaultStateDir = "/var/lib/quest-runner";
      where = "system service";
    })
    ./common.nix
  ];

  # The chapter the NixOS manual shows above the options (usage, the queue, secrets,
  # hardening, common problems).
  meta.doc = ../docs/nixos-module.md;

  # The system service's own options besides the shared ones of ./options.nix.
  options.services.quest-runner = {
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
      # As nixpkgs' services.github-runners: definitions are passed on as written, so
      # lib.mkForce and lib.mkBefore inside act as they would in serviceConfig.
      type = types.attrs;
      default = { };
      example = lib.literalExpression ''
        {
          ProtectHome = "read-only";
          ReadWritePaths = [ "/srv/quest-runner" ];
          SystemCallFilter = [ "~@clock" ];
        }
      '';
      description = ''
        systemd [Service] settings merged with the unit's (lib.mkMerge), exactly as
        definitions of `systemd.services.quest-runner.serviceConfig`. A scalar replaces
        the shipped value (those are lib.mkDefault). A list is added to the shipped one:
        `SystemCallFilter = [ "~@clock" ]` keeps `@system-service @mount seccomp` and
        takes `@clock` from it, `RestrictAddressFamilies = [ "AF_PACKET" ]` keeps
        AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK; replace a list with
        `lib.mkForce [ ... ]`. The module's own settings (ExecStart, ExecReload, User,
        Group, StateDirectory, EnvironmentFile) have options of their own: given here
        too, evaluation fails with "conflicting definition values" (lib.mkForce wins).
        Read the reason nix/service-hardening.json gives for a setting before relaxing
        it: several exist because bwrap needs them.
      '';
    };

    queue.postgresql.createLocally = mkOption {
      type = types.bool;
      default = false;
      description = ''
        Run the queue's database on this host: services.postgresql with a database and a
        role named after the service's user (ensureDatabases, ensureUsers with
        ensureDBOwnership), reached over /run/postgresql with peer authentication, so no
        password exists. Runners on other hosts then need a way in (a role with a
        password, `services.postgresql.enableTCPIP` and `authentication`), set by you.
      '';
    };

    apparmor.enable = lib.mkEnableOption ''
      the AppArmor profile that lets the package's bwrap (and only it) create user
      namespaces, through security.apparmor.policies. Needed where AppArmor restricts
      unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1); the
      template is nix/apparmor/quest-runner-bwrap.in'';
  };

  config = mkIf cfg.enable {
    assertions =
      map (message: {
        assertion = message == null;
        inherit message;
      }) (map unusableAccountFile (shared.accountFiles cfg))
      ++ [
      {
        assertion = lib.hasPrefix "/var/lib/" cfg.stateDir && stateDirName != "";
        message = "services.quest-runner.stateDir must be below /var/lib (systemd's StateDirectory= creates and owns it), not ${cfg.stateDir}.";
      }
      {
        assertion =
          !cfg.apparmor.enable
          || (cfg.package.passthru.bwrap or null) != null
            && (cfg.package.passthru.applySeccomp or null) != null;
        message = "services.quest-runner.apparmor.enable needs a package that names its bwrap and srt's seccomp helper (passthru.bwrap, passthru.applySeccomp), as the flake's does.";
      }
      {
        assertion = !cfg.apparmor.enable || config.security.apparmor.enable;
        message = "services.quest-runner.apparmor.enable needs security.apparmor.enable = true.";
      }
    ];

    warnings =
      map (
        f:
        "${f.option} = ${f.path}: the service cannot write it (ProtectSystem=strict; writable are ${lib.concatStringsSep ", " writablePaths}), and the agent rewrites it when it refreshes the login. Keep it under the state directory, or add its directory to services.quest-runner.serviceOverrides.ReadWritePaths."
      ) readOnlyLogins;

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
    # of restarting it and its jobs; limits, read at start only, restart it.
    environment.etc."quest-runner/config.json".source = configFile;

    systemd.services.quest-runner = {
      description = unit.unit.Description;
      # With the database on this host, after it (and its ensure* setup).
      after = unit.unit.After ++ lib.optional createLocally "postgresql.service";
      requires = lib.optional createLocally "postgresql.service";
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
      restartTriggers = [ (shared.limitsFile cfg) ];

      # Merged, not `//`: an operator's list entries are added to the shipped ones, and a
      # setting of the module's own (ExecStart, User, ...) given again in serviceOverrides is
      # a conflict the module system names.
      serviceConfig = lib.mkMerge [
        (shared.unitDefaults unit.service)
        {
          ExecStart = "${lib.getExe cfg.package} serve";
          # serve reloads its configuration on SIGHUP.
          ExecReload = "${pkgs.coreutils}/bin/kill -HUP $MAINPID";
          User = cfg.user;
          Group = cfg.group;
          StateDirectory = stateDirName;
        }
        (mkIf (cfg.environmentFile != null) { EnvironmentFile = cfg.environmentFile; })
        cfg.serviceOverrides
      ];
    };

    services.postgresql = mkIf createLocally {
      enable = true;
      ensureDatabases = [ cfg.user ];
      ensureUsers = [
        {
          name = cfg.user;
          ensureDBOwnership = true;
        }
      ];
    };

    security.apparmor.policies.quest-runner-bwrap = mkIf cfg.apparmor.enable {
      profile = import ../nix/apparmor/profile.nix {
        inherit (cfg.package.passthru) bwrap applySeccomp;
        # nix-daemon is a link to nix: the profile attaches to the file it resolves to.
        nixDaemon = "${config.nix.package}/bin/nix";
      };
    };
  };
}
