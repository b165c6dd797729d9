# services.quest-runner for home-manager: `quest-runner serve` as the user's own agent — a
# launchd agent on macOS, a systemd user service on Linux — with the same options as the NixOS
# module where they make sense (no user, group, AppArmor or system hardening: a user manager
# cannot apply most of it, and on macOS the sandbox is Seatbelt).
{
  config,
  lib,
  pkgs,
  ...
}:
let
  inherit (lib) mkIf;
  cfg = config.services.quest-runner;
  shared = import ./options.nix { inherit lib pkgs; };
  unit = import ../nix/service-settings.nix;
  configFile = shared.configFile cfg;
  inherit (pkgs.stdenv.hostPlatform) isDarwin;

  environment = {
    QUEST_RUNNER_STATE_DIR = cfg.stateDir;
    QUEST_RUNNER_CONFIG = "${configFile}";
    # The system's own directories last: sandbox-exec on macOS, and whatever the host has.
    PATH = "${lib.makeBinPath (shared.basePackages ++ cfg.extraPackages)}:/usr/bin:/bin:/usr/sbin:/sbin";
  };

  logFile = "${config.home.homeDirectory}/Library/Logs/quest-runner.log";

  # The lifecycle part of the system unit's settings; the hardening keys need a system
  # manager (or user namespaces a user manager would have to create around bwrap's own).
  lifecycle = lib.getAttrs [
    "Type"
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
  options.services.quest-runner = shared.options {
    defaultStateDir = "${config.xdg.stateHome}/quest-runner";
    defaultStateDirText = lib.literalExpression ''"''${config.xdg.stateHome}/quest-runner"'';
    where = "user agent";
  };

  config = mkIf cfg.enable (
    lib.mkMerge [
      {
        assertions = shared.assertions cfg;
        home.packages = [ cfg.package ];
      }

      (mkIf isDarwin {
        launchd.agents.quest-runner = {
          enable = true;
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
            ProcessType = "Background";
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
          Unit = {
            Description = unit.unit.Description;
            After = unit.unit.After;
            Wants = unit.unit.Wants;
          };
          Service =
            lifecycle
            // {
              ExecStart = "${lib.getExe cfg.package} serve";
              ExecReload = "${pkgs.coreutils}/bin/kill -HUP $MAINPID";
              Environment = lib.mapAttrsToList (k: v: "${k}=${v}") environment;
            }
            // lib.optionalAttrs (cfg.environmentFile != null) { EnvironmentFile = cfg.environmentFile; };
          Install.WantedBy = [ "default.target" ];
        };
      })
    ]
  );
}
