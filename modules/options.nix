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
          written; the files are read at run time by the agent. Keep them under the state
          directory: the sandbox hides that whole directory from jobs' commands, while a file
          elsewhere is hidden by its name only (see the modules' warnings).
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
          denied it by its name; keep it under the state directory or /run/keys.
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

  # What src/sandbox/policy.rs (system_denied_reads) hides from every job's commands besides
  # the state directory and the runner's home. tests/deploy.rs checks these lists are the
  # policy's.
  deniedReads = {
    linux = [
      "/home"
      "/root"
      "/run/user"
      "/tmp"
      "/var/tmp"
      "/var/lib"
      "/var/log"
      "/var/mail"
      "/var/spool"
      "/var/backups"
      "/srv"
      "/mnt"
      "/media"
      "/boot"
      "/etc/shadow"
      "/etc/gshadow"
      "/etc/ssh"
      "/etc/sudoers"
      "/etc/sudoers.d"
      "/etc/nix/netrc"
      "/run/secrets"
      "/run/credentials"
      "/run/keys"
      "/run/agenix"
    ];
    darwin = [
      "/Users"
      "/var/root"
      "/private/tmp"
      "/private/var/tmp"
      "/private/var/folders"
      "/private/var/db"
      "/private/var/log"
      "/Library/Keychains"
      "/private/etc/ssh"
      "/private/etc/sudoers"
      "/Volumes"
    ];
  };

  # Warnings about account files the sandbox does not hide as a directory. The policy denies
  # each account file to jobs by its name, wherever it is; but a deny by name is a mount over
  # that one file, lost in a running job's sandbox as soon as the file is replaced by another
  # (a rename over it, as editors, secret managers and the agents' own login refresh do), and
  # it leaves every file beside it readable. Files of opencode's `{file:...}` references are
  # not denied by name at all. `hidden` is the list of directories the policy hides.
  accountWarnings =
    cfg: hidden:
    let
      isHidden = path: lib.any (dir: within dir path) hidden;
      # The state directory (where account files belong), then the first few of the policy's.
      where = "${cfg.stateDir}, ${lib.concatStringsSep ", " (lib.take 3 hidden)}, ... as src/sandbox/policy.rs lists them";
      exposed = lib.filter (f: !isHidden f.path) (accountFiles cfg);
      refs = lib.concatLists (
        lib.mapAttrsToList (
          name: a:
          map (path: { inherit name path; }) (
            lib.optionals (a.config != null) (lib.concatMap fileRefs (strings a.config))
          )
        ) cfg.accounts
      );
    in
    map (
      f:
      "services.quest-runner.accounts.${f.name}.${f.field} = ${f.path}: outside the directories the sandbox hides from jobs (${where}), so jobs' commands are denied this file by its name only: a job running while it is replaced (a rename over it, as editors, secret managers${
        if f.rewritten then " and the agent's own login refresh" else " and key rotations"
      } do) can read the new one, and files beside it stay readable. Keep it under the state directory."
    ) exposed
    ++ map (
      r:
      if lib.hasPrefix "/" r.path then
        "services.quest-runner.accounts.${r.name}.config names {file:${r.path}}: jobs' commands can read that file, which the sandbox does not hide (only account files are denied by name, and this is not one). Keep it under the state directory."
      else
        "services.quest-runner.accounts.${r.name}.config names {file:${r.path}}, which is not an absolute path: opencode resolves it against the job's private config directory, not yours."
    ) (lib.filter (r: !(lib.hasPrefix "/" r.path && isHidden r.path)) refs);
}
