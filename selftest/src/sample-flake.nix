# The sample repository of `quest-runner selftest`: a devShell whose only input is a static
# bash (src/selftest/static_bash.rs), so it builds offline in Nix's build sandbox, which has
# no /bin/bash. The runner fills in the placeholders and writes the lock.
{
  description = "quest-runner selftest sample";
  inputs.bash = {
    url = "path:@BASH_DIR@";
    flake = false;
  };
  outputs =
    { self, bash }:
    {
      devShells.@SYSTEM@.default = derivation {
        name = "quest-runner-sample-shell";
        system = "@SYSTEM@";
        builder = "${bash}/bin/bash";
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
