# What the NixOS and the home-manager module check alike: the queue's settings, the names of
# Nix options, and every secret file (account files, files an opencode config reads, the
# queue's password file) against the directories the runner refuses them in.
{
  config,
  lib,
  pkgs,
  ...
}:
let
  cfg = config.services.quest-runner;
  ql = import ./lib.nix { inherit lib pkgs; };
  needed = if pkgs.stdenv.hostPlatform.isDarwin then ql.neededDirs.darwin else ql.neededDirs.linux;
in
{
  config = lib.mkIf cfg.enable {
    assertions = ql.assertions cfg ++ ql.accountAssertions cfg needed;
    warnings = ql.accountWarnings cfg;
  };
}
