# quest-runner, built from Cargo.lock and wrapped so it finds pinned tools from the same
# nixpkgs through its QUEST_RUNNER_* variables (src/binaries.rs): the operator's PATH is left
# alone, and a variable set by the operator (or the NixOS module) still wins over the pin.
{
  lib,
  stdenv,
  rustPlatform,
  makeBinaryWrapper,
  git,
  nix,
  bubblewrap,
  socat,
  ripgrep,
  nodejs,
  claude-code,
  opencode,
  sandbox-runtime,
  pkgsStatic,
  src,
}:
let
  inherit (stdenv.hostPlatform) isLinux;
  cargo = lib.importTOML ../Cargo.toml;

  # The wrapper's arguments. QUEST_RUNNER_EXE: `quest-runner systemd-unit` writes ExecStart from
  # it; without it the unit would start the unwrapped binary, which has none of these pins. PATH
  # gets ripgrep appended, never prepended: `doctor` and opencode jobs look for rg on the
  # runner's PATH (srt scans deny paths with it), and an operator's own rg still comes first.
  wrapperArgs = [
    "--set-default QUEST_RUNNER_GIT ${git}/bin/git"
    "--set-default QUEST_RUNNER_NIX ${nix}/bin/nix"
    "--set-default QUEST_RUNNER_SRT ${sandbox-runtime}/bin/srt"
    "--set-default QUEST_RUNNER_OPENCODE ${opencode}/bin/opencode"
  ]
  ++ (
    if isLinux then
      [
        "--set-default QUEST_RUNNER_CLAUDE $out/libexec/quest-runner/claude"
        "--set-default QUEST_RUNNER_BWRAP ${bubblewrap}/bin/bwrap"
        "--set-default QUEST_RUNNER_SOCAT ${socat}/bin/socat"
        # The builder of the selftest's own devShells, run by Nix's build sandbox with nothing
        # of the host: statically linked (src/selftest/static_bash.rs).
        "--set-default QUEST_RUNNER_BASH_STATIC ${pkgsStatic.bash}/bin/bash"
      ]
    else
      [ "--set-default QUEST_RUNNER_CLAUDE ${claude-code}/bin/claude" ]
  )
  ++ [
    "--set QUEST_RUNNER_EXE $out/bin/quest-runner"
    "--suffix PATH : ${ripgrep}/bin"
  ];
in
rustPlatform.buildRustPackage {
  pname = cargo.package.name;
  inherit (cargo.package) version;
  inherit src;

  cargoLock.lockFile = ../Cargo.lock;

  nativeBuildInputs = [ makeBinaryWrapper ];

  # Only the unit tests (--lib) and tests/deploy.rs run inside the Nix build sandbox. The other
  # integration tests are skipped because the sandbox has none of what they test against:
  #   devshell, devshell_inprocess  need a working `nix` with a store and daemon of its own;
  #   workspace                     needs git over real repositories in a writable HOME;
  #   run_claude, run_opencode, boundary, agents_smoke, serve
  #                                 need bwrap's user, mount, pid and network namespaces,
  #                                 root (for the network namespace of the scripted model)
  #                                 and the npm agents (Claude Code, opencode, srt).
  # scripts/test runs all of them on a real host, and checks.vm-test runs a job through the
  # service on NixOS. tests/deploy.rs prints why it skips what needs nix-instantiate or
  # systemd-analyze, which the sandbox lacks too.
  cargoTestFlags = [
    "--lib"
    "--test"
    "deploy"
  ];
  # git for the unit tests of git objects; node for the syntax check of the opencode plugin.
  nativeCheckInputs = [
    git
    nodejs
  ];

  postInstall =
    lib.optionalString isLinux ''
      # Claude Code's sandbox starts bwrap and socat by name: give the agent (and only the
      # agent) the same bwrap the runner uses, the one the AppArmor profile is attached to.
      makeWrapper ${claude-code}/bin/claude $out/libexec/quest-runner/claude \
        --prefix PATH : ${bubblewrap}/bin:${socat}/bin
    ''
    + ''
      wrapProgram $out/bin/quest-runner ${lib.concatStringsSep " " wrapperArgs}
    '';

  passthru = {
    # The bwrap the runner and both agents use: the NixOS module attaches the AppArmor
    # profile to this binary.
    bwrap = if isLinux then "${bubblewrap}/bin/bwrap" else null;
    inherit sandbox-runtime claude-code opencode;
  };

  meta = {
    inherit (cargo.package) description;
    license = with lib.licenses; [
      mit
      asl20
    ];
    mainProgram = "quest-runner";
    platforms = lib.platforms.linux ++ lib.platforms.darwin;
  };
}
