# checks.<system>: what `nix flake check` builds. The package (with its unit tests), clippy,
# rustfmt, nixfmt, an evaluation of each module with typical settings, and on Linux the NixOS
# VM test (nix/vm-test.nix).
{
  pkgs,
  lib,
  self,
  nixpkgs,
  nixFiles,
}:
let
  inherit (pkgs.stdenv.hostPlatform) system isLinux;
  package = self.packages.${system}.default;

  # Forces `value` (a Nix value, store paths taken as plain strings) and passes when every
  # assertion holds, so the check costs an evaluation and no builds of what it names.
  evaluated =
    name: assertions: value:
    let
      failed = lib.filter (a: !a.ok) assertions;
    in
    if failed != [ ] then
      throw "${name}: ${lib.concatMapStringsSep "; " (a: a.what) failed}"
    else
      pkgs.writeText name (builtins.unsafeDiscardStringContext (builtins.toJSON value));

  typicalSettings = {
    enable = true;
    concurrency = 2;
    settings = {
      default_timeout = "30m";
      network.extra_hosts = [ "git.example.org" ];
      nix.options.substituters = "";
    };
  };

  nixos = nixpkgs.lib.nixosSystem {
    modules = [
      self.nixosModules.default
      {
        nixpkgs.hostPlatform = system;
        services.quest-runner = typicalSettings // {
          apparmor.enable = true;
          accounts.work = {
            agent = "claude";
            apiKeyFile = "/var/lib/quest-runner/keys/anthropic";
          };
          accounts.oc = {
            agent = "opencode";
            authFile = "/var/lib/quest-runner/opencode/auth.json";
            model = "anthropic/claude-sonnet-4-5";
          };
        };
        security.apparmor.enable = true;
        boot.loader.grub.enable = false;
        fileSystems."/".device = "/dev/null";
        system.stateVersion = "25.11";
      }
    ];
  };

  # home-manager is not an input of this flake (every user of the flake would fetch it), so
  # its module is evaluated against stand-ins for the few home-manager options it sets.
  homeManagerStandIns =
    { lib, ... }:
    let
      inherit (lib) mkOption types;
      loose = mkOption {
        type = types.attrsOf types.anything;
        default = { };
      };
    in
    {
      options = {
        home.homeDirectory = mkOption { type = types.str; };
        home.packages = mkOption {
          type = types.listOf types.package;
          default = [ ];
        };
        xdg.stateHome = mkOption { type = types.str; };
        launchd.agents = loose;
        systemd.user.services = loose;
        assertions = mkOption {
          type = types.listOf types.attrs;
          default = [ ];
        };
      };
    };

  home = lib.evalModules {
    modules = [
      self.homeModules.default
      homeManagerStandIns
      {
        _module.args.pkgs = pkgs;
        home.homeDirectory = if pkgs.stdenv.hostPlatform.isDarwin then "/Users/alice" else "/home/alice";
        xdg.stateHome = "/home/alice/.local/state";
        services.quest-runner = typicalSettings // {
          accounts.work = {
            agent = "claude";
            credentialsFile = "/home/alice/.claude/.credentials.json";
          };
        };
      }
    ];
  };

  nixosUnit = nixos.config.systemd.units."quest-runner.service".text;
  # The config the module writes, computed as the module does rather than read back from the
  # store (which would build during evaluation).
  nixosConfig = (import ../modules/options.nix { inherit lib pkgs; }).finalSettings nixos.config.services.quest-runner;
  hm = home.config;
  hmAgent = hm.launchd.agents.quest-runner.config or null;
  hmService = hm.systemd.user.services.quest-runner or null;
in
{
  inherit package;

  clippy = package.overrideAttrs (old: {
    pname = "quest-runner-clippy";
    nativeBuildInputs = old.nativeBuildInputs ++ [ pkgs.clippy ];
    buildPhase = ''
      runHook preBuild
      cargo clippy --offline --all-targets -- -D warnings
      runHook postBuild
    '';
    doCheck = false;
    installPhase = "touch $out";
    postInstall = "";
    dontFixup = true;
  });

  # rustfmt follows the crate's `mod` declarations from each root.
  rustfmt = pkgs.runCommand "quest-runner-rustfmt" { nativeBuildInputs = [ pkgs.rustfmt ]; } ''
    cd ${package.src}
    rustfmt --check --edition 2021 src/lib.rs src/main.rs tests/*.rs benches/*.rs
    touch $out
  '';

  nixfmt = pkgs.runCommand "quest-runner-nixfmt" { nativeBuildInputs = [ pkgs.nixfmt ]; } ''
    cd ${self}
    nixfmt --check ${lib.escapeShellArgs nixFiles}
    touch $out
  '';

  eval-home-manager =
    evaluated "quest-runner-eval-home-manager"
      (
        if pkgs.stdenv.hostPlatform.isDarwin then
          [
            {
              ok = lib.all (a: a.assertion) hm.assertions;
              what = "the module's assertions";
            }
            {
              ok =
                hmAgent.KeepAlive == {
                  Crashed = true;
                  SuccessfulExit = false;
                };
              what = "launchd KeepAlive";
            }
            {
              ok = hmAgent.StandardErrorPath == "/Users/alice/Library/Logs/quest-runner.log";
              what = "launchd log path";
            }
            {
              ok = lib.last hmAgent.ProgramArguments == "serve";
              what = "launchd runs serve";
            }
          ]
        else
          [
            {
              ok = lib.all (a: a.assertion) hm.assertions;
              what = "the module's assertions";
            }
            {
              ok = lib.hasSuffix " serve" hmService.Service.ExecStart;
              what = "systemd user service runs serve";
            }
            {
              ok = hmService.Service.KillMode == "mixed";
              what = "KillMode from nix/service-hardening.json";
            }
            {
              ok = hmService.Service.Delegate == true;
              what = "Delegate from nix/service-hardening.json (per-job cgroups)";
            }
            {
              ok = hmService.Install.WantedBy == [ "default.target" ];
              what = "WantedBy";
            }
          ]
      )
      {
        launchd = hmAgent;
        systemd = hmService;
      };
}
// lib.optionalAttrs isLinux {
  eval-nixos =
    evaluated "quest-runner-eval-nixos"
      [
        {
          ok = lib.hasInfix "ProtectSystem=strict" nixosUnit;
          what = "hardening from nix/service-hardening.json";
        }
        {
          ok = lib.hasInfix "/bin/quest-runner serve" nixosUnit;
          what = "ExecStart runs serve";
        }
        {
          ok = lib.hasInfix "Delegate=true" nixosUnit;
          what = "Delegate= for per-job cgroups";
        }
        {
          ok = nixosConfig.accounts.work.api_key_file == "/var/lib/quest-runner/keys/anthropic";
          what = "accounts merged into the config";
        }
        {
          ok = nixosConfig.concurrency == 2;
          what = "concurrency in the config";
        }
        {
          ok = nixos.config.security.apparmor.policies ? quest-runner-bwrap;
          what = "AppArmor profile installed";
        }
      ]
      {
        unit = nixosUnit;
        config = nixosConfig;
        # Evaluating the whole system also checks the modules' assertions.
        toplevel = nixos.config.system.build.toplevel.drvPath;
      };

  vm-test = import ./vm-test.nix { inherit pkgs self; };
}
