# One agent's native executable, Claude Code or opencode, exactly as npm/package-lock.json pins
# it: the platform package npm installs on this system (`@anthropic-ai/claude-code-linux-x64`,
# `opencode-darwin-arm64`, ...), fetched with the lock's integrity hash. These are the bytes
# the test suite and the boundary suite run (npm/node_modules), so the flake ships the
# versions the tests prove rather than whatever nixpkgs carries.
#
# Each is a Bun single-file executable. On Linux it is made to run from the store (interpreter
# and RPATH) and nothing else is touched: stripping would drop the JavaScript Bun keeps inside
# it. The build fails if the lock's entries disagree (nix/npm-lock.nix) or if the executable
# does not report the locked version.
#
# A system whose platform package the lock does not hold (npm records only what its registry
# served when the lock was made) gets a stand-in that refuses to run and says so: the runner
# still builds there for the other agent, and never picks up an unpinned copy on its own.
{
  lib,
  stdenv,
  fetchurl,
  autoPatchelfHook,
  python3,
  runCommand,
  # "claude-code" or "opencode": an attribute of (import ./npm-lock.nix ...).agents.
  agent,
}:
let
  inherit (stdenv.hostPlatform) system isLinux isDarwin;
  pins = (import ./npm-lock.nix ../npm/package-lock.json).agents.${agent};
  binary = pins.binaries.${system} or null;
  executable = baseNameOf pins.executable;

  meta = {
    mainProgram = executable;
    sourceProvenance = [ lib.sourceTypes.binaryNativeCode ];
    platforms = builtins.attrNames (lib.filterAttrs (_: b: b != null) pins.binaries);
  }
  // {
    claude-code = {
      description = "Claude Code, Anthropic's coding agent, at the release npm/package-lock.json pins";
      homepage = "https://github.com/anthropics/claude-code";
      # The flake allows this one unfree licence, for this package only (flake.nix).
      license = lib.licenses.unfree;
    };
    opencode = {
      description = "opencode, the open-source coding agent, at the release npm/package-lock.json pins";
      homepage = "https://github.com/sst/opencode";
      license = lib.licenses.mit;
    };
  }
  .${agent};

  passthru = {
    npmPackage = pins.package;
    lockVersion = pins.version;
    # False for the stand-in of a system the lock has no binary for.
    available = binary != null;
  };

  absent =
    runCommand "${agent}-absent-${pins.version}"
      {
        inherit passthru;
        # A script of this project's, not the agent: neither its licence, its provenance nor
        # its platforms (it is for the others).
        meta = removeAttrs meta [
          "license"
          "sourceProvenance"
          "platforms"
        ]
        // {
          description = "${meta.description} (not pinned for ${system})";
        };
      }
      ''
        mkdir -p $out/bin
        cat >$out/bin/${executable} <<'EOF'
        #!/bin/sh
        echo "quest-runner was built without ${agent} for ${system}: npm/package-lock.json pins ${pins.package} ${pins.version} but no native binary of it for this platform (the registry the lock was made against served none). Regenerate npm/package-lock.json against registry.npmjs.org, or set QUEST_RUNNER_${lib.toUpper (lib.head (lib.splitString "-" agent))} to a ${agent} ${pins.version}." >&2
        exit 127
        EOF
        chmod +x $out/bin/${executable}
      '';
in
if binary == null then
  absent
else
  stdenv.mkDerivation {
    pname = agent;
    inherit (pins) version;

    src = fetchurl {
      inherit (binary) url hash;
      name = "${baseNameOf binary.name}-${binary.version}.tgz";
    };
    sourceRoot = "package";

    nativeBuildInputs = lib.optionals isLinux [
      autoPatchelfHook
      python3
    ];

    dontConfigure = true;
    dontBuild = true;
    # Bun keeps the program's JavaScript in the executable: stripped, it is a bare Bun.
    dontStrip = true;
    # Run by hand below, so the DT_VERDEF repair comes after it.
    dontAutoPatchelf = true;

    installPhase = ''
      runHook preInstall
      install -Dm755 ${pins.executable} $out/bin/${executable}
      runHook postInstall
    '';

    postFixup = lib.optionalString isLinux ''
      autoPatchelf $out/bin/${executable}
      python3 ${./fix-dt-verdef.py} $out/bin/${executable}
    '';

    # nixpkgs' own claude-code needs the host outside the sandbox to report its version on
    # macOS; the same here.
    __noChroot = isDarwin && agent == "claude-code";

    doInstallCheck = true;
    installCheckPhase = ''
      runHook preInstallCheck
      reported=$(HOME=$TMPDIR $out/bin/${executable} --version)
      case "$reported" in
        ${pins.version} | "${pins.version} "*) ;;
        *)
          echo "$out/bin/${executable} --version says '$reported', but npm/package-lock.json pins ${pins.version}" >&2
          exit 1
          ;;
      esac
      runHook postInstallCheck
    '';

    inherit passthru meta;
  }
