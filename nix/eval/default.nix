# The flake's modules and package evaluated without nixpkgs or home-manager: nixpkgs' real
# `lib`, the flake's own outputs, and the stand-ins beside this file for the rest. Used by
# tests/suite/deploy.rs (with ../shared/data/nixpkgs-lib) and by the flake's checks (with the
# flake's nixpkgs).
#
#   eval = import ./nix/eval { lib = import <nixpkgs/lib>; };
#   eval.agentVersions               # per system: the agents the package wraps, and the lock's
#   eval.run "settings-typo"         # one case of ./cases.nix: { ok, failures, ... } or an error
{
  lib,
  root ? ../..,
}:
let
  flake =
    (import (root + "/flake.nix")).outputs {
      self = flake // {
        outPath = root;
      };
      # Only its lib is used by what is evaluated here; nothing imports nixpkgs itself.
      nixpkgs = {
        inherit lib;
        outPath = throw "nix/eval: nixpkgs itself is not available here";
      };
    };

  pkgsFor =
    system:
    import ./pkgs.nix {
      inherit lib system;
      overlays = [ flake.overlays.default ];
    };

  # The modules default to the flake's package for the host (self.packages), which needs
  # nixpkgs; here it is the same package file built from the stand-ins.
  usePackage = pkgs: {
    _module.args.pkgs = pkgs;
    services.quest-runner.package = lib.mkOverride 900 pkgs.quest-runner;
  };

  # Only the modules' own complaints: a real NixOS has others (no boot loader, ...).
  ours = lib.filter (lib.hasPrefix "services.quest-runner");
  failedAssertions = config: ours (map (a: a.message) (lib.filter (a: !a.assertion) config.assertions));

  # What a case reads back from an evaluated NixOS system's config: the values a reviewer of
  # the module would look at. Forcing it (--strict) is what makes a bad definition fail. The
  # flake's checks read the same from a real NixOS (nix/checks.nix).
  summarizeNixos =
    config:
    let
      svc = config.systemd.services.quest-runner;
      file = config.environment.etc."quest-runner/config.json".source;
    in
    {
      failedAssertions = failedAssertions config;
      warnings = ours config.warnings;
      config = builtins.fromJSON file.text;
      configPath = "${file}";
      service = {
        inherit (svc)
          after
          requires
          wants
          wantedBy
          serviceConfig
          ;
        environment = removeAttrs svc.environment [
          "PATH"
          "LOCALE_ARCHIVE"
          "TZDIR"
        ];
        reloadTriggers = map toString svc.reloadTriggers;
        restartTriggers = map toString svc.restartTriggers;
      };
      user = config.users.users.quest-runner or null;
      postgresql = {
        inherit (config.services.postgresql) enable ensureDatabases;
        ensureUsers = map (u: { inherit (u) name ensureDBOwnership; }) config.services.postgresql.ensureUsers;
      };
      apparmor = lib.mapAttrs (_: p: p.profile) config.security.apparmor.policies;
    };

  nixos =
    system: module:
    summarizeNixos
      (lib.evalModules {
        modules = [
          ./nixos.nix
          flake.nixosModules.default
          (usePackage (pkgsFor system))
          module
        ];
      }).config;

  home =
    system: module:
    let
      pkgs = pkgsFor system;
      eval = lib.evalModules {
        modules = [
          ./home-manager.nix
          flake.homeModules.default
          (usePackage pkgs)
          {
            home.username = "alice";
            home.homeDirectory = if pkgs.stdenv.isDarwin then "/Users/alice" else "/home/alice";
          }
          module
        ];
      };
      inherit (eval) config;
      file = config.xdg.configFile."quest-runner/config.json";
      # home-manager leaves unset (null) launchd keys out of the plist.
      plist = lib.filterAttrsRecursive (_: v: v != null) (
        config.launchd.agents.quest-runner.config or { }
      );
    in
    {
      failedAssertions = failedAssertions config;
      warnings = ours config.warnings;
      config = builtins.fromJSON file.source.text;
      configFile = {
        inherit (file) target onChange;
        source = "${file.source}";
      };
      packages = map toString config.home.packages;
    }
    // (
      if pkgs.stdenv.isDarwin then
        {
          launchd = plist;
        }
      else
        {
          service = config.systemd.user.services.quest-runner;
        }
    );

  cases = import ./cases.nix { inherit lib; };

  # nixpkgs.lib.nixosSystem as far as nix/checks.nix uses it, so the flake's checks can be
  # evaluated here too: the stand-ins, and a toplevel that fails on a failed assertion as the
  # real one does.
  nixosSystem =
    { modules }:
    lib.evalModules {
      modules = [
        ./nixos.nix
        (usePackage (pkgsFor "x86_64-linux"))
        (
          { config, ... }:
          {
            options = {
              nixpkgs.hostPlatform = lib.mkOption { type = lib.types.str; };
              boot.loader.grub.enable = lib.mkOption { type = lib.types.bool; };
              fileSystems = lib.mkOption { type = lib.types.attrsOf lib.types.anything; };
              system.stateVersion = lib.mkOption { type = lib.types.str; };
              system.build.toplevel = lib.mkOption { type = lib.types.unspecified; };
            };
            config.system.build.toplevel =
              let
                failed = lib.filter (a: !a.assertion) config.assertions;
              in
              if failed != [ ] then
                throw "Failed assertions:\n${lib.concatMapStrings (a: "- ${a.message}\n") failed}"
              else
                (pkgsFor "x86_64-linux").writeText "nixos-system" (builtins.toJSON config.warnings);
          }
        )
      ]
      ++ modules;
    };

  # A case's checks over what its evaluations read back (`evaluate`: system -> module ->
  # summary): of its `config`, or of each of its `configs` (to compare two evaluations).
  check =
    evaluate: name:
    let
      case = cases.${name} or (throw "nix/eval: no case ${name}");
      on = evaluate (case.system or "x86_64-linux");
      got = if case ? configs then lib.mapAttrs (_: on) case.configs else on case.config;
      failures = lib.filter (c: !c.ok) (case.checks or (_: [ ]) got);
    in
    {
      inherit name;
      ok = failures == [ ];
      failures = map (c: c.what) failures;
      # What the evaluation gave, for a reader of a failure (and for the error cases: forcing
      # it is what fails).
      evaluated = got;
    };

  run = name: check (if cases.${name}.module == "nixos" then nixos else home) name;
