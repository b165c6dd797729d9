# quest-runner, built from Cargo.lock and wrapped so it finds pinned tools through its
# QUEST_RUNNER_* variables (src/binaries.rs): the operator's PATH is left alone, and a variable
# set by the operator (or the NixOS module) still wins over the pin. git, Nix, bubblewrap and
# socat come from nixpkgs; the agents and srt are the releases npm/package-lock.json pins, the
# ones the tests run (nix/npm-agent.nix, nix/sandbox-runtime.nix), passed in by the flake's
# overlay.
{
  lib,
  stdenv,
  rustPlatform,
  makeBinaryWrapper,
  installShellFiles,
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
  # nixpkgs' own source: its lib/ for the module checks of tests/suite/flake.rs.
  path,
  src,
}:
let
  inherit (stdenv.hostPlatform) isLinux;
  cargo = lib.importTOML ../Cargo.toml;

  # The version of each agent the wrapper pins, next to the lock's: `nix eval
  # .#quest-runner.passthru.agentVersions`. Evaluation fails on a mismatch (an agent passed in
  # from elsewhere, such as nixpkgs' claude-code), and the install check below runs each one.
  lock = import ./npm-lock.nix ../npm/package-lock.json;
  agentVersions =
    lib.mapAttrs
      (name: drv: {
        lock = (lock.agents.${name} or lock.${name}).version;
        # null where the lock holds no binary for this system (nix/npm-agent.nix).
        wrapped = if drv.passthru.available or true then drv.version else null;
      })
      {
        inherit claude-code opencode sandbox-runtime;
      };
  drifted = lib.filterAttrs (_: v: v.wrapped != null && v.wrapped != v.lock) agentVersions;

  # Where the runner starts each agent: on Linux Claude Code through the wrapper made in
  # postInstall.
  agentPaths = {
    claude-code = if isLinux then "$out/libexec/quest-runner/claude" else lib.getExe claude-code;
    opencode = lib.getExe opencode;
    sandbox-runtime = lib.getExe sandbox-runtime;
  };

  # The wrapper's arguments. QUEST_RUNNER_EXE: `quest-runner systemd-unit` writes ExecStart from
  # it; without it the unit would start the unwrapped binary, which has none of these pins. PATH
  # gets ripgrep appended, never prepended: `doctor` and opencode jobs look for rg on the
  # runner's PATH (srt scans deny paths with it), and an operator's own rg still comes first.
  wrapperArgs = [
    "--set-default QUEST_RUNNER_GIT ${git}/bin/git"
    "--set-default QUEST_RUNNER_NIX ${nix}/bin/nix"
    "--set-default QUEST_RUNNER_SRT ${agentPaths.sandbox-runtime}"
    # Runs srt's library for opencode's per-job sandbox (src/jobshell): the node srt runs on.
    "--set-default QUEST_RUNNER_NODE ${lib.getExe nodejs}"
    "--set-default QUEST_RUNNER_OPENCODE ${agentPaths.opencode}"
    "--set-default QUEST_RUNNER_CLAUDE ${agentPaths.claude-code}"
  ]
  ++ lib.optionals isLinux [
    "--set-default QUEST_RUNNER_BWRAP ${bubblewrap}/bin/bwrap"
    "--set-default QUEST_RUNNER_SOCAT ${socat}/bin/socat"
    # The builder of the selftest's own devShells, run by Nix's build sandbox with nothing
    # of the host: statically linked (selftest/src/static_bash.rs).
    "--set-default QUEST_RUNNER_BASH_STATIC ${pkgsStatic.bash}/bin/bash"
  ]
  ++ [
    "--set QUEST_RUNNER_EXE $out/bin/quest-runner"
    "--suffix PATH : ${ripgrep}/bin"
  ];
