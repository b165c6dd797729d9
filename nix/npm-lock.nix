# What npm/package-lock.json (v2 or v3) pins, for the Nix packages built from it, so the
# flake and the test suite run the same npm releases (one lock, one truth). Only builtins, so
# tests/suite/deploy.rs can evaluate it without nixpkgs.
#
#   lock = import ./npm-lock.nix ../npm/package-lock.json;
#   lock.closure "@anthropic-ai/sandbox-runtime"   # [ pin ], the package first, then its deps
#   lock.agents.opencode.binaries.x86_64-linux      # pin of its native binary, or null
#
# A pin is { name, version, url, hash }: npm's `integrity` is already an SRI hash, so fetchurl
# takes it as it is.
lockFile:
let
  lock = builtins.fromJSON (builtins.readFile lockFile);
  where = toString lockFile;

  # Only hoisted entries are handled; a nested one (two versions of a package) fails loudly
  # here rather than fetching the wrong version.
  entry =
    name: lock.packages."node_modules/${name}" or (throw "${where}: no node_modules/${name}");
  has = name: lock.packages ? "node_modules/${name}";

  # The tarball is named after the package without its scope: @scope/name -> name-1.0.0.tgz.
  unscoped =
    name:
    let
      parts = builtins.split "/" name;
    in
    builtins.elemAt parts (builtins.length parts - 1);

  pin =
    name:
    let
      e = entry name;
    in
    {
      inherit name;
      inherit (e) version;
      url = "https://registry.npmjs.org/${name}/-/${unscoped name}-${e.version}.tgz";
      hash = e.integrity or (throw "${where}: node_modules/${name} has no integrity hash");
    };

  # Depth first, each package once; optional peer dependencies are not installed by npm
  # either.
  closureFrom =
    seen: name:
    if builtins.elem name seen then
      seen
    else
      builtins.foldl' closureFrom (seen ++ [ name ]) (
        builtins.attrNames ((entry name).dependencies or { })
      );

  # The agents ship one native executable per platform, each in an optional npm package of its
  # own (`<prefix>-<os>-<cpu>`, what their install scripts pick); the main package holds none.
  # Keyed by Nix system. A system the lock has no entry for maps to null: npm records only
  # the platform packages its registry served when the lock was made.
  nodePlatforms = {
    x86_64-linux = "linux-x64";
    aarch64-linux = "linux-arm64";
    x86_64-darwin = "darwin-x64";
    aarch64-darwin = "darwin-arm64";
  };
  agent =
    {
      package,
      prefix,
      # The executable's path inside its platform package.
      executable,
    }:
    let
      main = entry package;
      binary =
        platform:
        let
          name = "${prefix}-${platform}";
          e = entry name;
        in
        if !has name then
          null
        # The build fails when the lock pins a platform binary of another release than the
        # package itself: the version would drift from the one the tests ran.
        else if e.version != main.version then
          throw "${where}: ${name} is ${e.version} but ${package} is ${main.version}; run `npm install` in npm/ again"
        else if (main.optionalDependencies.${name} or null) != main.version then
          throw "${where}: ${package} ${main.version} does not name ${name} ${main.version} among its optionalDependencies"
        else
          pin name;
    in
    {
      inherit package executable;
      inherit (main) version;
      binaries = builtins.mapAttrs (_: binary) nodePlatforms;
    };
in
{
  inherit pin;
  closure = name: map pin (closureFrom [ ] name);

  agents = {
    claude-code = agent {
      package = "@anthropic-ai/claude-code";
      prefix = "@anthropic-ai/claude-code";
      executable = "claude";
    };
    opencode = agent {
      package = "opencode-ai";
      prefix = "opencode";
      executable = "bin/opencode";
    };
  };

  sandbox-runtime = {
    inherit (entry "@anthropic-ai/sandbox-runtime") version;
  };
}
