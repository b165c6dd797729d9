# The sample repository of `quest-runner selftest`: a devShell with no inputs, so it builds
# offline with nothing but Nix and /bin/bash.
{
  description = "quest-runner selftest sample";
  outputs = { self }: {
    devShells.@SYSTEM@.default = derivation {
      name = "quest-runner-sample-shell";
      system = "@SYSTEM@";
      builder = "/bin/bash";
      outputs = [ "out" ];
      args = [ "-c" "echo sample > $out" ];
      SAMPLE_GREETING = "hello from the sample devShell";
      shellHook = ''
        sample_greet() { echo "$SAMPLE_GREETING"; }
      '';
    };
  };
}
