# What the NixOS module (modules/nixos.nix) and the home-manager module
# (modules/home-manager.nix) compute alike from their options (modules/options.nix): the
# runner's JSON configuration (the `Config` struct of src/config/mod.rs), the unit's shipped
# settings as definitions, and the account files checked against the sandbox policy
# (modules/common.nix).
#
# Usage: ql = import ./lib.nix { inherit lib pkgs; }; then ql.configFile cfg, ...
{ lib, pkgs }:
let
  # An account ({ claude = { ... }; } or { opencode = { ... }; }, modules/options.nix) as one
  # record of every field, the other agent's null, with its agent named.
  flat =
    a:
    let
      agent = lib.head (lib.attrNames a);
    in
    lib.genAttrs fileFields (_: null)
    // {
      inherit agent;
      baseUrl = null;
      config = null;
    }
    // a.${agent};
  accounts = cfg: lib.mapAttrs (_: flat) cfg.accounts;

  # The runner's field names (src/config/), unset fields left out: its accounts refuse
  # unknown fields, and an explicit null would be one for the other agent.
  accountJson =
    a:
    lib.filterAttrs (_: v: v != null) {
      inherit (a) agent model config budget;
      api_key_file = a.apiKeyFile;
      credentials_file = a.credentialsFile;
      auth_file = a.authFile;
      base_url = a.baseUrl;
    };

  fileFields = [
    "apiKeyFile"
    "credentialsFile"
    "authFile"
  ];
  # The account files the agent rewrites (a refreshed login), and so must be able to write.
  rewrittenFields = [
    "credentialsFile"
    "authFile"
  ];

  # Unset settings are left out of the file, as the runner's own defaults. (The one list of
  # attribute sets, events.webhooks, has no optional fields, so lib's filter, which does not
  # enter lists, is enough.)
  withoutNulls = lib.filterAttrsRecursive (_: v: v != null);

  # Whether `path` is `dir` or inside it, component-wise as Rust's Path::starts_with.
  within = dir: path: path == dir || lib.hasPrefix "${lib.removeSuffix "/" dir}/" path;

  # Every string inside a JSON value.
  strings =
    v:
    if builtins.isString v then
      [ v ]
    else if builtins.isAttrs v then
      lib.concatMap strings (lib.attrValues v)
    else if builtins.isList v then
      lib.concatMap strings v
    else
      [ ];
  # The files of opencode's `{file:PATH}` references in `s`.
  fileRefs = s: map lib.head (lib.filter lib.isList (builtins.split "\\{file:([^}]*)}" s));
