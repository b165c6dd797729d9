# What the modules must do with an operator's configuration, case by case: the good ones
# evaluate to the expected unit and config file, the mistakes fail with an error naming them.
# Run by tests/suite/deploy.rs (nix-instantiate, error text included) and by the flake's checks.
#
# A case is { module = "nixos" | "home"; system ? "x86_64-linux"; } with either
#   config = <module>  (or configs = { a = <module>; b = <module>; })  and
#   checks = got: [ { ok = <bool>; what = "<what is wrong when not ok>"; } ]
# over what nix/eval/default.nix reads back, or
#   config = <module>; error = "<text the evaluation's error must contain>".
{ lib }:
let
  check = ok: what: { inherit ok what; };
  has = needle: haystack: lib.any (lib.hasInfix needle) haystack;
  stateDir = "/var/lib/quest-runner";

  # What an operator typically writes.
  typical = {
    services.quest-runner = {
      enable = true;
      concurrency = 2;
      settings = {
        default_timeout = "30m";
        network.extra_hosts = [ "git.example.org" ];
        nix.options.substituters = "";
        limits.memory = "4G";
      };
      accounts.work.claude.apiKeyFile = "${stateDir}/keys/anthropic";
      accounts.oc.opencode = {
        authFile = "${stateDir}/opencode/auth.json";
        model = "anthropic/claude-sonnet-4-5";
        config.provider.anthropic.options.apiKey = "{file:${stateDir}/keys/anthropic}";
      };
    };
  };
  typicalHome = lib.recursiveUpdate typical {
    services.quest-runner.accounts = {
      work.claude.apiKeyFile = "/home/alice/.local/state/quest-runner/keys/anthropic";
      oc.opencode.authFile = "/home/alice/.local/share/opencode/auth.json";
      oc.opencode.config.provider.anthropic.options.apiKey = "{file:/home/alice/.config/anthropic-key}";
    };
  };
  # The typical configuration, with `settings` changed as given.
  withSettings = base: settings: lib.recursiveUpdate base { services.quest-runner = { inherit settings; }; };
  withAccount = agent: fields: {
    services.quest-runner.enable = true;
    services.quest-runner.accounts.x.${agent} = fields;
  };

  noComplaints = got: [
    (check (got.failedAssertions == [ ]) "failed assertions: ${toString got.failedAssertions}")
    (check (got.warnings == [ ]) "warnings: ${toString got.warnings}")
  ];

  # A NixOS configuration whose only failed assertion contains each of `needles`.
  asserts =
    needles: got:
    [
      (check (lib.length got.failedAssertions == 1) "one failed assertion, not ${toString got.failedAssertions}")
    ]
    ++ map (n: check (has n got.failedAssertions) "no failed assertion says ${n}: ${toString got.failedAssertions}") needles;
  warns =
    needles: got:
    [
      (check (got.failedAssertions == [ ]) "failed assertions: ${toString got.failedAssertions}")
    ]
    ++ map (n: check (has n got.warnings) "no warning says ${n}: ${toString got.warnings}") needles;

  # The config file the typical configuration writes, as the runner reads it.
  typicalConfig = accounts: {
    default_timeout = "30m";
    allow_untrusted = false;
    concurrency = 2;
    network = {
      extra_hosts = [ "git.example.org" ];
      full_access_hosts = [ ];
    };
    nix.options.substituters = "";
    limits.memory = "4G";
    deps = { };
    isolation = { };
    inherit accounts;
  };
