# The npm tarballs of one package and its dependencies, read from an npm lockfile (v2 or v3) so
# the Nix package and the test suite use the same pins: a list of { name, version, url, hash },
# the package itself first. npm's `integrity` is already an SRI hash, so fetchurl takes it as
# it is. Only builtins, so tests/deploy.rs can evaluate it without nixpkgs.
{ lockFile, package }:
let
  lock = builtins.fromJSON (builtins.readFile lockFile);

  # Only hoisted entries are handled; a nested one (two versions of a package) fails loudly
  # here rather than fetching the wrong version.
  entry =
    name:
    lock.packages."node_modules/${name}" or (throw "${toString lockFile}: no node_modules/${name}");

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
      hash = e.integrity;
    };

  # Depth first, each package once; optional peer dependencies are not installed by npm
  # either.
  closure =
    seen: name:
    if builtins.elem name seen then
      seen
    else
      builtins.foldl' closure (seen ++ [ name ]) (
        builtins.attrNames ((entry name).dependencies or { })
      );
in
map pin (closure [ ] package)