in
assert lib.assertMsg (drifted == { }) (
  "quest-runner wraps agents at other versions than npm/package-lock.json pins: "
  + lib.concatStringsSep ", " (
    lib.mapAttrsToList (name: v: "${name} ${v.wrapped} (lock: ${v.lock})") drifted
  )
);
rustPlatform.buildRustPackage {
  # The binary's package; the version is the workspace's, which its three packages share.
  pname = cargo.package.name;
  inherit (cargo.workspace.package) version;
  inherit src;

  cargoLock.lockFile = ../Cargo.lock;

  nativeBuildInputs = [
    makeBinaryWrapper
    installShellFiles
  ];

  # Only the unit tests (--lib: of the core and of the boundary suite's crate, the workspace's
  # default members) and the suite's deploy and flake parts (tests/suite/deploy.rs,
  # tests/suite/flake.rs) run inside the Nix build sandbox: those two evaluate the Nix files and
  # modules with this nix and nixpkgs' lib, so `nix flake check` catches what CI does. The other
  # parts of the one test binary (tests/all.rs) are filtered out because the sandbox has none
  # of what they test against:
  #   devshell, devshell_inprocess  need a working `nix` with a store and daemon of its own;
  #   workspace                     needs git over real repositories in a writable HOME;
  #   run_claude, run_opencode, boundary, agents_smoke, serve
  #                                 need bwrap's user, mount, pid and network namespaces,
  #                                 root (for the network namespace of the scripted model)
  #                                 and the npm agents (Claude Code, opencode, srt);
  #   pg_queue, serve_pg            a PostgreSQL server they start (and serve_pg all of the
  #                                 above).
  # scripts/test runs all of them on a real host, and checks.vm-test runs a job through the
  # service on NixOS. tests/suite/deploy.rs prints why it skips what needs systemd-analyze,
  # which the sandbox lacks too.
  #
  # A test filter applies to every binary of one `cargo test`, and would filter the unit tests
  # out too: the hook runs them, then postCheck runs the two parts with the hook's own flags
  # ($argstr: profile, target, --frozen), so nothing is built twice.
  cargoTestFlags = [ "--lib" ];
  postCheck = ''
    cargo test -j "$NIX_BUILD_CORES" $argstr --test all -- suite::deploy:: suite::flake::
  '';
  # git for the unit tests of git objects; node for the syntax check of the opencode plugin;
  # nix (nix-instantiate) for the evaluations of tests/suite/deploy.rs and tests/suite/flake.rs.
  nativeCheckInputs = [
    git
    nodejs
    nix
  ];
  env.QUEST_RUNNER_TEST_NIXPKGS_LIB = "${path}/lib";

  postInstall =
    lib.optionalString isLinux ''
      # A job's Claude Code runs with its own sandbox off (its commands run in the job's srt
      # sandbox: src/agent/claude.rs); bwrap and socat on its PATH serve a Claude Code started
      # outside a job with its sandbox on.
      makeWrapper ${lib.getExe claude-code} $out/libexec/quest-runner/claude \
        --suffix PATH : ${bubblewrap}/bin:${socat}/bin
    ''
    # Completions and the man page, from the binary's own command definition (before the
    # wrapper: they need none of its variables).
    + lib.optionalString (stdenv.buildPlatform.canExecute stdenv.hostPlatform) ''
      installShellCompletion --cmd quest-runner \
        --bash <($out/bin/quest-runner completions bash) \
        --zsh <($out/bin/quest-runner completions zsh) \
        --fish <($out/bin/quest-runner completions fish)
      $out/bin/quest-runner man > quest-runner.1
      installManPage quest-runner.1
    ''
    + ''
      wrapProgram $out/bin/quest-runner ${lib.concatStringsSep " " wrapperArgs}
    '';

  # Each agent as the runner starts it (the paths the wrapper's variables name) reports the
  # version the lock pins.
  doInstallCheck = true;
  installCheckPhase = ''
    runHook preInstallCheck
    export HOME=$TMPDIR
    reports() {
      local reported
      reported=$("$2" --version 2>&1) || { echo "$2 --version failed: $reported" >&2; exit 1; }
      for word in $reported; do [ "$word" = "$3" ] && return; done
      echo "$1: $2 --version says '$reported', but npm/package-lock.json pins $3" >&2
      exit 1
    }
    ${lib.concatStrings (
      lib.mapAttrsToList (
        name: v: lib.optionalString (v.wrapped != null) "reports ${name} ${agentPaths.${name}} ${v.lock}\n"
      ) agentVersions
    )}
    runHook postInstallCheck
  '';

  passthru = {
    # The bwrap the runner and both agents use: the NixOS module attaches the AppArmor
    # profile to this binary.
    bwrap = if isLinux then "${bubblewrap}/bin/bwrap" else null;
    # srt's seccomp helper, which starts every command of a job: the profile lets it (by this
    # exact path) make the command's namespaces.
    applySeccomp =
      if isLinux then
        "${sandbox-runtime}/lib/node_modules/@anthropic-ai/sandbox-runtime/vendor/seccomp/${
          if stdenv.hostPlatform.isAarch64 then "arm64" else "x64"
        }/apply-seccomp"
      else
        null;
    inherit sandbox-runtime claude-code opencode agentVersions;
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
