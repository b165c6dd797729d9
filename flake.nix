{
  description = "quest-runner: AI coding-agent jobs on a pinned revision, in an OS sandbox, with that revision's own Nix devShell";

  # The only input: bubblewrap, socat, git, Nix and the toolchain. Claude Code, opencode and srt
  # are not taken from it but built from npm/package-lock.json, the releases the tests run
  # (nix/npm-agent.nix, nix/sandbox-runtime.nix).
  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-25.11";

  outputs =
    { self, nixpkgs }:
    let
      inherit (nixpkgs) lib;

      systems = [
        "x86_64-linux"
        "aarch64-linux"
        "x86_64-darwin"
        "aarch64-darwin"
      ];

      pkgsFor = lib.genAttrs systems (
        system:
        import nixpkgs {
          inherit system;
          # Claude Code is unfree: allow that one package, the one built from the lock, and
          # nothing else (not even nixpkgs' claude-code).
          config.allowUnfreePredicate =
            pkg:
            lib.getName pkg == "claude-code"
            && (pkg.passthru.npmPackage or null) == "@anthropic-ai/claude-code";
          overlays = [ self.overlays.default ];
        }
      );

      forAllSystems = f: lib.genAttrs systems (system: f pkgsFor.${system});

      # What the Rust build reads, and what tests/suite/deploy.rs checks; not the README or scripts,
      # so editing those does not rebuild.
      src = lib.fileset.toSource {
        root = ./.;
        fileset = lib.fileset.unions [
          ./Cargo.toml
          ./Cargo.lock
          ./core/Cargo.toml
          ./selftest
          ./src
          ./tests
          ./benches
          ./nix
          ./modules
          ./flake.nix
          ./flake.lock
          ./npm/package-lock.json
        ];
      };

      # Every .nix file nixfmt checks and formats. selftest/src/sample-flake.nix is left out:
      # it is a template, Nix only once quest-runner substitutes its @SYSTEM@.
      nixFiles = map (path: lib.removePrefix "${toString ./.}/" (toString path)) (
        lib.fileset.toList (
          lib.fileset.intersection (lib.fileset.fileFilter (file: file.hasExt "nix") ./.) (
            lib.fileset.unions [
              ./flake.nix
              ./modules
              ./nix
            ]
          )
        )
      );
    in
    {
      # Adds quest-runner only: the agents it pins are its own (passthru), so nixpkgs'
      # claude-code, opencode and sandbox-runtime stay what they are for everything else.
      overlays.default = final: _prev: {
        quest-runner = final.callPackage ./nix/package.nix {
          inherit src;
          claude-code = final.callPackage ./nix/npm-agent.nix { agent = "claude-code"; };
          opencode = final.callPackage ./nix/npm-agent.nix { agent = "opencode"; };
          sandbox-runtime = final.callPackage ./nix/sandbox-runtime.nix { };
        };
      };

      packages = forAllSystems (pkgs: {
        default = pkgs.quest-runner;
        quest-runner = pkgs.quest-runner;
        runner = pkgs.quest-runner;
        inherit (pkgs.quest-runner.passthru) claude-code opencode sandbox-runtime;
      });

      # nix run .#runner -- doctor
      apps = forAllSystems (
        pkgs:
        let
          runner = {
            type = "app";
            program = lib.getExe pkgs.quest-runner;
            meta.description = "quest-runner with its pinned sandbox and agents";
          };
        in
        {
          inherit runner;
          default = runner;
        }
      );

      nixosModules.default =
        { lib, pkgs, ... }:
        {
          _file = "${self}/flake.nix#nixosModules.default";
          imports = [ ./modules/nixos.nix ];
          services.quest-runner.package =
            lib.mkDefault
              self.packages.${pkgs.stdenv.hostPlatform.system}.default;
        };

      homeModules.default =
        { lib, pkgs, ... }:
        {
          _file = "${self}/flake.nix#homeModules.default";
          imports = [ ./modules/home-manager.nix ];
          services.quest-runner.package =
            lib.mkDefault
              self.packages.${pkgs.stdenv.hostPlatform.system}.default;
        };
      # The name home-manager documentation and most configurations still use.
      homeManagerModules = self.homeModules;

      devShells = forAllSystems (pkgs: {
        default = pkgs.mkShell {
          inputsFrom = [ pkgs.quest-runner ];
          packages =
            with pkgs;
            [
              cargo
              clippy
              rustfmt
              rust-analyzer
              git
              nix
              nodejs
              ripgrep
              nixfmt
              quest-runner.passthru.sandbox-runtime
            ]
            ++ lib.optionals stdenv.hostPlatform.isLinux [
              bubblewrap
              socat
              apparmor-parser
            ];
        };
      });

      # `nix fmt`: nixfmt over the same files the nixfmt check covers.
      formatter = forAllSystems (
        pkgs:
        pkgs.writeShellApplication {
          name = "quest-runner-nixfmt";
          runtimeInputs = [ pkgs.nixfmt ];
          text = ''
            if [ "$#" -eq 0 ] || [ "$*" = . ]; then
              set -- ${lib.escapeShellArgs nixFiles}
            fi
            exec nixfmt "$@"
          '';
        }
      );

      checks = forAllSystems (
        pkgs:
        import ./nix/checks.nix {
          inherit
            pkgs
            lib
            self
            nixpkgs
            nixFiles
            ;
        }
      );
    };
}