in
{
  # ---- NixOS --------------------------------------------------------------------------------

  nixos-typical = {
    module = "nixos";
    config = lib.recursiveUpdate typical {
      services.quest-runner.apparmor.enable = true;
      security.apparmor.enable = true;
    };
    checks =
      got:
      noComplaints got
      ++ [
        (check (
          got.config == typicalConfig {
            work = {
              agent = "claude";
              api_key_file = "${stateDir}/keys/anthropic";
            };
            oc = {
              agent = "opencode";
              auth_file = "${stateDir}/opencode/auth.json";
              model = "anthropic/claude-sonnet-4-5";
              config.provider.anthropic.options.apiKey = "{file:${stateDir}/keys/anthropic}";
            };
          }
        ) "the config file: ${builtins.toJSON got.config}")
        (check (got.service.reloadTriggers == [ got.configPath ]) "a config change reloads")
        (check (lib.any (lib.hasSuffix "-quest-runner-limits.json") got.service.restartTriggers) "a limits change restarts")
        (check (got.service.environment.QUEST_RUNNER_CONFIG == "/etc/quest-runner/config.json") "the config's path does not change")
        (check (got.service.serviceConfig.ProtectHome == true) "ProtectHome from nix/service-hardening.json")
        (check (got.service.serviceConfig.ProtectSystem == "strict") "ProtectSystem from nix/service-hardening.json")
        (check (got.service.serviceConfig.Type == "notify" && got.service.serviceConfig.WatchdogSec == "60s") "readiness and watchdog")
        (check (got.service.serviceConfig.Delegate == true) "Delegate= for per-job cgroups")
        (check (lib.hasSuffix "/bin/quest-runner serve" got.service.serviceConfig.ExecStart) "ExecStart runs serve")
        (check (lib.elem "network-online.target" got.service.after) "ordered after the network")
        (check (got.user.home == stateDir) "the service's user lives in the state directory")
        (check (got.apparmor ? quest-runner-bwrap) "AppArmor profile installed")
      ];
  };

  # A change of the config reloads the service, one of its limits restarts it: the unit differs
  # in its reload trigger only, or in its restart trigger too.
  nixos-limits-restart = {
    module = "nixos";
    configs = {
      before = typical;
      reloaded = withSettings typical { network.extra_hosts = [ "git.example.com" ]; };
      restarted = withSettings typical { limits.memory = "8G"; };
    };
    checks =
      got:
      let
        unitBut = attr: a: b: removeAttrs a.service [ attr ] == removeAttrs b.service [ attr ];
      in
      [
        (check (got.before.service.reloadTriggers != got.reloaded.service.reloadTriggers) "a settings change changes the reload trigger")
        (check (unitBut "reloadTriggers" got.before got.reloaded) "a settings change changes nothing else of the unit")
        (check (got.before.service.restartTriggers != got.restarted.service.restartTriggers) "a limits change changes the restart trigger")
      ];
  };

  nixos-settings-typo = {
    module = "nixos";
    config = withSettings typical { concurency = 4; };
    error = "The option `services.quest-runner.settings.concurency' does not exist";
  };

  nixos-settings-path-literal = {
    module = "nixos";
    config = withSettings typical { nix.options.netrc-file = ./cases.nix; };
    error = "is not of type `string (not a Nix path: a file it names would be copied into the world-readable store)'";
  };

  nixos-settings-accounts = {
    module = "nixos";
    config = withSettings typical { accounts.x.api_key_file = "/var/lib/quest-runner/key"; };
    error = "The option `services.quest-runner.settings.accounts' does not exist";
  };

  nixos-account-path-literal = {
    module = "nixos";
    config = withAccount "claude" {
      apiKeyFile = ./cases.nix;
    };
    error = "services.quest-runner.accounts.x.claude.apiKeyFile' is not of type `null or absolute path as a string, outside the Nix store";
  };

  nixos-account-store-string = {
    module = "nixos";
    config = withAccount "claude" {
      apiKeyFile = "${./cases.nix}";
    };
    error = "services.quest-runner.accounts.x.claude.apiKeyFile' is not of type `null or absolute path as a string, outside the Nix store";
  };

  nixos-opencode-config-path-literal = {
    module = "nixos";
    config = withAccount "opencode" {
      config.provider.anthropic.options.apiKey = "{file:${./cases.nix}}";
    };
    error = "services.quest-runner.accounts.x.opencode.config.provider.anthropic.options.apiKey' is not of type `JSON value (no Nix paths)'";
  };

  nixos-bad-timeout = {
    module = "nixos";
    config = withSettings typical { default_timeout = "soon"; };
    error = "services.quest-runner.settings.default_timeout' is not of type `duration such as `30m` or `1h 30m`'";
  };

  nixos-bad-memory = {
    module = "nixos";
    config = withSettings typical { limits.memory = "4 gigs"; };
    error = "services.quest-runner.settings.limits.memory' is not of type `null or size in bytes, or with a unit (`512M`, `4G`)'";
  };

  nixos-bad-cpus = {
    module = "nixos";
    config = withSettings typical { limits.cpus = 0; };
    error = "services.quest-runner.settings.limits.cpus' is not of type `null or number of CPUs between 0.001 and 4096 (`1.5`)'";
  };

  nixos-bad-host = {
    module = "nixos";
    config = withSettings typical { network.extra_hosts = [ "https://git.example.org/" ]; };
    error = "is not of type `host name (no scheme, path or spaces)'";
  };

  nixos-nix-option-name = {
    module = "nixos";
    config = withSettings typical { nix.options."--impure" = ""; };
    checks = asserts [ "\"--impure\" is not a Nix setting name" ];
  };

  # Another agent's field is no option of this one's (types.attrTag: each agent its own
  # fields, as ClaudeAccount and OpencodeAccount in src/config/accounts.rs).
  nixos-account-field = {
    module = "nixos";
    config = withAccount "claude" {
      authFile = "${stateDir}/auth.json";
    };
    error = "The option `services.quest-runner.accounts.x.claude.authFile' does not exist";
  };

  nixos-account-two-agents = {
    module = "nixos";
    config = lib.recursiveUpdate (withAccount "claude" { apiKeyFile = "${stateDir}/key"; }) {
      services.quest-runner.accounts.x.opencode.authFile = "${stateDir}/auth.json";
    };
    error = "accounts.x' is not of type `one agent's account (`claude = { ... }` or `opencode = { ... }`, not both)'";
  };

  # The older spelling, { agent = "claude"; ... }, writes the same config as the tagged one.
  nixos-account-older-spelling = {
    module = "nixos";
    configs = {
      tagged = typical;
      older = lib.recursiveUpdate { services.quest-runner = removeAttrs typical.services.quest-runner [ "accounts" ]; } {
        services.quest-runner.accounts = {
          work = {
            agent = "claude";
            apiKeyFile = "${stateDir}/keys/anthropic";
          };
          oc = {
            agent = "opencode";
            authFile = "${stateDir}/opencode/auth.json";
            model = "anthropic/claude-sonnet-4-5";
            config.provider.anthropic.options.apiKey = "{file:${stateDir}/keys/anthropic}";
          };
        };
      };
    };
    checks = got: [
      (check (got.older.config == got.tagged.config) "the same config: ${builtins.toJSON got.older.config.accounts}")
      (check (got.older.failedAssertions == [ ] && got.older.warnings == [ ]) "complaints: ${toString (got.older.failedAssertions ++ got.older.warnings)}")
    ];
  };

  # ProtectHome=true hides /home, /root and /run/user from the service: name the fix.
  nixos-account-in-home = {
    module = "nixos";
    config = withAccount "claude" {
      apiKeyFile = "/home/alice/anthropic";
    };
    checks = asserts [
      "accounts.x.claude.apiKeyFile = /home/alice/anthropic: the service cannot read it"
      "ProtectHome=true"
      ''services.quest-runner.serviceOverrides.ProtectHome = "read-only"''
    ];
  };

  nixos-login-in-root = {
    module = "nixos";
    config = withAccount "claude" {
      credentialsFile = "/root/.claude/.credentials.json";
    };
    checks = asserts [
      "accounts.x.claude.credentialsFile = /root/.claude/.credentials.json: the service cannot read it"
      ''services.quest-runner.serviceOverrides = { ProtectHome = false; ReadWritePaths = [ "/root/.claude" ]; }''
    ];
  };

  nixos-login-in-run-user-read-only = {
    module = "nixos";
    config = lib.recursiveUpdate (withAccount "opencode" {
      authFile = "/run/user/1000/opencode/auth.json";
    }) { services.quest-runner.serviceOverrides.ProtectHome = "read-only"; };
    checks = asserts [
      "accounts.x.opencode.authFile = /run/user/1000/opencode/auth.json: the service cannot write it (ProtectHome=read-only)"
    ];
  };

  # The operator took the fix: no assertion, and /home is hidden from jobs, so no warning.
  nixos-account-in-home-protect-home-read-only = {
    module = "nixos";
    config = lib.recursiveUpdate (withAccount "claude" {
      apiKeyFile = "/home/alice/anthropic";
    }) { services.quest-runner.serviceOverrides.ProtectHome = "read-only"; };
    checks = noComplaints;
  };

  nixos-account-in-tmp = {
    module = "nixos";
    config = withAccount "claude" {
      apiKeyFile = "/tmp/anthropic";
    };
    checks = asserts [ "the service cannot see it: its unit has PrivateTmp=true" ];
  };

  # Directories the policy hides as a whole: no warning.
  nixos-account-in-run-secrets = {
    module = "nixos";
    config = withAccount "claude" {
      apiKeyFile = "/run/secrets/anthropic";
    };
    checks = noComplaints;
  };

  # A directory of its own: the runner hides it whole from jobs.
  nixos-account-in-etc-dir = {
    module = "nixos";
    config = withAccount "claude" {
      apiKeyFile = "/etc/quest-runner/anthropic";
    };
    checks = noComplaints;
  };

  # A directory jobs' commands need: the runner would refuse it, so the module does.
  nixos-account-in-etc = {
    module = "nixos";
    config = withAccount "claude" {
      apiKeyFile = "/etc/anthropic";
    };
    checks = asserts [
      "accounts.x.claude.apiKeyFile = /etc/anthropic: its directory /etc is one jobs' commands need"
      "a key rotation"
      "such as /etc/quest-runner/"
    ];
  };

  nixos-account-above-needed = {
    module = "nixos";
    config = withAccount "opencode" {
      authFile = "/run/auth.json";
    };
    checks = asserts [ "accounts.x.opencode.authFile = /run/auth.json: its directory /run is one jobs' commands need (above /run/current-system)" ];
  };

  nixos-login-read-only = {
    module = "nixos";
    config = withAccount "claude" {
      credentialsFile = "/etc/quest-runner/credentials.json";
    };
    checks = warns [
      "accounts.x.claude.credentialsFile = /etc/quest-runner/credentials.json: the service cannot write it (ProtectSystem=strict"
      "the agent rewrites it when it refreshes the login"
    ];
  };

  nixos-opencode-file-refs = {
    module = "nixos";
    config = withAccount "opencode" {
      config.provider = {
        a.options.apiKey = "{file:/etc/opencode/key}";
        b.options.apiKey = "{file:/run/secrets/key}";
        c.options.apiKey = "{file:key}";
      };
    };
    checks =
      got:
      warns [ "names {file:key}, which is not an absolute path" ] got
      ++ [
        (check (lib.length got.warnings == 1) "one warning, not ${toString got.warnings}")
      ];
  };

  # A file the account's config reads is a secret of the account: hidden with its directory.
  nixos-opencode-file-ref-in-etc = {
    module = "nixos";
    config = withAccount "opencode" {
      config.provider.a.options.apiKey = "{file:/etc/opencode-key}";
    };
    checks = asserts [ "accounts.x.opencode.config names {file:/etc/opencode-key}: its directory /etc is one jobs' commands need" ];
  };

  nixos-concurrency-alias = {
    module = "nixos";
    config = {
      services.quest-runner = {
        enable = true;
        concurrency = 3;
      };
    };
    checks = got: noComplaints got ++ [ (check (got.config.concurrency == 3) "concurrency") ];
  };

  # ---- an operator's additions to the unit --------------------------------------------------
  # The shipped lists are extended, never silently replaced (before issue 25, each of these
  # additions replaced the shipped list: SystemCallFilter ended up [ "~@clock" ], a deny-list
  # that allows every other call, and RestrictAddressFamilies [ "AF_PACKET" ]).

  nixos-hardening-add-syscall-group = {
    module = "nixos";
    configs = {
      serviceConfig = lib.recursiveUpdate typical {
        systemd.services.quest-runner.serviceConfig.SystemCallFilter = [ "~@clock" ];
      };
      serviceOverrides = lib.recursiveUpdate typical {
        services.quest-runner.serviceOverrides.SystemCallFilter = [ "~@clock" ];
      };
    };
    checks =
      got:
      lib.mapAttrsToList (
        how: g:
        check (
          g.service.serviceConfig.SystemCallFilter == [
            "@system-service"
            "@mount"
            "seccomp"
            "sethostname"
            "setdomainname"
            "~@clock"
          ]
        ) "${how}: ~@clock is added to the allow-list: ${builtins.toJSON g.service.serviceConfig.SystemCallFilter}"
      ) got;
  };

  nixos-hardening-add-address-family = {
    module = "nixos";
    config = lib.recursiveUpdate typical {
      systemd.services.quest-runner.serviceConfig.RestrictAddressFamilies = [ "AF_PACKET" ];
    };
    checks = got: [
      (check (
        got.service.serviceConfig.RestrictAddressFamilies == [
          "AF_UNIX"
          "AF_INET"
          "AF_INET6"
          "AF_NETLINK"
          "AF_PACKET"
        ]
      ) "AF_PACKET is added, AF_UNIX and the rest kept: ${builtins.toJSON got.service.serviceConfig.RestrictAddressFamilies}")
    ];
  };

  # A capability added to the empty bounding set is the only one the service gets.
  nixos-hardening-add-capability = {
    module = "nixos";
    config = lib.recursiveUpdate typical {
      services.quest-runner.serviceOverrides.CapabilityBoundingSet = [ "CAP_NET_BIND_SERVICE" ];
    };
    checks = got: [
      (check (
        got.service.serviceConfig.CapabilityBoundingSet == [
          ""
          "CAP_NET_BIND_SERVICE"
        ]
      ) "the reset line first, then the addition: ${builtins.toJSON got.service.serviceConfig.CapabilityBoundingSet}")
    ];
  };

  # From either place: serviceOverrides passes lib.mkForce on as written.
  nixos-hardening-force-replaces = {
    module = "nixos";
    configs = {
      serviceConfig = lib.recursiveUpdate typical {
        systemd.services.quest-runner.serviceConfig.SystemCallFilter = lib.mkForce [ "@system-service" ];
      };
      serviceOverrides = lib.recursiveUpdate typical {
        services.quest-runner.serviceOverrides.SystemCallFilter = lib.mkForce [ "@system-service" ];
      };
    };
    checks =
      got:
      lib.mapAttrsToList (
        how: g:
        check (
          g.service.serviceConfig.SystemCallFilter == [ "@system-service" ]
        ) "${how}: mkForce replaces the list: ${builtins.toJSON g.service.serviceConfig.SystemCallFilter}"
      ) got;
  };

  # A shipped scalar gives way to the operator's, from either place.
  nixos-hardening-scalar-replaced = {
    module = "nixos";
    config = lib.recursiveUpdate typical {
      systemd.services.quest-runner.serviceConfig.ProtectSystem = "full";
      services.quest-runner.serviceOverrides.RestartSec = "10s";
    };
    checks = got: [
      (check (got.service.serviceConfig.ProtectSystem == "full") "ProtectSystem: ${got.service.serviceConfig.ProtectSystem}")
      (check (got.service.serviceConfig.RestartSec == "10s") "RestartSec: ${got.service.serviceConfig.RestartSec}")
    ];
  };

  # A setting the module makes itself, given again in serviceOverrides: reported, not won
  # silently (before issue 25 `//` made it User=alice while users.users and the assertions
  # went on with quest-runner).
  nixos-override-conflicting-scalar = {
    module = "nixos";
    config = lib.recursiveUpdate typical { services.quest-runner.serviceOverrides.User = "alice"; };
    error = "The option `systemd.services.quest-runner.serviceConfig.User' has conflicting definition values";
  };

  # ---- the PostgreSQL queue -----------------------------------------------------------------

  # The database on this host: services.postgresql with a database and role named after the
  # service's user, reached over the socket with peer authentication (no password at all).
  nixos-queue-create-locally = {
    module = "nixos";
    config = lib.recursiveUpdate typical {
      services.quest-runner.queue.postgresql = {
        enable = true;
        createLocally = true;
      };
    };
    checks =
      got:
      noComplaints got
      ++ [
        (check (
          got.config.queue == { postgres = "host=/run/postgresql dbname=quest-runner user=quest-runner"; }
        ) "the queue: ${builtins.toJSON (got.config.queue or null)}")
        (check got.postgresql.enable "services.postgresql enabled")
        (check (got.postgresql.ensureDatabases == [ "quest-runner" ]) "the database: ${toString got.postgresql.ensureDatabases}")
        (check (
          got.postgresql.ensureUsers == [
            {
              name = "quest-runner";
              ensureDBOwnership = true;
            }
          ]
        ) "the role owns its database: ${builtins.toJSON got.postgresql.ensureUsers}")
        (check (lib.elem "postgresql.service" got.service.after && lib.elem "postgresql.service" got.service.requires) "ordered after PostgreSQL, which it requires")
      ];
  };

  # Another host's database: a URL and a password file; the queue is read at start, so a
  # change restarts the service.
  nixos-queue-url = {
    module = "nixos";
    configs = {
      before = typical;
      queued = lib.recursiveUpdate typical {
        services.quest-runner.queue.postgresql = {
          enable = true;
          url = "postgresql://quest-runner@db.example.org/quest";
          passwordFile = "/run/keys/quest-runner-db";
          lease = "1m";
        };
      };
    };
    checks = got: [
      (check (got.queued.failedAssertions == [ ] && got.queued.warnings == [ ]) "complaints: ${toString (got.queued.failedAssertions ++ got.queued.warnings)}")
      (check (
        got.queued.config.queue == {
          postgres = "postgresql://quest-runner@db.example.org/quest";
          password_file = "/run/keys/quest-runner-db";
          lease = "1m";
        }
      ) "the queue: ${builtins.toJSON (got.queued.config.queue or null)}")
      (check (!(got.before.config ? queue)) "no queue unless enabled")
      (check (!got.queued.postgresql.enable) "no local PostgreSQL for a URL")
      (check (!lib.elem "postgresql.service" got.queued.service.after) "not ordered after a local PostgreSQL")
      (check (got.before.service.restartTriggers != got.queued.service.restartTriggers) "a queue change restarts")
    ];
  };

  nixos-queue-password-in-url = {
    module = "nixos";
    config = lib.recursiveUpdate typical {
      services.quest-runner.queue.postgresql = {
        enable = true;
        url = "postgresql://quest-runner:hunter2@db.example.org/quest";
      };
    };
    error = "is not of type `null or PostgreSQL connection string, URL or socket path without a password (the password goes in passwordFile)'";
  };

  nixos-queue-password-in-conninfo = {
    module = "nixos";
    config = lib.recursiveUpdate typical {
      services.quest-runner.queue.postgresql = {
        enable = true;
        url = "host=db.example.org dbname=quest password=hunter2";
      };
    };
    error = "PostgreSQL connection string, URL or socket path without a password";
  };

  nixos-queue-password-file-literal = {
    module = "nixos";
    config = lib.recursiveUpdate typical {
      services.quest-runner.queue.postgresql = {
        enable = true;
        url = "postgresql://quest-runner@db.example.org/quest";
        passwordFile = ./cases.nix;
      };
    };
    error = "services.quest-runner.queue.postgresql.passwordFile' is not of type `null or absolute path as a string, outside the Nix store";
  };

  nixos-queue-nowhere = {
    module = "nixos";
    config = lib.recursiveUpdate typical { services.quest-runner.queue.postgresql.enable = true; };
    checks = asserts [ "queue.postgresql: set url" "or createLocally = true" ];
  };

  nixos-queue-url-and-local = {
    module = "nixos";
    config = lib.recursiveUpdate typical {
      services.quest-runner.queue.postgresql = {
        enable = true;
        createLocally = true;
        url = "postgresql://quest-runner@db.example.org/quest";
      };
    };
    checks = asserts [ "url and createLocally exclude each other" ];
  };

  # ---- home-manager -------------------------------------------------------------------------

  home-linux-typical = {
    module = "home";
    config = typicalHome;
    checks =
      got:
      let
        inherit (got.service) Unit Service;
      in
      noComplaints got
      ++ [
        (check (
          got.config == typicalConfig {
            work = {
              agent = "claude";
              api_key_file = "/home/alice/.local/state/quest-runner/keys/anthropic";
            };
            oc = {
              agent = "opencode";
              auth_file = "/home/alice/.local/share/opencode/auth.json";
              model = "anthropic/claude-sonnet-4-5";
              config.provider.anthropic.options.apiKey = "{file:/home/alice/.config/anthropic-key}";
            };
          }
        ) "the config file: ${builtins.toJSON got.config}")
        (check (got.configFile.target == ".config/quest-runner/config.json") "the config is a file of the user's")
        (check (lib.elem "QUEST_RUNNER_CONFIG=/home/alice/.config/quest-runner/config.json" Service.Environment) "the unit names the config's stable path, not its store path")
        (check (Unit.X-Reload-Triggers == [ got.configFile.source ]) "a config change reloads")
        (check (lib.any (lib.hasSuffix "-quest-runner-limits.json") Unit.X-Restart-Triggers) "a limits change restarts")
        (check (Service.Type == "notify" && Service.NotifyAccess == "main" && Service.WatchdogSec == "60s") "readiness and watchdog: Type=notify, NotifyAccess=main, WatchdogSec=60s")
        (check (!(Unit ? After) && !(Unit ? Wants)) "no system units in a user unit: ${builtins.toJSON Unit}")
        (check (Service.KillMode == "mixed" && Service.Delegate == true) "KillMode and Delegate from nix/service-hardening.json")
        (check (lib.hasSuffix "/bin/quest-runner serve" (lib.head Service.ExecStart)) "ExecStart runs serve")
        (check (got.service.Install.WantedBy == [ "default.target" ]) "WantedBy")
      ];
  };

  # The user unit's shipped settings give way to the operator's (before issue 25 any of them
  # set again was a conflict).
  home-unit-setting-replaced = {
    module = "home";
    config = lib.recursiveUpdate typicalHome {
      systemd.user.services.quest-runner.Service.Restart = "always";
    };
    checks = got: [
      (check (got.service.Service.Restart == "always") "Restart: ${got.service.Service.Restart}")
      (check (got.service.Service.Type == "notify") "the rest kept: Type=${got.service.Service.Type}")
    ];
  };

  home-reload-not-restart = {
    module = "home";
    configs = {
      before = typicalHome;
      reloaded = withSettings typicalHome { default_timeout = "2h"; };
      restarted = withSettings typicalHome { limits.pids = 500; };
    };
    checks =
      got:
      let
        unit = g: g.service.Unit;
        sameBut =
          key: a: b:
          removeAttrs a.service [ "Unit" ] == removeAttrs b.service [ "Unit" ]
          && removeAttrs (unit a) [ key ] == removeAttrs (unit b) [ key ];
      in
      [
        (check (sameBut "X-Reload-Triggers" got.before got.reloaded) "a settings change changes the unit's reload trigger only")
        (check ((unit got.before).X-Reload-Triggers != (unit got.reloaded).X-Reload-Triggers) "a settings change changes the reload trigger")
        (check ((unit got.before).X-Restart-Triggers != (unit got.restarted).X-Restart-Triggers) "a limits change changes the restart trigger")
      ];
  };

  home-queue-url = {
    module = "home";
    config = lib.recursiveUpdate typicalHome {
      services.quest-runner.queue.postgresql = {
        enable = true;
        url = "/run/postgresql";
      };
    };
    checks = got: [
      (check (got.config.queue == { postgres = "/run/postgresql"; }) "the queue: ${builtins.toJSON (got.config.queue or null)}")
      (check (got.failedAssertions == [ ]) "failed assertions: ${toString got.failedAssertions}")
    ];
  };

  home-queue-nowhere = {
    module = "home";
    config = lib.recursiveUpdate typicalHome { services.quest-runner.queue.postgresql.enable = true; };
    checks = got: [
      (check (has "queue.postgresql: set url" got.failedAssertions) "asks for url: ${toString got.failedAssertions}")
      (check (!has "createLocally" got.failedAssertions) "home-manager has no createLocally")
    ];
  };

  # The queue's password file is placed by the account files' rule: never where commands need.
  nixos-queue-password-in-etc = {
    module = "nixos";
    config = lib.recursiveUpdate typical {
      services.quest-runner.queue.postgresql = {
        enable = true;
        url = "postgresql://quest-runner@db.example.org/quest";
        passwordFile = "/etc/quest-runner-db";
      };
    };
    checks = asserts [
      "services.quest-runner.queue.postgresql.passwordFile = /etc/quest-runner-db: its directory /etc is one jobs' commands need"
    ];
  };

  home-settings-typo = {
    module = "home";
    config = withSettings typicalHome { concurency = 4; };
    error = "The option `services.quest-runner.settings.concurency' does not exist";
  };

  home-account-outside = {
    module = "home";
    config = withAccount "claude" {
      apiKeyFile = "/etc/anthropic";
    };
    checks = asserts [ "accounts.x.claude.apiKeyFile = /etc/anthropic: its directory /etc is one jobs' commands need" ];
  };

  home-darwin-typical = {
    module = "home";
    system = "aarch64-darwin";
    config = lib.recursiveUpdate typicalHome {
      services.quest-runner.accounts = {
        work.claude.apiKeyFile = "/Users/alice/Library/quest-runner/anthropic";
        oc.opencode.authFile = "/Users/alice/.local/share/opencode/auth.json";
        oc.opencode.config.provider.anthropic.options.apiKey = "{file:/Users/alice/.config/anthropic-key}";
      };
    };
    checks =
      got:
      noComplaints got
      ++ [
        (check (!(got.launchd ? ProcessType)) "ProcessType left to launchd: ${got.launchd.ProcessType or ""}")
        (check (
          got.launchd.KeepAlive == {
            Crashed = true;
            SuccessfulExit = false;
          }
        ) "launchd KeepAlive")
        (check (got.launchd.StandardErrorPath == "/Users/alice/Library/Logs/quest-runner.log") "launchd log path")
        (check (lib.last got.launchd.ProgramArguments == "serve") "launchd runs serve")
        (check (got.launchd.EnvironmentVariables.QUEST_RUNNER_CONFIG == "/Users/alice/.config/quest-runner/config.json") "the agent names the config's stable path, not its store path")
        (check (lib.hasInfix "launchctl kill SIGHUP" got.configFile.onChange) "a config change reloads the agent")
        (check (lib.hasInfix "launchctl kickstart -k" got.configFile.onChange) "a limits change restarts the agent")
      ];
  };

  home-darwin-process-type = {
    module = "home";
    system = "aarch64-darwin";
    config = lib.recursiveUpdate typicalHome {
      services.quest-runner.accounts.work.claude.apiKeyFile = "/Users/alice/anthropic";
      services.quest-runner.accounts.oc.opencode.authFile = "/Users/alice/auth.json";
      launchd.agents.quest-runner.config.ProcessType = "Interactive";
    };
    checks = got: [ (check (got.launchd.ProcessType == "Interactive") "ProcessType can be set") ];
  };
}
