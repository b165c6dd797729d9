# srt (@anthropic-ai/sandbox-runtime): the sandbox opencode's commands run in.
#
# Always packaged here from the npm release pinned in npm/package-lock.json, the version the
# test suite runs against, with the lockfile's integrity hashes — never nixpkgs' own
# sandbox-runtime (master has one since March 2026, PR #504139; nixos-25.11 has none, and its
# `srt` attribute is an unrelated video transport library), whose version the tests never saw.
# The npm tarballs are already built (dist/ is JavaScript; vendor/ holds static apply-seccomp
# binaries), so nothing is compiled: the tarballs are unpacked into one node_modules tree and
# srt is wrapped with what it runs.
{
  lib,
  stdenvNoCC,
  fetchurl,
  makeBinaryWrapper,
  nodejs,
  ripgrep,
  which,
  bubblewrap,
  socat,
}:
let
  pins = (import ./npm-lock.nix ../npm/package-lock.json).closure "@anthropic-ai/sandbox-runtime";
  srt = builtins.head pins;
  dependencies = builtins.tail pins;
  tarball = pin: fetchurl { inherit (pin) url hash; };

  # srt starts these by name: rg (deny-path scan), which, and on Linux bwrap and socat (the
  # sandbox and its network bridge). node too, for its helpers.
  runtimePath = [
    nodejs
    ripgrep
    which
  ]
  ++ lib.optionals stdenvNoCC.hostPlatform.isLinux [
    bubblewrap
    socat
  ];
in
assert lib.assertMsg (lib.versionAtLeast nodejs.version "22.12") "srt needs Node.js >= 22.12";
stdenvNoCC.mkDerivation {
  pname = "sandbox-runtime";
  inherit (srt) version;

  src = tarball srt;

  nativeBuildInputs = [ makeBinaryWrapper ];

  dontConfigure = true;
  dontBuild = true;
  # vendor/seccomp/*/apply-seccomp are static, already stripped binaries: keep them exactly as
  # published.
  dontStrip = true;

  installPhase = ''
    runHook preInstall

    pkg=$out/lib/node_modules/${srt.name}
    mkdir -p "$pkg"
    cp -r . "$pkg"
    ${lib.concatMapStrings (dep: ''
      mkdir -p "$pkg/node_modules/${dep.name}"
      tar -xzf ${tarball dep} -C "$pkg/node_modules/${dep.name}" --strip-components=1
    '') dependencies}

    # dist/cli.js starts with `#!/usr/bin/env node`: run it with this node instead.
    makeWrapper ${lib.getExe nodejs} $out/bin/srt \
      --add-flags "$pkg/dist/cli.js" \
      --prefix PATH : ${lib.makeBinPath runtimePath}

    runHook postInstall
  '';

  doInstallCheck = true;
  installCheckPhase = ''
    runHook preInstallCheck
    HOME=$TMPDIR $out/bin/srt --version | grep -F ${srt.version}
    runHook postInstallCheck
  '';

  meta = {
    description = "Anthropic's sandbox runtime (srt): OS-level filesystem and network restrictions for a process";
    homepage = "https://github.com/anthropic-experimental/sandbox-runtime";
    license = lib.licenses.asl20;
    mainProgram = "srt";
    # The JavaScript is tsc output; apply-seccomp is a prebuilt binary.
    sourceProvenance = with lib.sourceTypes; [
      binaryBytecode
      binaryNativeCode
    ];
    platforms = lib.platforms.linux ++ lib.platforms.darwin;
  };
}
