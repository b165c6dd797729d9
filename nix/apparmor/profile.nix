# The AppArmor profile for one bwrap binary, from the template `quest-runner apparmor-profile`
# renders too (src/deploy/apparmor.rs): pass the absolute path of the bwrap to confine, e.g.
# "${pkgs.bubblewrap}/bin/bwrap". Only builtins, so tests/suite/deploy.rs can evaluate it without
# nixpkgs.
bwrap:
builtins.replaceStrings [ "@bwrap@" ] [ bwrap ] (builtins.readFile ./quest-runner-bwrap.in)