in
rec {
  inherit withoutNulls within;

  # nix/service-settings.nix's settings as definitions an operator's extend or replace, as
  # nixpkgs' services.github-runners writes its own: a list (SystemCallFilter=,
  # RestrictAddressFamilies=, ...) at normal priority, first, so an operator's entries are
  # added after it (`SystemCallFilter = [ "~@clock" ]` keeps the allow-list and takes @clock
  # from it) and only lib.mkForce replaces it; a scalar as lib.mkDefault, which any setting of
  # the operator's replaces.
  unitDefaults = lib.mapAttrs (_: v: if lib.isList v then lib.mkBefore v else lib.mkDefault v);

  # The tools every job's commands may expect besides their devShell: a shell, the usual
  # text and file utilities, git (the agents commit) and curl.
  basePackages = with pkgs; [
    bashInteractive
    coreutils
    findutils
    diffutils
    gnugrep
    gnused
    gawk
    gnutar
    gzip
    xz
    which
    git
    curl
    ripgrep
  ];

  # The config's `queue` (src/config/postgres.rs QueueConfig), or null for the state directory's own
  # queue. With createLocally (NixOS), the local server's socket, as the service's user, in
  # the database named after it.
  queueJson =
    cfg:
    let
      q = cfg.queue.postgresql;
    in
    if !q.enable then
      null
    else
      withoutNulls {
        postgres =
          if q.createLocally or false then "host=/run/postgresql dbname=${cfg.user} user=${cfg.user}" else q.url;
        password_file = q.passwordFile;
        inherit (q) lease;
      };

  # The runner's config as a Nix value: the settings, the accounts and the queue.
  finalSettings =
    cfg:
    # No `push` at all unless a repository is pushed, nor `metrics` or `events` unless set,
    # as the runner writes its own config.
    withoutNulls (
      removeAttrs cfg.settings (
        lib.optional (cfg.settings.push == { }) "push"
        ++ lib.optional (withoutNulls cfg.settings.metrics == { }) "metrics"
        ++ lib.optional (
          withoutNulls cfg.settings.events == {
            webhooks = [ ];
            command = [ ];
          }
        ) "events"
      )
    )
    // {
      accounts = lib.mapAttrs (_: accountJson) (accounts cfg);
    }
    // lib.optionalAttrs cfg.queue.postgresql.enable { queue = queueJson cfg; };

  configFile = cfg: pkgs.writeText "quest-runner-config.json" (builtins.toJSON (finalSettings cfg));

  # What the runner reads only when it starts — the limits and the queue: the modules restart
  # the service when this changes, where any other change of the config reloads it.
  limitsFile =
    cfg:
    pkgs.writeText "quest-runner-limits.json" (
      builtins.toJSON (
        withoutNulls cfg.settings.limits // lib.optionalAttrs cfg.queue.postgresql.enable { queue = queueJson cfg; }
      )
    );

  assertions =
    cfg:
    lib.optional cfg.queue.postgresql.enable {
      assertion = (cfg.queue.postgresql.createLocally or false) != (cfg.queue.postgresql.url != null);
      message =
        if cfg.queue.postgresql.url == null then
          "services.quest-runner.queue.postgresql: set url (and passwordFile if the server wants a password)${
            lib.optionalString (cfg.queue.postgresql ? createLocally) ", or createLocally = true"
          }."
        else
          "services.quest-runner.queue.postgresql: url and createLocally exclude each other: createLocally makes and uses a database on this host.";
    }
    ++ map (name: {
      # src/config/: a name starting with `-` would be read by nix as a flag.
      assertion = builtins.match "[A-Za-z0-9_][A-Za-z0-9_-]*" name != null;
      message = "services.quest-runner.settings.nix.options: \"${name}\" is not a Nix setting name (letters, digits, `-` and `_`, not starting with `-`).";
    }) (lib.attrNames cfg.settings.nix.options);

  # Every account file: { name, field, option, path, rewritten }.
  accountFiles =
    cfg:
    lib.concatLists (
      lib.mapAttrsToList (
        name: a:
        map (field: {
          inherit name field;
          option = "services.quest-runner.accounts.${name}.${a.agent}.${field}";
          path = a.${field};
          rewritten = lib.elem field rewrittenFields;
        }) (lib.filter (field: a.${field} != null) fileFields)
      ) (accounts cfg)
    );

  # What src/sandbox/private.rs (`needed`) lists: directories jobs' commands need. The runner
  # hides every account file from jobs with the directory that holds it (hidden by its name
  # alone, a file is readable to running jobs again once it is replaced), so it refuses an
  # account file in one of these, or in any directory above one; `tree`: anywhere inside it
  # too. tests/suite/flake.rs checks these lists are the runner's.
  neededDirs =
    let
      tree = path: {
        inherit path;
        tree = true;
      };
      exact = path: {
        inherit path;
        tree = false;
      };
    in
    {
      linux = [
        (tree "/usr")
        (tree "/bin")
        (tree "/sbin")
        (tree "/lib")
        (tree "/lib32")
        (tree "/lib64")
        (tree "/libx32")
        (tree "/nix/store")
        (tree "/nix/var/nix/profiles")
        (exact "/etc")
        (exact "/etc/nix")
        (tree "/etc/ssl/certs")
        (tree "/etc/pki/tls/certs")
        (tree "/etc/pki/ca-trust")
        (tree "/etc/ca-certificates")
        (tree "/etc/static")
        (tree "/etc/profiles")
        (tree "/etc/alternatives")
        (exact "/opt")
        (exact "/var")
        (tree "/run/current-system")
        (tree "/run/booted-system")
        (tree "/run/wrappers")
        (tree "/run/systemd/resolve")
        (tree "/proc")
        (tree "/sys")
        (tree "/dev")
      ];
      darwin = [
        (tree "/System")
        (tree "/usr")
        (tree "/bin")
        (tree "/sbin")
        (tree "/Applications")
        (tree "/Library/Developer")
        (exact "/Library")
        (tree "/nix/store")
        (tree "/nix/var/nix/profiles")
        (tree "/opt/homebrew")
        (tree "/opt/local")
        (exact "/opt")
        (exact "/etc")
        (exact "/private/etc")
        (tree "/private/etc/ssl")
        (tree "/etc/static")
        (tree "/private/etc/static")
        (exact "/var")
        (exact "/private/var")
        (tree "/run/current-system")
        (tree "/private/var/run/current-system")
        (tree "/dev")
      ];
    };

  # The needed directory `dir` is, is above, or is inside (a tree), or null.
  neededAt =
    needed: dir:
    lib.findFirst (n: dir == n.path || within dir n.path || (n.tree && within n.path dir)) null needed;

  # Every account file, every absolute file an opencode account's config reads with
  # `{file:PATH}`, and the queue's password file, as src/config/mod.rs `secret_files` lists them:
  # { at, path }.
  secretFiles =
    cfg:
    lib.optional (cfg.queue.postgresql.enable && cfg.queue.postgresql.passwordFile != null) {
      at = "services.quest-runner.queue.postgresql.passwordFile = ${cfg.queue.postgresql.passwordFile}";
      path = cfg.queue.postgresql.passwordFile;
    }
    ++ map (f: {
      at = "${f.option} = ${f.path}";
      inherit (f) path;
    }) (accountFiles cfg)
    ++ lib.concatLists (
      lib.mapAttrsToList (
        name: a:
        map
          (path: {
            at = "services.quest-runner.accounts.${name}.opencode.config names {file:${path}}";
            inherit path;
          })
          (
            lib.filter (lib.hasPrefix "/") (
              lib.optionals (a.config != null) (lib.concatMap fileRefs (strings a.config))
            )
          )
      ) (accounts cfg)
    );

  # The secret files the runner would refuse to run any job with (src/sandbox/private.rs),
  # judged by their paths: the runner also follows links, which evaluation cannot. `needed` is
  # the platform's list of neededDirs.
  accountAssertions =
    cfg: needed:
    map (
      f:
      let
        dir = dirOf f.path;
        hit = neededAt needed dir;
      in
      {
        assertion = hit == null && !(within "/nix/store" dir);
        message =
          if within "/nix/store" dir then
            "${f.at}: in the Nix store, which every user and every job can read. Keep secrets out of the store (agenix or sops-nix, or a file under ${cfg.stateDir})."
          else
            "${f.at}: its directory ${dir} is one jobs' commands need (${
              if dir == hit.path then hit.path else if within dir hit.path then "above ${hit.path}" else "inside ${hit.path}"
            }), so the sandbox cannot hide it from them, and the runner refuses it: hidden by its name alone, a file is readable to running jobs again as soon as it is replaced (a key rotation, a login refresh). Keep it in a directory that holds only secrets, such as /etc/quest-runner/ or /run/secrets/, or under ${cfg.stateDir}.";
      }
    ) (secretFiles cfg);

  # opencode resolves a relative `{file:...}` against the job's private config directory.
  accountWarnings =
    cfg:
    lib.concatLists (
      lib.mapAttrsToList (
        name: a:
        map
          (
            path:
            "services.quest-runner.accounts.${name}.opencode.config names {file:${path}}, which is not an absolute path: opencode resolves it against the job's private config directory, not yours."
          )
          (
            lib.filter (p: !lib.hasPrefix "/" p) (
              lib.optionals (a.config != null) (lib.concatMap fileRefs (strings a.config))
            )
          )
      ) (accounts cfg)
    );
}
