# Stand-ins for the home-manager options modules/home-manager.nix sets or reads, with the types
# home-manager declares for them, so the module evaluates without home-manager (which is not
# an input of this flake: every user of the flake would fetch it). Used by tests/suite/deploy.rs and
# by the flake's checks. Rewritten from, and to be kept in step with:
#   assertions, warnings       modules/misc/assertions.nix
#   home.*, xdg.*              modules/home-environment.nix, modules/misc/xdg.nix,
#                              modules/lib/file-type.nix (xdg.configFile)
#   systemd.user.services      modules/systemd.nix (unitBaseType, serviceType)
#   launchd.agents             modules/launchd/default.nix, modules/launchd/launchd.nix
# Only the options the module touches, with their types and defaults.
{ lib, config, ... }:
let
  inherit (lib) mkOption types;

  # modules/lib/file-type.nix: the type of xdg.configFile.
  fileType =
    basePath:
    types.attrsOf (
      types.submodule (
        { name, ... }:
        {
          options = {
            enable = mkOption {
              type = types.bool;
              default = true;
            };
            target = mkOption {
              type = types.str;
              default = name;
              apply =
                p:
                let
                  absolute = if lib.hasPrefix "/" p then p else "${basePath}/${p}";
                in
                lib.removePrefix (config.home.homeDirectory + "/") absolute;
            };
            text = mkOption {
              type = types.nullOr types.lines;
              default = null;
            };
            source = mkOption { type = types.path; };
            executable = mkOption {
              type = types.nullOr types.bool;
              default = null;
            };
            recursive = mkOption {
              type = types.bool;
              default = false;
            };
            onChange = mkOption {
              type = types.lines;
              default = "";
            };
            force = mkOption {
              type = types.bool;
              default = false;
            };
          };
        }
      )
    );

  # modules/systemd.nix: unitBaseType "service" with serviceType's typed keys; every other key
  # of every section is freeform, of these primitive types.
  serviceType = types.attrsOf (
    types.submodule {
      freeformType =
        with types;
        let
          primitive = oneOf [
            bool
            int
            str
            path
          ];
        in
        attrsOf (attrsOf (either primitive (listOf primitive)));
      options = {
        Unit = {
          Description = mkOption {
            type = types.nullOr types.str;
            default = null;
          };
          Documentation = mkOption {
            type = with types; coercedTo str lib.toList (listOf str);
            default = [ ];
          };
          X-Reload-Triggers = mkOption {
            type = with types; listOf (either package str);
            default = [ ];
          };
          X-Restart-Triggers = mkOption {
            type = with types; listOf (either package str);
            default = [ ];
          };
          X-SwitchMethod = mkOption {
            type = types.enum [
              null
              "reload"
              "restart"
              "stop-start"
              "keep-old"
            ];
            default = null;
          };
        };
        Service = {
          Environment = mkOption {
            type = with types; coercedTo str lib.toList (listOf str);
            default = [ ];
          };
          ExecStart = mkOption {
            type =
              with types;
              let
                primitive = either package str;
              in
              either primitive (listOf primitive);
            apply = lib.toList;
            default = [ ];
          };
        };
      };
    }
  );

  nullOr = type: {
    type = types.nullOr type;
    default = null;
  };

  # modules/launchd/launchd.nix: freeform, with these keys typed.
  launchdConfig = {
    freeformType = with types; attrsOf anything;
    options = lib.mapAttrs (_: mkOption) {
      Label = {
        type = types.str;
      };
      Program = nullOr types.path;
      ProgramArguments = nullOr (types.listOf types.str);
      EnvironmentVariables = nullOr (types.attrsOf types.str);
      RunAtLoad = nullOr types.bool;
      KeepAlive = nullOr (
        types.either types.bool (
          types.submodule {
            options = lib.mapAttrs (_: mkOption) {
              SuccessfulExit = nullOr types.bool;
              NetworkState = nullOr types.bool;
              PathState = nullOr (types.attrsOf types.bool);
              OtherJobEnabled = nullOr (types.attrsOf types.bool);
              Crashed = nullOr types.bool;
              AfterInitialDemand = nullOr types.bool;
            };
          }
        )
      );
      StandardOutPath = nullOr types.path;
      StandardErrorPath = nullOr types.path;
      WorkingDirectory = nullOr types.str;
      ExitTimeOut = nullOr types.int;
      ProcessType = nullOr (
        types.enum [
          "Background"
          "Standard"
          "Adaptive"
          "Interactive"
        ]
      );
      Nice = nullOr types.int;
      LowPriorityIO = nullOr types.bool;
    };
  };
in
{
  options = {
    assertions = mkOption {
      type = types.listOf types.unspecified;
      internal = true;
      default = [ ];
    };
    warnings = mkOption {
      type = types.listOf types.str;
      internal = true;
      default = [ ];
    };

    home.username = mkOption { type = types.str; };
    home.homeDirectory = mkOption { type = types.path; };
    home.packages = mkOption {
      type = types.listOf types.package;
      default = [ ];
    };

    xdg.configHome = mkOption {
      type = types.path;
      default = "${config.home.homeDirectory}/.config";
      apply = toString;
    };
    xdg.stateHome = mkOption {
      type = types.path;
      default = "${config.home.homeDirectory}/.local/state";
      apply = toString;
    };
    xdg.configFile = mkOption {
      type = fileType config.xdg.configHome;
      default = { };
    };

    systemd.user.services = mkOption {
      type = serviceType;
      default = { };
    };

    launchd.agents = mkOption {
      default = { };
      type = types.attrsOf (
        types.submodule (
          { name, ... }:
          {
            options = {
              enable = lib.mkEnableOption name;
              config = mkOption {
                type = types.submodule launchdConfig;
                default = { };
              };
            };
            config.config.Label = lib.mkDefault "org.nix-community.home.${name}";
          }
        )
      );
    };
  };
}
