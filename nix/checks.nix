# checks.<system>: what `nix flake check` builds. The package (with its unit tests and
# tests/suite/deploy.rs and tests/suite/flake.rs, which evaluate the modules and package with nix), clippy,
# rustfmt, nixfmt, the module cases of nix/eval/cases.nix against the real NixOS, the agents'
# versions, and on Linux the NixOS VM test (nix/vm-test.nix).
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

  # Passes when every check holds, as a file of what was evaluated: the check costs an
  # evaluation and no builds of what it names.
  evaluated =
    name: failures: value:
    if failures != [ ] then
      throw "${name}:\n  ${lib.concatStringsSep "\n  " failures}"
    else
      pkgs.writeText name (builtins.unsafeDiscardStringContext (builtins.toJSON value));

  # nix/eval: the cases of nix/eval/cases.nix and the home-manager stand-ins (home-manager is
  # not an input of this flake: every user of the flake would fetch it).
  eval = import ./eval {
    inherit lib;
    root = self.outPath;
  };

  # The NixOS cases against the real NixOS of the flake's nixpkgs, not the stand-ins.
  nixosSystem =
    caseSystem: module:
    nixpkgs.lib.nixosSystem {
      modules = [
        self.nixosModules.default
        {
          nixpkgs.hostPlatform = caseSystem;
          boot.loader.grub.enable = false;
          fileSystems."/".device = "/dev/null";
          system.stateVersion = "25.11";
        }
        module
      ];
    };
  realNixos = caseSystem: module: eval.summarizeNixos (nixosSystem caseSystem module).config;

  # Every case; an error case must fail to evaluate (its text is checked by tests/suite/flake.rs,
  # which the package's check phase runs).
  caseResult =
    name:
    let
      case = eval.cases.${name};
      result = eval.check (if case.module == "nixos" then realNixos else eval.home) name;
    in
    if case ? error then
      {
        inherit name;
        ok = !(builtins.tryEval (builtins.deepSeq result.evaluated true)).success;
        failures = [ "evaluates, but must fail: ${case.error}" ];
      }
    else
      result;
  cases = map caseResult eval.caseNames;
  typical = nixosSystem system eval.cases.nixos-typical.config;
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

  # The modules, case by case (nix/eval/cases.nix): typos, Nix paths and unusable account
  # files refused with an error naming them, warnings that match the sandbox policy, the units
  # and config files right. And the typical system evaluates as a whole.
  modules =
    evaluated "quest-runner-modules"
      (lib.concatMap (r: lib.optionals (!r.ok) (map (f: "${r.name}: ${f}") r.failures)) cases)
      {
        cases = map (r: r.name) cases;
        toplevel = if isLinux then typical.config.system.build.toplevel.drvPath else null;
      };

  # The agents the package wraps, next to npm/package-lock.json's (evaluating it fails on a
  # mismatch); `nix eval .#quest-runner.passthru.agentVersions` prints the same.
  agent-versions = evaluated "quest-runner-agent-versions" [ ] package.passthru.agentVersions;
}
// lib.optionalAttrs isLinux {
  vm-test = import ./vm-test.nix { inherit pkgs self; };
}
