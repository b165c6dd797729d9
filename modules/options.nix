# What the NixOS module (modules/nixos.nix) and the home-manager module
# (modules/home-manager.nix) share: their common options, how both turn those options into the
# runner's JSON configuration (the `Config` struct of src/config.rs), and the checks of an
# operator's accounts against the sandbox policy.
#
# Usage: shared = import ./options.nix { inherit lib pkgs; }; then
#   options.services.quest-runner = shared.options { defaultStateDir = ...; ... };
#   imports = shared.imports;
{ lib, pkgs }:
let
  inherit (lib) mkOption types;
  t = import ./types.nix { inherit lib; };

  # A file the runner or the agent reads at run time: a string, never a Nix path, which would
  # copy the secret into the world-readable store.
  secretFile =
    description:
    mkOption {
      type = types.nullOr t.runtimePath;
      default = null;
      inherit description;
    };

  account = types.submodule {
    options = {
      agent = mkOption {
        type = types.enum [
          "claude"
          "opencode"
        ];
        description = "The agent this account logs in.";
      };
      apiKeyFile = secretFile ''
        Claude Code: a file holding an API key. The runner's model gateway reads it and puts it
        on each request; Claude Code itself only gets a job token.
      '';
      credentialsFile = secretFile ''
        Claude Code: the `.credentials.json` of a `/login`. The runner holds it and refreshes
        it, writing it back, so it must be a writable file of the service's user (e.g. under
        the state directory).
      '';
      authFile = secretFile ''
        opencode: its `auth.json` (from `opencode auth login`). Entries of type `api` are
        served by the runner's model gateway; OAuth entries are linked into the job for opencode,
        which refreshes them, so it must be writable by the service's user.
      '';
      baseUrl = mkOption {
        type = types.nullOr t.text;
        default = null;
        description = "Claude Code: the API endpoint the runner's model gateway forwards to (default: Anthropic's API).";
      };
      model = mkOption {
        type = types.nullOr t.text;
        default = null;
        description = "The model (opencode: `provider/model`).";
      };
      budget = mkOption {
        type = types.nullOr types.ints.positive;
        default = null;
        description = ''
          Tokens per UTC day across every job of this account, counted by the runner's model
          gateway in the state directory (shared by every runner of it). A request past it is
          refused and its job ends with `limit_fired = "tokens"`.
        '';
      };
      config = mkOption {
        type = types.nullOr t.json;
        default = null;
        description = ''
          opencode: configuration merged under the runner's own (only `provider`, `model`,
          `small_model`, `enabled_providers` and `disabled_providers` are taken). May name
          secret files with opencode's `{file:...}` syntax (absolute paths); never holds
          secrets itself.
        '';
      };
    };
  };

  # The runner's field names (src/config.rs), unset fields left out: its accounts refuse
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

  # Fields each agent's account accepts (ClaudeAccount and OpencodeAccount in src/config.rs).
  accountFields = {
    claude = [
      "apiKeyFile"
      "credentialsFile"
      "baseUrl"
      "model"
      "budget"
    ];
    opencode = [
      "authFile"
      "model"
      "config"
      "budget"
    ];
  };
  optionalFields = [
    "budget"
    "apiKeyFile"
    "credentialsFile"
    "authFile"
    "baseUrl"
    "model"
    "config"
  ];
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

  # Unset settings are left out of the file, as the runner's own defaults.
  withoutNulls =
    v:
    if builtins.isAttrs v then
      lib.mapAttrs (_: withoutNulls) (lib.filterAttrs (_: x: x != null) v)
    else if builtins.isList v then
      map withoutNulls v
    else
      v;

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

  options =
    {
      defaultStateDir,
      defaultStateDirText ? null,
      where,
    }:
    {
      enable = lib.mkEnableOption "quest-runner, which runs AI coding-agent jobs in an OS sandbox (${where})";

      package = lib.mkPackageOption pkgs "quest-runner" {
        extraDescription = ''
          The flake's modules default to the flake's own package, which pins bubblewrap,
          socat, git and Nix, and the sandbox-runtime, Claude Code and opencode releases of
          npm/package-lock.json (the ones the tests run).
        '';
      };

      stateDir = mkOption {
        type = t.runtimePath;
        default = defaultStateDir;
        defaultText = if defaultStateDirText == null then defaultStateDir else defaultStateDirText;
        description = ''
          The runner's state: bare clones, jobs and the devShell cache
          (QUEST_RUNNER_STATE_DIR). Jobs' commands never see it.
        '';
      };

      settings = mkOption {
        type = types.submodule (import ./settings.nix { inherit lib; });
        default = { };
        example = {
          default_timeout = "30m";
          network.extra_hosts = [ "git.example.org" ];
          limits.memory = "4G";
        };
        description = ''
          The runner's configuration (src/config.rs), written as JSON to the file
          QUEST_RUNNER_CONFIG names. Every key the runner reads is an option of its own; an
          unknown key is an error. A change reloads the service (SIGHUP), except one of
          `limits`, which are read at start: that restarts it. The file lands in the Nix store:
          secrets belong in files named by {option}`accounts`, never here.
        '';
      };

      accounts = mkOption {
        type = types.attrsOf account;
        default = { };
        example = lib.literalExpression ''
          {
            work = { agent = "claude"; apiKeyFile = "/var/lib/quest-runner/keys/anthropic"; };
            oc = { agent = "opencode"; authFile = "/var/lib/quest-runner/opencode/auth.json";
                   model = "anthropic/claude-sonnet-4-5"; };
          }
        '';
        description = ''
          Logins jobs run under, written to the configuration's `accounts`. Only paths are
          written; the files are read at run time by the agent. The sandbox hides each from
          jobs' commands with the whole directory that holds it (and, for a link, the directory
          it points into), so that replacing the file — a key rotation, a login refresh — cannot
          make it readable to a running job: keep them under the state directory or in a
          directory that holds only secrets (`/run/secrets`, `/etc/quest-runner`), never
          directly in one jobs need (`/etc`, `/opt`, `/usr`, ...), which the runner refuses.
        '';
      };

      queue.postgresql = {
        enable = lib.mkEnableOption ''
          the PostgreSQL job queue: runners on many hosts take jobs from one database
          (`queue` in the runner's configuration) instead of the state directory's own
          queue. `quest-runner submit`, `jobs`, `show`, `logs` and `cancel` then work from
          any host that reaches it. Read at start: a change restarts the service'';

        url = mkOption {
          type = types.nullOr t.postgres;
          default = null;
          example = "postgresql://quest-runner@db.example.org/quest-runner";
          description = ''
            The database: a libpq connection string (`host=db.example.org dbname=quest`), a
            `postgresql://` URL or the server's socket directory. Never a password: see
            {option}`passwordFile`. The connection has no TLS: reach a server on another host
            over a network you trust, an SSH tunnel or a VPN.
          '';
        };

        passwordFile = secretFile ''
          A file holding the database password, read at each connection. Jobs' commands are
          denied it with its whole directory, as account files: keep it under the state
          directory or in a directory of secrets (/run/keys, /run/secrets).
        '';

        lease = mkOption {
          type = types.nullOr t.duration;
          default = null;
          example = "1m";
          description = ''
            How long a claimed job stays this runner's without a renewal (renewed every third
            of it). A runner that dies loses its jobs to the others this long after its last
            renewal. Null: the runner's default, 30s. Give every runner the same.
          '';
        };
      };

      environmentFile = mkOption {
        type = types.nullOr t.runtimePath;
        default = null;
        description = ''
          A file of KEY=VALUE lines for the runner's environment (RUST_LOG, proxies). Read at
          start; not copied into the store.
        '';
      };

      extraPackages = mkOption {
        type = types.listOf types.package;
        default = [ ];
        example = lib.literalExpression "[ pkgs.gnumake pkgs.python3 ]";
        description = ''
          Extra packages on the runner's PATH, and so on the PATH of the agents and of jobs'
          commands (after the revision's devShell, which comes first).
        '';
      };
    };

  # `concurrency`, the older spelling, is `settings.concurrency`.
  imports = [
    (lib.mkAliasOptionModule
      [ "services" "quest-runner" "concurrency" ]
      [ "services" "quest-runner" "settings" "concurrency" ]
    )
  ];

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

  # The config's `queue` (src/config.rs QueueConfig), or null for the state directory's own
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
    withoutNulls cfg.settings
    // {
      accounts = lib.mapAttrs (_: accountJson) cfg.accounts;
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
    lib.concatLists (
      lib.mapAttrsToList (
        name: a:
        map (field: {
          assertion = a.${field} == null;
          message = "services.quest-runner.accounts.${name}: ${field} is not a field of a ${a.agent} account (those are ${lib.concatStringsSep ", " accountFields.${a.agent}}).";
        }) (lib.subtractLists accountFields.${a.agent} optionalFields)
      ) cfg.accounts
    )
    ++ lib.optional cfg.queue.postgresql.enable {
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
      # src/config.rs: a name starting with `-` would be read by nix as a flag.
      assertion = builtins.match "[A-Za-z0-9_][A-Za-z0-9_-]*" name != null;
      message = "services.quest-runner.settings.nix.options: \"${name}\" is not a Nix setting name (letters, digits, `-` and `_`, not starting with `-`).";
    }) (lib.attrNames cfg.settings.nix.options);

  # Every account file: { name, field, path, rewritten }.
  accountFiles =
    cfg:
    lib.concatLists (
      lib.mapAttrsToList (
        name: a:
        map (field: {
          inherit name field;
          path = a.${field};
          rewritten = lib.elem field rewrittenFields;
        }) (lib.filter (field: a.${field} != null) fileFields)
      ) cfg.accounts
    );

  # What src/sandbox/private.rs (`needed`) lists: directories jobs' commands need. The runner
  # hides every account file from jobs with the directory that holds it (hidden by its name
  # alone, a file is readable to running jobs again once it is replaced), so it refuses an
  # account file in one of these, or in any directory above one; `tree`: anywhere inside it
  # too. tests/flake.rs checks these lists are the runner's.
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
  # `{file:PATH}`, and the queue's password file, as src/config.rs `secret_files` lists them:
  # { at, path }.
  secretFiles =
    cfg:
    lib.optional (cfg.queue.postgresql.enable && cfg.queue.postgresql.passwordFile != null) {
      at = "services.quest-runner.queue.postgresql.passwordFile = ${cfg.queue.postgresql.passwordFile}";
      path = cfg.queue.postgresql.passwordFile;
    }
    ++ map (f: {
      at = "services.quest-runner.accounts.${f.name}.${f.field} = ${f.path}";
      inherit (f) path;
    }) (accountFiles cfg)
    ++ lib.concatLists (
      lib.mapAttrsToList (
        name: a:
        map
          (path: {
            at = "services.quest-runner.accounts.${name}.config names {file:${path}}";
            inherit path;
          })
          (
            lib.filter (lib.hasPrefix "/") (
              lib.optionals (a.config != null) (lib.concatMap fileRefs (strings a.config))
            )
          )
      ) cfg.accounts
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
            "services.quest-runner.accounts.${name}.config names {file:${path}}, which is not an absolute path: opencode resolves it against the job's private config directory, not yours."
          )
          (
            lib.filter (p: !lib.hasPrefix "/" p) (
              lib.optionals (a.config != null) (lib.concatMap fileRefs (strings a.config))
            )
          )
      ) cfg.accounts
    );
}
