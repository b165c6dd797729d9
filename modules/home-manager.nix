# services.quest-runner for home-manager: `quest-runner serve` as the user's own agent — a
# launchd agent on macOS, a systemd user service on Linux — with the same options as the NixOS
# module where they make sense (no user, group, AppArmor or system hardening: a user manager
# cannot apply most of it, and on macOS the sandbox is Seatbelt).
#
# The configuration is a file of the user's (xdg.configFile), at a path that does not change:
# a settings change then reloads the runner (SIGHUP) and its running jobs go on, where a new
# path in the unit would restart it and kill them. Only `settings.limits` and the queue, read
# at start, restart it.
{
  config,
  lib,
  pkgs,
  ...
}:
let
  inherit (lib) mkIf;
  cfg = config.services.quest-runner;
  shared = import ./lib.nix { inherit lib pkgs; };
  unit = import ../nix/service-settings.nix;
  configFile = shared.configFile cfg;
  limitsFile = shared.limitsFile cfg;
  inherit (pkgs.stdenv.hostPlatform) isDarwin;

  configName = "quest-runner/config.json";
  environment = {
    QUEST_RUNNER_STATE_DIR = cfg.stateDir;
    QUEST_RUNNER_CONFIG = "${config.xdg.configHome}/${configName}";
    # The system's own directories last: sandbox-exec on macOS, and whatever the host has.
    PATH = "${lib.makeBinPath (shared.basePackages ++ cfg.extraPackages)}:/usr/bin:/bin:/usr/sbin:/sbin";
  };

  logFile = "${config.home.homeDirectory}/Library/Logs/quest-runner.log";
  # home-manager's label for launchd.agents.quest-runner.
  label = config.launchd.agents.quest-runner.config.Label or "org.nix-community.home.quest-runner";

  # launchd has no reload: after home-manager links a changed config, signal the agent as
  # systemd's ExecReload would — unless its plist changed too (home-manager has restarted it
  # with the new config already), or the limits or the queue did (read at start: restart it).
  reloadOnDarwin = ''
    service="gui/$(id -u)/${label}"
    if /bin/launchctl print "$service" >/dev/null 2>&1; then
      old="''${oldGenPath:-}/home-files/${config.xdg.configFile.${configName}.target}"
      plist="LaunchAgents/${label}.plist"
      limits() { ${lib.getExe pkgs.jq} -S '{limits: (.limits // {}), queue: .queue}' "$1"; }
      if [ -n "''${oldGenPath:-}" ] && ! cmp -s "$oldGenPath/$plist" "$newGenPath/$plist"; then
        :
      elif [ -e "$old" ] && [ "$(limits "$old")" != "$(limits ${configFile})" ]; then
        run /bin/launchctl kickstart -k "$service"
      else
        run /bin/launchctl kill SIGHUP "$service"
      fi
    fi
  '';

  # The lifecycle part of the system unit's settings, readiness and watchdog included; the
  # hardening keys need a system manager (or user namespaces a user manager would have to
  # create around bwrap's own).
  lifecycle = lib.getAttrs [
    "Type"
    "NotifyAccess"
    "WatchdogSec"
    "Restart"
    "RestartSec"
    "KillMode"
    # A user manager delegates memory, pids and cpu to its services when asked: per-job
    # cgroup limits for the user's runner too.
    "Delegate"
    "TimeoutStopSec"
    "UMask"
  ] unit.service;

in
{
  imports = [
    (import ./options.nix {
      defaultStateDir = "${config.xdg.stateHome}/quest-runner";
      defaultStateDirText = lib.literalExpression ''"''${config.xdg.stateHome}/quest-runner"'';
      where = "user agent";
    })
    ./common.nix
  ];

  config = mkIf cfg.enable (
    lib.mkMerge [
      {
        home.packages = [ cfg.package ];
        xdg.configFile.${configName} = {
          source = configFile;
          onChange = lib.optionalString isDarwin reloadOnDarwin;
        };
      }

      (mkIf isDarwin {
        launchd.agents.quest-runner = {
          enable = true;
          # ProcessType is left to launchd (Standard); "Background" would throttle the jobs'
          # builds. Set launchd.agents.quest-runner.config.ProcessType to change it.
          config = {
            ProgramArguments = [
              (lib.getExe cfg.package)
              "serve"
            ];
            EnvironmentVariables = environment;
            RunAtLoad = true;
            # Restarted after a crash or a failed exit, not after a clean one (a stop).
            KeepAlive = {
              Crashed = true;
              SuccessfulExit = false;
            };
            StandardOutPath = logFile;
            StandardErrorPath = logFile;
          }
          // lib.optionalAttrs (cfg.environmentFile != null) {
            # launchd has no EnvironmentFile: read it in a shell first.
            ProgramArguments = [
              "/bin/sh"
              "-c"
              ''set -a; . "$0"; set +a; exec "$1" serve''
              cfg.environmentFile
              (lib.getExe cfg.package)
            ];
          };
        };
      })

      (mkIf (!isDarwin) {
        systemd.user.services.quest-runner = {
          # A user manager sees only its own units: no network-online.target or
          # nix-daemon.socket to order after (the system unit's After=).
          Unit = {
            Description = unit.unit.Description;
            # Only the config file changed: reload. The limits changed: restart.
            X-Reload-Triggers = [ "${configFile}" ];
            X-Restart-Triggers = [ "${limitsFile}" ];
          };
          # The shipped settings as the system unit's: an operator's
          # systemd.user.services.quest-runner.Service.<Key> replaces a scalar and extends a
          # list.
          Service = lib.mkMerge [
            (shared.unitDefaults lifecycle)
            {
              ExecStart = "${lib.getExe cfg.package} serve";
              ExecReload = "${pkgs.coreutils}/bin/kill -HUP $MAINPID";
              Environment = lib.mapAttrsToList (k: v: "${k}=${v}") environment;
            }
            (mkIf (cfg.environmentFile != null) { EnvironmentFile = cfg.environmentFile; })
          ];
          Install.WantedBy = [ "default.target" ];
        };
      })
    ]
  );
}