in
{
  inherit
    flake
    pkgsFor
    nixosSystem
    cases
    nixos
    home
    summarizeNixos
    check
    run
    ;
  caseNames = lib.attrNames cases;

  # The NixOS module's options as markdown, for `scripts/nixos-options`; tests/suite/flake.rs checks
  # that every option has a description.
  optionsDoc =
    let
      eval = lib.evalModules {
        modules = [
          ./nixos.nix
          flake.nixosModules.default
          (usePackage (pkgsFor "x86_64-linux"))
        ];
      };
      docs = lib.optionAttrSetToDocList eval.options.services.quest-runner;
      shown = lib.filter (o: o.visible && !o.internal) docs;
      text =
        v:
        if v == null then
          ""
        else if builtins.isString v then
          v
        else if v ? text then
          v.text
        else
          builtins.toJSON v;
      field =
        o: name: label:
        lib.optionalString (o ? ${name}) "\n*${label}:*\n```nix\n${text o.${name}}\n```\n";
      one =
        o:
        "## `${o.name}`\n\n${text (o.description or null)}\n\n*Type:* ${o.type}\n"
        + field o "default" "Default"
        + field o "example" "Example";
    in
    "# NixOS module options\n\n"
    + "Generated from the module by `scripts/nixos-options` (nix/eval's `optionsDoc`).\n"
    + "How to use them: docs/nixos-module.md.\n\n"
    + lib.concatMapStringsSep "\n" one shown;
  # The cases whose evaluation must fail, with text the error must contain.
  expectedErrors = lib.mapAttrs (_: c: c.error) (lib.filterAttrs (_: c: c ? error) cases);

  # nix/package.nix with some of its agents replaced: (pkgs: { claude-code = ...; }).
  packageWith =
    system: agents:
    let
      pkgs = pkgsFor system;
    in
    pkgs.callPackage (root + "/nix/package.nix") (
      {
        src = root;
        inherit (pkgs.quest-runner.passthru) claude-code opencode sandbox-runtime;
      }
      // agents pkgs
    );

  # For each system, the version of each agent the package wraps (null: the lock has no
  # binary of it for that system) next to the lock's.
  agentVersions = lib.genAttrs (lib.attrNames flake.packages) (
    system: (pkgsFor system).quest-runner.passthru.agentVersions
  );
}
