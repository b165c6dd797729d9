# The runner's configuration file — the `Config` struct of src/config/mod.rs — as typed options:
# one option per field the runner reads, and no others. A misspelt key or a value of the wrong
# kind fails evaluation, naming the option, instead of passing and crash-looping the service
# at its next start ("unknown field"). Freeform only where the runner itself takes arbitrary
# keys: nix.options. Accounts are not here but in the modules' `accounts` option (typed per
# agent, paths only).
#
# Adding a field to src/config/? Add its option here, in the same place of the tree with the
# same (snake_case) name: tests/suite/deploy.rs compares the two and names what one has and the
# other lacks, and checks the JSON written from a full set of options loads in the runner.
{ lib }:
let
  inherit (lib) mkOption types;
  t = import ./types.nix { inherit lib; };

  optional =
    type: description:
    mkOption {
      type = types.nullOr type;
      default = null;
      inherit description;
    };
in
{
  options = {
    default_timeout = mkOption {
      type = t.duration;
      default = "1h";
      description = "The timeout of a job that names none.";
    };

    allow_untrusted = mkOption {
      type = types.bool;
      default = false;
      description = "Run untrusted revisions (no network, no devShell) instead of refusing them.";
    };

    concurrency = optional types.ints.positive ''
      How many jobs `serve` runs at once. Null leaves the runner's default: one per core.
      Applied on reload.
    '';

    network = {
      extra_hosts = mkOption {
        type = types.listOf t.host;
        default = [ ];
        example = [ "git.example.org" ];
        description = "Hosts trusted revisions may reach besides the package registries, for reads only (GET, HEAD).";
      };
      full_access_hosts = mkOption {
        type = types.listOf t.host;
        default = [ ];
        description = "Hosts trusted revisions may reach with every method (PUT, POST, ...): where jobs may publish or push.";
      };
    };

    nix.options = mkOption {
      type = types.attrsOf t.text;
      default = { };
      example = {
        substituters = "";
      };
      description = ''
        Extra `--option NAME VALUE` pairs for every `nix` the runner starts. Names are Nix
        setting names (letters, digits, `-`, `_`).
      '';
    };

    nix.network = optional (types.enum [
      "proxy"
      "none"
      "host"
    ]) ''
      The network of the devShell's nix inside the job's boundary: `proxy` (the runner's
      default) is the job's own, through its proxy and decider to the hosts the job may reach
      (name the hosts flake inputs and caches need in `network.extra_hosts`), each request in
      the job's network log; `none` gives it none, so a revision builds from the store; `host`
      lets trusted revisions fetch over the host's network, and so reach whatever the host
      reaches.
    '';

    push = mkOption {
      type = types.attrsOf (
        types.submodule {
          options = {
            remote = optional t.text "Where to push. Null: the job's repository (its origin).";
            namespace = mkOption {
              type = t.text;
              example = "quest";
              description = "Every pushed branch is under `<namespace>/`; the runner refuses a template that would leave it.";
            };
            branch = mkOption {
              type = t.text;
              default = "{job}";
              description = "The branch under the namespace; `{job}` is the job's id.";
            };
            credential_file = optional t.runtimePath ''
              An SSH deploy key (ssh remotes) or an HTTPS token (http(s) remotes), read by the
              runner's git at push time; a private file the jobs' sandbox hides with its directory.
            '';
            username = optional t.text "The user name sent with an HTTPS token (runner's default: x-access-token).";
            untrusted = mkOption {
              type = types.bool;
              default = false;
              description = "Push untrusted jobs' commits too.";
            };
          };
        }
      );
      default = { };
      example = {
        "https://github.com/acme/app.git" = {
          namespace = "quest";
          credential_file = "/run/secrets/quest-push-token";
        };
      };
      description = ''
        Where finished jobs' commits are pushed, by repository (its URL exactly as jobs name
        it): to `refs/heads/<namespace>/<branch>`, created and never forced over a branch the
        runner did not make. A repository not named here is never pushed.
      '';
    };

    metrics = {
      listen = optional t.text ''
        Where `serve` answers `/metrics` (Prometheus' text format), `/healthz` and `/readyz`,
        e.g. "127.0.0.1:9477". Null (the default): no listener. The module opens no firewall
        port for it.
      '';
      public = optional types.bool "Allow a non-loopback `metrics.listen` (the runner refuses one otherwise).";
    };

    # Read when `serve` starts: SIGHUP does not change where events go.
    events = {
      webhooks = mkOption {
        type = types.listOf (
          types.submodule {
            options = {
              url = mkOption {
                type = t.text;
                example = "https://hooks.example.org/quest";
                description = "An http:// or https:// URL each job event is POSTed to, as JSON.";
              };
              secret_file = mkOption {
                type = t.runtimePath;
                example = "/run/secrets/quest-webhook";
                description = ''
                  The HMAC-SHA256 key the body is signed with (header
                  `X-Quest-Signature-256: sha256=<hex>`), the file's content without a final
                  newline, read when `serve` starts; a private file the jobs' sandbox hides with
                  its directory.
                '';
              };
            };
          }
        );
        default = [ ];
        description = ''
          Receivers of the job events (a job's start and end, its result's fields and push
          outcome; never its prompt, transcript or a secret). Each is tried 3 times (5 s each,
          1 s then 2 s apart); a job never waits for it. Failures are logged and counted in
          `quest_runner_events_failed_total`.
        '';
      };
      command = mkOption {
        type = types.listOf t.text;
        default = [ ];
        example = [
          "/run/current-system/sw/bin/logger"
          "-t"
          "quest-event"
        ];
        description = ''
          A trusted operator hook: this argv (the program an absolute path) runs as the runner
          for each job event, the event's JSON on its stdin. Empty: none.
        '';
      };
      timeout = optional t.duration "How long the events command may run before it is killed (runner's default: 10s).";
    };

    # The dependency cache every job's locked artifacts are fetched into and served from.
    deps = {
      cache_size = optional t.size "The most the dependency cache holds; past it, the least recently used artifacts are removed after a job's fetch (default: 20G).";
      max_artifact = optional t.size "The largest artifact a lock may pin; a larger one is refused and nothing of it stored (default: 2G).";
    };

    # Which kernel answers each trust level's commands (docs/security.md, "gVisor").
    isolation = {
      untrusted = optional (types.enum [ "namespace" "gvisor" ]) ''
        Where an untrusted revision's commands run: `namespace` (the host's kernel behind srt's
        namespaces and seccomp filter) or `gvisor` (gVisor's kernel inside them; runsc must run
        here, or these jobs are refused). Runner's default: namespace.
      '';
      trusted = optional (types.enum [ "namespace" "gvisor" ]) "Where a trusted revision's commands run, as `untrusted` (runner's default: namespace).";
    };

    # Read when `serve` starts: a change restarts the service (the modules' restart triggers).
    limits = {
      memory = optional t.size "memory.max of each job.";
      pids = optional types.ints.positive "pids.max of each job (RLIMIT_NPROC where there is no pids controller).";
      cpus = optional t.cpus "cpu.max of each job, in CPUs: a job is throttled to that share.";
      disk = optional t.sizeOrOff "The most one job may have on disk at once (checkout, temp dirs, its files and git data), or `off` (default: 10G).";
      disk_reserve = optional t.sizeOrOff "Space kept free on the file systems jobs write, or `off` (default: 1G or 5% of the file system, the smaller).";
      disk_files = optional t.countOrOff "The most files (inodes) one job may have at once, counted where `disk` is, or `off` (default: 1000000).";
      disk_reserve_files = optional t.countOrOff "Inodes kept free on the file systems jobs write, or `off` (default: 65536 or 5% of the file system's, the smaller).";
      tokens = optional types.ints.positive ''
        The most model tokens a job may use (input, output, cache reads and writes), counted by
        the runner's model gateway: the request after the one that reaches it is refused and the
        job ends with `limit_fired = "tokens"`.
      '';
    };
  };
}
