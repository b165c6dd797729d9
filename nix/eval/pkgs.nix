# A stand-in for the nixpkgs attributes the modules and the package files use, so both evaluate
# without nixpkgs: tests/suite/deploy.rs here, and the flake's checks for the home-manager module.
# Every package is a fake derivation — an attribute set with the type, name, store path,
# passthru and meta a real one has — and nothing can be built. Builders keep what they were
# given (a written file keeps its text), so evaluations can be inspected.
{
  lib,
  system,
  overlays ? [ ],
}:
let
  hostPlatform = lib.systems.elaborate system;

  # A real derivation (its paths computed, never built: nothing can build it), so strings made
  # from it carry the context of a package's output as they would with nixpkgs.
  fake =
    name: attrs:
    let
      drv = derivation {
        inherit name system;
        builder = "/nix/eval/stand-in";
        # Another text or source, another path: a changed config file is seen as changed.
        seed = "${attrs.version or ""}${attrs.text or ""}${attrs.url or ""}${attrs.buildCommand or ""}";
      };
    in
    attrs
    // (attrs.passthru or { })
    // {
      inherit (drv)
        type
        name
        system
        outPath
        drvPath
        outputs
        out
        ;
      meta = attrs.meta or { };
      passthru = attrs.passthru or { };
    };

  # mkDerivation, accepting the `finalAttrs:` form too.
  mkDerivation =
    f:
    let
      attrs = if builtins.isFunction f then f attrs else f;
    in
    fake (attrs.name or "${attrs.pname}-${attrs.version}") attrs;

  package =
    pname: version:
    fake "${pname}-${version}" {
      inherit pname version;
      meta.mainProgram = pname;
    };

  writeText = name: text: fake name { inherit text; };

  stdenv = {
    inherit hostPlatform mkDerivation;
    buildPlatform = hostPlatform // {
      canExecute = _: true;
    };
    inherit (hostPlatform) isLinux isDarwin;
    cc = package "cc" "14";
  };

  base = final: {
    inherit lib system stdenv;
    path = "/nixpkgs";
    stdenvNoCC = stdenv;
    callPackage = lib.callPackageWith final;

    fetchurl = args: fake (args.name or (baseNameOf args.url)) args;
    runCommand = name: env: script: fake name (env // { buildCommand = script; });
    inherit writeText;
    writeShellScriptBin = name: text: fake name { inherit text; };
    rustPlatform.buildRustPackage = mkDerivation;
    formats.json =
      { }:
      {
        type =
          let
            value =
              with lib.types;
              nullOr (oneOf [
                bool
                int
                float
                str
                path
                (attrsOf value)
                (listOf value)
              ]);
          in
          value;
        generate = name: value: writeText name (builtins.toJSON value);
      };

    # Hooks and tools the package files name; only their presence matters here.
    makeBinaryWrapper = package "make-binary-wrapper" "0";
    installShellFiles = package "install-shell-files" "0";
    autoPatchelfHook = package "auto-patchelf-hook" "0";
    python3 = package "python3" "3.13";
    nodejs = package "nodejs" "22.12.0";
    nix = package "nix" "2.31";
    git = package "git" "2.51";
    bubblewrap = package "bubblewrap" "0.11.0" // {
      meta.mainProgram = "bwrap";
    };
    socat = package "socat" "1.8";
    ripgrep = package "ripgrep" "14.1" // {
      meta.mainProgram = "rg";
    };
    which = package "which" "2.23";
    coreutils = package "coreutils" "9.8";
    bashInteractive = package "bash-interactive" "5.3";
    findutils = package "findutils" "4.10";
    diffutils = package "diffutils" "3.12";
    gnugrep = package "gnugrep" "3.12";
    gnused = package "gnused" "4.9";
    gawk = package "gawk" "5.3";
    gnutar = package "gnutar" "1.35";
    gzip = package "gzip" "1.14";
    xz = package "xz" "5.8";
    curl = package "curl" "8.16";
    jq = package "jq" "1.8";
    pkgsStatic.bash = package "bash-static" "5.3";
  };
in
lib.fix (lib.extends (lib.composeManyExtensions overlays) base)
