# Stand-ins for the NixOS options modules/nixos.nix sets or reads, with the types nixpkgs
# declares for them, so the module evaluates without nixpkgs (tests/suite/deploy.rs). Rewritten from,
# and to be kept in step with:
#   assertions, warnings   nixos/modules/misc/assertions.nix
#   systemd.services       nixos/lib/systemd-unit-options.nix, nixos/lib/systemd-lib.nix
#   users.users, .groups   nixos/modules/config/users-groups.nix
#   environment.etc        nixos/modules/system/etc/etc.nix
#   security.apparmor      nixos/modules/security/apparmor.nix
#   nix.package            nixos/modules/config/nix.nix
#   services.postgresql    nixos/modules/services/databases/postgresql.nix
#   meta.doc               nixos/modules/misc/meta.nix
# Only the options the module touches, with their types and defaults: a value of the wrong
# type or an option NixOS does not have fails here as it would there. The flake's checks
# evaluate the module against the real NixOS as well (nix/checks.nix).
{ lib, pkgs, ... }:
let
  inherit (lib) mkOption types;

  unitNameType = types.strMatching "[a-zA-Z0-9@%:_.\\-]+[.](service|socket|device|mount|automount|swap|target|path|timer|scope|slice)";

  # A [Section] value: repeated definitions of a list option concatenate, others must agree.
  unitOption = lib.mkOptionType {
    name = "systemd option";
    merge =
      loc: defs:
      let
        defs' = lib.filterOverrides defs;
      in
      if lib.isList (lib.head defs').value then
        lib.concatMap (
          def:
          if lib.isList def.value then
            def.value
          else
            throw "The definitions for systemd unit options should be either all lists, representing repeatable options, or all non-lists, but for the option ${lib.showOption loc}, the definitions are a mix of list and non-list ${lib.options.showDefs defs'}"
        ) defs'
      else
        lib.mergeEqualOption loc defs';
  };

  # serviceConfig's own check (checkService): known Type= and Restart= values only.
  checkService =
    attrs:
    let
      value = v: if lib.elem (v._type or "") [ "override" "if" ] then v.content else v;
      oneOf =
        key: allowed:
        lib.optional (
          attrs ? ${key} && !lib.elem (value attrs.${key}) allowed
        ) "Systemd Service field `${key}' cannot have value `${toString (value attrs.${key})}'.";
      errors =
        oneOf "Type" [
          "exec"
          "simple"
          "forking"
          "oneshot"
          "dbus"
          "notify"
          "notify-reload"
          "idle"
        ]
        ++ oneOf "Restart" [
          "no"
          "on-success"
          "on-failure"
          "on-abnormal"
          "on-abort"
          "on-watchdog"
          "always"
        ];
    in
    if errors == [ ] then true else builtins.trace (lib.concatStringsSep "\n" errors) false;

  units = default: mkOption {
    inherit default;
    type = types.listOf unitNameType;
  };

  service = types.submodule {
    options = {
      enable = mkOption {
        type = types.bool;
        default = true;
      };
      description = mkOption {
        type = types.singleLineStr;
        default = "";
      };
      after = units [ ];
      before = units [ ];
      wants = units [ ];
      requires = units [ ];
      wantedBy = units [ ];
      environment = mkOption {
        type =
          with types;
          attrsOf (
            nullOr (oneOf [
              str
              path
              package
            ])
          );
        default = { };
      };
      path = mkOption {
        type =
          with types;
          listOf (oneOf [
            package
            str
          ]);
        default = [ ];
      };
      serviceConfig = mkOption {
        type = types.addCheck (types.attrsOf unitOption) checkService;
        default = { };
      };
      unitConfig = mkOption {
        type = types.attrsOf unitOption;
        default = { };
      };
      restartTriggers = mkOption {
        type = types.listOf types.unspecified;
        default = [ ];
      };
      reloadTriggers = mkOption {
        type = types.listOf unitOption;
        default = [ ];
      };
      restartIfChanged = mkOption {
        type = types.bool;
        default = true;
      };
      reloadIfChanged = mkOption {
        type = types.bool;
        default = false;
      };
      stopIfChanged = mkOption {
        type = types.bool;
        default = true;
      };
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

    systemd.services = mkOption {
      type = types.attrsOf service;
      default = { };
    };

    users.users = mkOption {
      default = { };
      type = types.attrsOf (
        types.submodule (
          { name, ... }:
          {
            options = {
              name = mkOption {
                type = types.passwdEntry types.str;
                default = name;
              };
              isSystemUser = mkOption {
                type = types.bool;
                default = false;
              };
              isNormalUser = mkOption {
                type = types.bool;
                default = false;
              };
              group = mkOption {
                type = types.str;
                default = "";
              };
              home = mkOption {
                type = types.passwdEntry types.path;
                default = "/var/empty";
              };
              description = mkOption {
                type = types.passwdEntry types.str;
                default = "";
              };
            };
          }
        )
      );
    };
    users.groups = mkOption {
      default = { };
      type = types.attrsOf (
        types.submodule (
          { name, ... }:
          {
            options = {
              name = mkOption {
                type = types.passwdEntry types.str;
                default = name;
              };
              gid = mkOption {
                type = types.nullOr types.int;
                default = null;
              };
              members = mkOption {
                type = types.listOf (types.passwdEntry types.str);
                default = [ ];
              };
            };
          }
        )
      );
    };

    environment.etc = mkOption {
      default = { };
      type = types.attrsOf (
        types.submodule (
          { name, config, ... }:
          {
            options = {
              enable = mkOption {
                type = types.bool;
                default = true;
              };
              target = mkOption {
                type = types.str;
                default = name;
              };
              text = mkOption {
                type = types.nullOr types.lines;
                default = null;
              };
              source = mkOption { type = types.path; };
              mode = mkOption {
                type = types.str;
                default = "symlink";
              };
            };
            config.source = lib.mkIf (config.text != null) (lib.mkDefault (pkgs.writeText name config.text));
          }
        )
      );
    };

    security.apparmor.enable = mkOption {
      type = types.bool;
      default = false;
    };
    security.apparmor.policies = mkOption {
      default = { };
      type = types.attrsOf (
        types.submodule {
          options = {
            state = mkOption {
              type = types.enum [
                "disable"
                "complain"
                "enforce"
              ];
              default = "enforce";
            };
            profile = mkOption {
              type = types.nullOr types.lines;
              default = null;
            };
            path = mkOption {
              type = types.nullOr types.path;
              default = null;
            };
          };
        }
      );
    };

    services.postgresql = {
      enable = mkOption {
        type = types.bool;
        default = false;
      };
      ensureDatabases = mkOption {
        type = types.listOf types.str;
        default = [ ];
      };
      ensureUsers = mkOption {
        type = types.listOf (
          types.submodule {
            options = {
              name = mkOption { type = types.str; };
              ensureDBOwnership = mkOption {
                type = types.bool;
                default = false;
              };
              ensureClauses = mkOption {
                type = types.attrsOf types.anything;
                default = { };
              };
            };
          }
        );
        default = [ ];
      };
    };

    # Each module's chapter, kept with the file that defined it.
    meta.doc = mkOption {
      type = types.path // {
        merge = _loc: defs: defs;
      };
      internal = true;
    };

    nix.package = mkOption {
      type = types.package;
      default = pkgs.nix;
    };
  };
}
