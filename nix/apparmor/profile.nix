# The AppArmor profile for one bwrap binary, srt's seccomp helper and the nix-daemon a job's
# devShell is built by, from the template `quest-runner apparmor-profile` renders too
# (src/deploy/apparmor.rs): pass their absolute, canonical paths, e.g. the package's
# passthru.bwrap and passthru.applySeccomp, and the nix-daemon's resolved file. Only builtins,
# so tests/suite/deploy.rs can evaluate it without nixpkgs.
{
  bwrap,
  applySeccomp,
  nixDaemon,
}:
builtins.replaceStrings [ "@bwrap@" "@apply_seccomp@" "@nix_daemon@" ] [ bwrap applySeccomp nixDaemon ] (
  builtins.readFile ./quest-runner-bwrap.in
)
