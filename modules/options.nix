# What the NixOS module (modules/nixos.nix) and the home-manager module
# (modules/home-manager.nix) share: their common options, and how both turn those options into
# the runner's JSON configuration (the `Config` struct of src/config.rs).
#
# Usage: shared = import ./options.nix { inherit lib pkgs; }; then
#   options.services.quest-runner = shared.options { defaultStateDir = ...; ... };
{ lib, pkgs }:
let
  inherit (lib) mkOption types;
  json = pkgs.formats.json { };

  # A file the runner or the agent reads at run time. A string, never a Nix path: a path
  # literal would copy the secret into the world-readable store.
  secretFile =
    description:
    mkOption {
      type = types.nullOr (types.strMatching "/.*");
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
        Claude Code: a file holding an API key. Claude Code reads it through its apiKeyHelper,
        so the key is never in an environment variable a job's commands could inherit.
      '';
      credentialsFile = secretFile ''
        Claude Code: the `.credentials.json` of a `/login`. It is linked into each job's
        private config dir and may be refreshed by Claude Code, so it must be a writable file
        of the service's user (e.g. under the state directory).
      '';
      authFile = secretFile ''
        opencode: its `auth.json` (from `opencode auth login`), writable by the service's
        user for the same reason.
      '';
      baseUrl = mkOption {
        type = types.nullOr types.str;
        default = null;
        description = "Claude Code: the API endpoint (ANTHROPIC_BASE_URL), for gateways.";
      };
      model = mkOption {
        type = types.nullOr types.str;
        default = null;
        description = "The model (opencode: `provider/model`).";
      };
      config = mkOption {
        type = types.nullOr json.type;
        default = null;
        description = ''
          opencode: configuration merged under the runner's own (only `provider`, `model`,
          `small_model`, `enabled_providers` and `disabled_providers` are taken). May name
          secret files with opencode's `{file:...}` syntax; never holds secrets itself.
        '';
      };
    };
  };

  # The runner's field names (src/config.rs), unset fields left out: its accounts refuse
  # unknown fields, and an explicit null would be one for the other agent.
  accountJson =
    a:
    lib.filterAttrs (_: v: v != null) {
      inherit (a) agent model config;
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
    ];
    opencode = [
      "authFile"
      "model"
      "config"
    ];
  };
  optionalFields = [
    "apiKeyFile"
    "credentialsFile"
    "authFile"
    "baseUrl"
    "model"
    "config"
  ];
in
rec {
  inherit json;

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
          socat, sandbox-runtime, Claude Code, opencode, git and Nix.
        '';
      };

      stateDir = mkOption {
        type = types.strMatching "/.*";
        default = defaultStateDir;
        defaultText = if defaultStateDirText == null then defaultStateDir else defaultStateDirText;
        description = ''
          The runner's state: bare clones, jobs and the devShell cache
          (QUEST_RUNNER_STATE_DIR). Jobs' commands never see it.
        '';
      };

      settings = mkOption {
        type = types.submodule {
          freeformType = json.type;
          options = {
            default_timeout = mkOption {
              type = types.str;
              default = "1h";
              description = "The timeout of a job that names none, e.g. `30m`.";
            };
            allow_untrusted = mkOption {
              type = types.bool;
              default = false;
              description = "Run untrusted revisions (no network, no devShell) instead of refusing them.";
            };
            network.extra_hosts = mkOption {
              type = types.listOf types.str;
              default = [ ];
              description = "Hosts trusted revisions may reach besides the package registries.";
            };
            nix.options = mkOption {
              type = types.attrsOf types.str;
              default = { };
              example = {
                substituters = "";
              };
              description = "Extra `--option NAME VALUE` pairs for every `nix` the runner starts.";
            };
          };
        };
        default = { };
        description = ''
          The runner's configuration (src/config.rs), written as JSON to the file
          QUEST_RUNNER_CONFIG names. It lands in the Nix store: put secrets in files named by
          {option}`accounts`, never here.
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
          Logins jobs run under, merged into `settings.accounts`. Only paths are written to the
          configuration; the files are read at run time by the agent. Keep them where the
          sandbox hides them from jobs' commands: under the state directory, /var/lib, /home
          or /root (see src/sandbox/policy.rs) — not under /run or /etc, which jobs can read.
        '';
      };

      environmentFile = mkOption {
        type = types.nullOr (types.strMatching "/.*");
        default = null;
        description = ''
          A file of KEY=VALUE lines for the runner's environment (RUST_LOG, proxies). Read at
          start; not copied into the store.
        '';
      };

      concurrency = mkOption {
        type = types.nullOr types.ints.positive;
        default = null;
        description = ''
          How many jobs `serve` runs at once (settings.concurrency). Null leaves the runner's
          default: one per core.
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

  # The runner's config as a Nix value: settings, plus the accounts and concurrency options.
  finalSettings =
    cfg:
    cfg.settings
    // {
      accounts = (cfg.settings.accounts or { }) // lib.mapAttrs (_: accountJson) cfg.accounts;
    }
    // lib.optionalAttrs (cfg.concurrency != null) { inherit (cfg) concurrency; };

  configFile = cfg: json.generate "quest-runner-config.json" (finalSettings cfg);

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
    );

  # Every account file, for warnings about where it lives.
  accountFiles =
    cfg:
    lib.concatLists (
      lib.mapAttrsToList (
        name: a:
        map (f: {
          inherit name;
          path = f;
        }) (lib.filter (f: f != null) [
          a.apiKeyFile
          a.credentialsFile
          a.authFile
        ])
      ) cfg.accounts
    );
}
