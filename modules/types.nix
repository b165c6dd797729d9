# Option types the modules share. Their descriptions are what the module system prints when a
# definition does not fit ("is not of type `...'"), so each says what is wanted and why.
#
# No value written to the runner's configuration may be a Nix path, or a string that carries a
# file copied into the store: `./key`, or "${./key}", would put that file — perhaps a secret —
# in the world-readable Nix store. Store paths of packages ("${pkgs.bash}/bin/sh") are fine.
{ lib }:
let
  inherit (lib) types;

  # Whether `s` names a file copied into the store by a Nix path (its context has a `path`
  # entry), as opposed to a package's output.
  copiesAFile = s: lib.any (c: c.path or false) (lib.attrValues (builtins.getContext s));
in
rec {
  # Text for the runner's configuration.
  text = lib.mkOptionType {
    name = "text";
    description = "string (not a Nix path: a file it names would be copied into the world-readable store)";
    descriptionClass = "noun";
    check = s: builtins.isString s && !copiesAFile s;
    merge = lib.mergeEqualOption;
  };

  # A file the runner or an agent reads at run time: a plain absolute path, never the store.
  runtimePath = lib.mkOptionType {
    name = "runtimePath";
    description = "absolute path as a string, outside the Nix store (a file read at run time; a Nix path would copy it into the world-readable store)";
    descriptionClass = "noun";
    check =
      s:
      builtins.isString s
      && !builtins.hasContext s
      && lib.hasPrefix "/" s
      && !lib.hasPrefix "${builtins.storeDir}/" s;
    merge = lib.mergeEqualOption;
  };

  # Where the PostgreSQL queue is (src/config/postgres.rs): a libpq connection string, a
  # postgresql:// URL or a socket path, without a password (that goes in a file).
  postgres =
    types.addCheck text (
      s:
      builtins.match ".*(^|[[:space:]])password[[:space:]]*=.*" s == null
      && builtins.match "[A-Za-z]+://[^/@]*:[^/@]*@.*" s == null
    )
    // {
      description = "PostgreSQL connection string, URL or socket path without a password (the password goes in passwordFile)";
    };

  # A host jobs may reach (src/sandbox/policy.rs): a name, not a URL.
  host = types.addCheck text (s: builtins.match "[^/[:space:]]+" s != null) // {
    description = "host name (no scheme, path or spaces)";
  };

  # humantime's durations (src/config/ parses default_timeout with it): `30m`, `1h 30m`.
  duration =
    let
      unit = "(nanos|nsec|ns|usec|us|µs|millis|msec|ms|seconds|second|secs|sec|s|minutes|minute|mins|min|m|hours|hour|hrs|hr|h|days|day|d|weeks|week|wks|wk|w|months|month|M|years|year|yrs|yr|y)";
    in
    types.strMatching "[[:space:]]*([0-9]+(\\.[0-9]+)?[[:space:]]*${unit}[[:space:]]*)+"
    // {
      description = "duration such as `30m` or `1h 30m`";
    };

  # Bytes, or a size with a unit (src/serve/limits.rs parse_size): `4G`, `512MiB`.
  size =
    types.either types.ints.positive (
      types.strMatching "[[:space:]]*[0-9]+[[:space:]]*([KkMmGgTt]([Ii]?[Bb])?|[Bb])?[[:space:]]*"
    )
    // {
      description = "size in bytes, or with a unit (`512M`, `4G`)";
    };

  # A size, or `off` for no limit (src/disk/mod.rs: limits.disk, limits.disk_reserve).
  sizeOrOff = types.either size (types.enum [ "off" ]) // {
    description = "size in bytes, or with a unit (`10G`), or `off`";
  };

  # A number of files, or `off` for no limit (src/config/limits.rs Count: limits.disk_files,
  # limits.disk_reserve_files).
  countOrOff = types.either types.ints.positive (types.enum [ "off" ]) // {
    description = "number of files (inodes), or `off`";
  };

  # A share of CPUs (src/serve/limits.rs parse_cpus): 0.001 to 4096.
  cpus = types.addCheck types.number (v: v >= 1.0e-3 && v <= 4096) // {
    description = "number of CPUs between 0.001 and 4096 (`1.5`)";
  };

  # JSON as the runner passes it on (an opencode account's `config`), without Nix paths.
  json =
    types.nullOr (
      types.oneOf [
        types.bool
        types.int
        types.float
        text
        (types.attrsOf json)
        (types.listOf json)
      ]
    )
    // {
      description = "JSON value (no Nix paths)";
    };
}
