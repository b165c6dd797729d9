# The sample repository of `quest-runner selftest`: a devShell built by a static bash the
# repository carries in builder/ (selftest/src/static_bash.rs), so it builds offline in Nix's
# build sandbox, which has no /bin/bash. The runner fills in the placeholder and the lock.
{
  description = "quest-runner selftest sample";
  outputs =
    { self }:
    {
      devShells.@SYSTEM@.default = derivation {
        name = "quest-runner-sample-shell";
        system = "@SYSTEM@";
        builder = "${./builder}/bin/bash";
        outputs = [ "out" ];
        args = [
          "-c"
          "echo sample > $out"
        ];
        SAMPLE_GREETING = "hello from the sample devShell";
        shellHook = ''
          sample_greet() { echo "$SAMPLE_GREETING"; }
        '';
      };
    };
}
