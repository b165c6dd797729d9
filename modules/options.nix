# The options the NixOS module (modules/nixos.nix) and the home-manager module
# (modules/home-manager.nix) share, as a module each imports with its own state directory,
# the way nixpkgs' services.github-runners imports its options.nix:
#   imports = [ (import ./options.nix { defaultStateDir = "/var/lib/quest-runner"; where = "system service"; }) ];
{
  defaultStateDir,
  defaultStateDirText ? defaultStateDir,
  where,
}:
{ lib, pkgs, ... }:
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

  model = mkOption {
    type = types.nullOr t.text;
    default = null;
    description = "The model the agent uses (opencode: `provider/model`); null: the agent's default.";
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

  # The fields of ClaudeAccount and OpencodeAccount (src/config/accounts.rs), and no others.
  claude = types.submodule {
    options = {
      inherit model budget;
      apiKeyFile = secretFile ''
        A file holding an API key. The runner's model gateway reads it and puts it on each
        request; Claude Code itself only gets a job token.
      '';
      credentialsFile = secretFile ''
        The `.credentials.json` of a `/login`. The runner holds it and refreshes it, writing it
        back, so it must be a writable file of the service's user (e.g. under the state
        directory).
      '';
      baseUrl = mkOption {
        type = types.nullOr t.text;
        default = null;
        description = "The API endpoint the runner's model gateway forwards to (default: Anthropic's API).";
      };
    };
  };
  opencode = types.submodule {
    options = {
      inherit model budget;
      authFile = secretFile ''
        opencode's `auth.json` (from `opencode auth login`). Entries of type `api` are served
        by the runner's model gateway; OAuth entries are linked into the job for opencode,
        which refreshes them, so it must be writable by the service's user.
      '';
      config = mkOption {
        type = types.nullOr t.json;
        default = null;
        description = ''
          Configuration merged under the runner's own (only `provider`, `model`,
          `small_model`, `enabled_providers` and `disabled_providers` are taken). May name
          secret files with opencode's `{file:...}` syntax (absolute paths); never holds
          secrets itself.
        '';
      };
    };
  };

  # One agent's account: exactly one of `claude = { ... }` and `opencode = { ... }`.
  tagged = types.attrTag {
    claude = mkOption {
      type = claude;
      description = "A Claude Code login: an API key (`apiKeyFile`) or a `/login` (`credentialsFile`).";
    };
    opencode = mkOption {
      type = opencode;
      description = "An opencode login (`authFile`) and the providers its `config` adds.";
    };
  };
  # The older spelling, { agent = "claude"; apiKeyFile = ...; }, read as { claude = { ... }; }.
  account =
    types.coercedTo (types.addCheck (types.attrsOf types.anything) (a: a ? agent)) (
      a: { ${a.agent} = removeAttrs a [ "agent" ]; }
    ) tagged
    // {
      description = "one agent's account (`claude = { ... }` or `opencode = { ... }`, not both)";
      descriptionClass = "noun";
    };
in
{
  # `concurrency`, the older spelling, is `settings.concurrency`.
  imports = [
    (lib.mkAliasOptionModule
      [ "services" "quest-runner" "concurrency" ]
      [ "services" "quest-runner" "settings" "concurrency" ]
    )
  ];

  options.services.quest-runner = {
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
      defaultText = defaultStateDirText;
      description = ''
        The runner's state: bare clones, jobs and the devShell cache
        (QUEST_RUNNER_STATE_DIR), and the usual place for account files. Jobs' commands
        never see it. The system service's must be below /var/lib, where systemd's
        StateDirectory= creates it, owned by the service's user and mode 0700.
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
        The runner's configuration (src/config/accounts.rs), written as JSON to the file
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
          work.claude.apiKeyFile = "/var/lib/quest-runner/keys/anthropic";
          oc.opencode = {
            authFile = "/var/lib/quest-runner/opencode/auth.json";
            model = "anthropic/claude-sonnet-4-5";
          };
        }
      '';
      description = ''
        Logins jobs run under, written to the configuration's `accounts`: each is named by
        the agent it logs in, `claude` or `opencode`, with that agent's fields (another's is
        an error). The older spelling, `{ agent = "claude"; apiKeyFile = ...; }`, is read
        the same. Only paths are written; the files are read at run time by the agent. The
        sandbox hides each from jobs' commands with the whole directory that holds it (and,
        for a link, the directory it points into), so that replacing the file — a key
        rotation, a login refresh — cannot make it readable to a running job: keep them
        under the state directory or in a directory that holds only secrets
        (`/run/secrets`, `/etc/quest-runner`), never directly in one jobs need (`/etc`,
        `/opt`, `/usr`, ...), which the runner refuses.
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
}
