//! The flake's modules and package, evaluated by this machine's Nix with nixpkgs' real `lib`
//! and the stand-ins of nix/eval for what NixOS, home-manager and nixpkgs would provide:
//! - every case of nix/eval/cases.nix: good configurations give the expected unit and config
//!   file, an operator's mistakes fail with an error (or assertion, or warning) naming them;
//! - `settings` has an option for every field of the runner's `Config`, and what the modules
//!   write is what the runner reads;
//! - the modules refuse account files where the runner does: its own list of the directories
//!   jobs' commands need;
//! - the package wraps the agents and srt npm/package-lock.json pins, refuses others, and the
//!   agents' executables still run after the package's ELF fix-up.
//!
//! The flake's package runs this file in its check phase too (nix/package.nix), so
//! `nix flake check` catches what CI catches.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use quest_runner::config::{
    Account, ClaudeAccount, Config, EventsConfig, LimitsConfig, MetricsConfig, MilliCpus,
    NetworkConfig, NixConfig, OpencodeAccount, PushConfig, QueueConfig, Webhook,
};
use quest_runner::disk::{DiskLimits, Reserve};
use quest_runner::sandbox::{private, Platform};

use crate::support::nix_eval;
use nix_eval::{eval, eval_lib, nix_instantiate, root, try_eval_lib};

const EVAL: &str = "import (root + \"/nix/eval\") { inherit lib root; }";

fn lock() -> serde_json::Value {
    let text = std::fs::read_to_string(root().join("npm/package-lock.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn lock_entry<'a>(lock: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    &lock["packages"][format!("node_modules/{name}")]
}

#[test]
fn module_cases_hold() {
    let Some(nix) = nix_instantiate("module_cases_hold") else {
        return;
    };
    let names = eval_lib(&nix, &format!("{{ root, lib }}: ({EVAL}).caseNames"));
    let errors = eval_lib(&nix, &format!("{{ root, lib }}: ({EVAL}).expectedErrors"));
    let names: Vec<&str> = names
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(names.len() >= 20, "{names:?}");
    let mut failed = Vec::new();
    for name in &names {
        let result = try_eval_lib(&nix, &format!("{{ root, lib }}: ({EVAL}).run \"{name}\""));
        match (errors.get(*name).and_then(|e| e.as_str()), result) {
            (Some(want), Err(stderr)) if stderr.contains(want) => {
                let first = stderr
                    .lines()
                    .find(|l| l.contains("error:") || l.contains(want))
                    .unwrap_or("");
                eprintln!("{name}: refused as expected: {}", first.trim());
            }
            (Some(want), Err(stderr)) => failed.push(format!(
                "{name}: the error does not say {want:?}:\n{stderr}"
            )),
            (Some(want), Ok(value)) => failed.push(format!(
                "{name}: evaluated, but must fail saying {want:?}: {value}"
            )),
            (None, Err(stderr)) => failed.push(format!("{name}: {stderr}")),
            (None, Ok(value)) if value["ok"] == true => eprintln!("{name}: ok"),
            (None, Ok(value)) => failed.push(format!(
                "{name}: {}\nevaluated: {:#}",
                value["failures"], value["evaluated"]
            )),
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

/// A `Config` with every field set, written out without `..Default::default()`: a field added
/// to src/config/ does not compile here until it is given a value — and then this test
/// names it until modules/settings.nix has its option.
fn full_config() -> Config {
    let mut accounts = BTreeMap::new();
    accounts.insert(
        "work".to_string(),
        Account::Claude(ClaudeAccount {
            api_key_file: Some("/var/lib/quest-runner/keys/anthropic".into()),
            credentials_file: Some("/var/lib/quest-runner/claude/.credentials.json".into()),
            base_url: Some("https://gateway.example.org".into()),
            model: Some("claude-sonnet-4-5".into()),
            budget: Some(2_000_000),
        }),
    );
    accounts.insert(
        "oc".to_string(),
        Account::Opencode(OpencodeAccount {
            auth_file: Some("/var/lib/quest-runner/opencode/auth.json".into()),
            config: Some(serde_json::json!({"small_model": "anthropic/claude-haiku-4-5"})),
            model: Some("anthropic/claude-sonnet-4-5".into()),
            budget: Some(1_000_000),
        }),
    );
    Config {
        nix: NixConfig {
            options: BTreeMap::from([("substituters".to_string(), String::new())]),
            ..NixConfig::default()
        },
        accounts,
        network: NetworkConfig {
            extra_hosts: vec!["git.example.org".into()],
            full_access_hosts: vec!["push.example.org".into()],
        },
        allow_untrusted: true,
        default_timeout: Duration::from_secs(45 * 60),
        concurrency_setting: Some(3),
        limits: LimitsConfig {
            memory: Some(4 << 30),
            pids: Some(512),
            cpus: Some(MilliCpus(1500)),
            disk: DiskLimits {
                limit: Some(20 << 30),
                files: Some(2_000_000),
                reserve: Reserve::Off,
                reserve_files: Reserve::Off,
            },
            tokens: Some(500_000),
        },
        queue: Some(QueueConfig {
            postgres: "postgresql://runner@db.example.org/quest".into(),
            password_file: Some("/run/keys/quest-runner-db".into()),
            lease: Some(Duration::from_secs(45)),
        }),
        push: BTreeMap::from([(
            "https://git.example.org/team/app.git".to_string(),
            PushConfig {
                remote: Some("git@git.example.org:team/app.git".into()),
                namespace: "quest".into(),
                branch: "job-{job}".into(),
                credential_file: Some("/run/keys/quest-runner-deploy-key".into()),
                username: Some("bot".into()),
                untrusted: true,
            },
        )]),
        metrics: MetricsConfig {
            listen: Some("127.0.0.1:9477".parse().unwrap()),
            public: false,
        },
        events: EventsConfig {
            webhooks: vec![Webhook {
                url: "https://hooks.example.org/quest".into(),
                secret_file: "/run/keys/quest-webhook".into(),
            }],
            command: vec![
                "/run/current-system/sw/bin/logger".into(),
                "-t".into(),
                "quest".into(),
            ],
            timeout: Some(Duration::from_secs(20)),
        },
        deps: quest_runner::config::DepsConfig {
            cache_size: 50 << 30,
            max_artifact: 1 << 30,
        },
        isolation: quest_runner::config::IsolationConfig {
            untrusted: quest_runner::sandbox::gvisor::Isolation::Gvisor,
            trusted: quest_runner::sandbox::gvisor::Isolation::Gvisor,
        },
    }
}

/// The same configuration as NixOS module options.
const FULL_MODULE_CONFIG: &str = r#"{
  services.quest-runner = {
    enable = true;
    settings = {
      nix.options.substituters = "";
      network.extra_hosts = [ "git.example.org" ];
      network.full_access_hosts = [ "push.example.org" ];
      allow_untrusted = true;
      default_timeout = "45m";
      concurrency = 3;
      metrics.listen = "127.0.0.1:9477";
      events = {
        webhooks = [ { url = "https://hooks.example.org/quest"; secret_file = "/run/keys/quest-webhook"; } ];
        command = [ "/run/current-system/sw/bin/logger" "-t" "quest" ];
        timeout = "20s";
      };
      deps = { cache_size = "50G"; max_artifact = "1G"; };
      isolation = { untrusted = "gvisor"; trusted = "gvisor"; };
      limits = { memory = "4G"; pids = 512; cpus = 1.5; disk = "20G"; disk_reserve = "off"; disk_files = 2000000; disk_reserve_files = "off"; tokens = 500000; };
      push."https://git.example.org/team/app.git" = {
        remote = "git@git.example.org:team/app.git";
        namespace = "quest";
        branch = "job-{job}";
        credential_file = "/run/keys/quest-runner-deploy-key";
        username = "bot";
        untrusted = true;
      };
    };
    queue.postgresql = {
      enable = true;
      url = "postgresql://runner@db.example.org/quest";
      passwordFile = "/run/keys/quest-runner-db";
      lease = "45s";
    };
    accounts.work.claude = {
      apiKeyFile = "/var/lib/quest-runner/keys/anthropic";
      credentialsFile = "/var/lib/quest-runner/claude/.credentials.json";
      baseUrl = "https://gateway.example.org";
      model = "claude-sonnet-4-5";
      budget = 2000000;
    };
    accounts.oc.opencode = {
      authFile = "/var/lib/quest-runner/opencode/auth.json";
      config.small_model = "anthropic/claude-haiku-4-5";
      model = "anthropic/claude-sonnet-4-5";
      budget = 1000000;
    };
  };
}"#;

/// Dotted paths of the leaves of `value`; the objects at `maps` (keys chosen by the operator,
/// not fields) are leaves themselves.
fn leaves(value: &serde_json::Value, prefix: &str, maps: &[&str], out: &mut Vec<String>) {
    match value.as_object() {
        Some(fields) if !maps.contains(&prefix) => {
            for (key, value) in fields {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                leaves(value, &path, maps, out);
            }
        }
        _ => out.push(prefix.to_string()),
    }
}

#[test]
fn settings_have_an_option_for_every_config_field() {
    let Some(nix) = nix_instantiate("settings_have_an_option_for_every_config_field") else {
        return;
    };
    // The runner's fields: every leaf of a fully set Config. `accounts` and `queue` are the
    // modules' own options (`queue.postgresql`); nix.options takes any Nix setting name.
    let full = full_config();
    let mut fields = Vec::new();
    leaves(
        &serde_json::to_value(&full).unwrap(),
        "",
        &["accounts", "nix.options", "push"],
        &mut fields,
    );
    fields.retain(|f| f != "accounts" && !f.starts_with("queue."));
    fields.sort();

    let options = eval_lib(
        &nix,
        r#"{ root, lib }:
        let
          settings = lib.evalModules { modules = [ (import (root + "/modules/settings.nix") { inherit lib; }) ]; };
          leaves = prefix: options: lib.concatLists (lib.mapAttrsToList (name: o:
            if lib.isOption o then [ (prefix + name) ] else leaves "${prefix}${name}." o
          ) (removeAttrs options [ "_module" ]));
        in leaves "" settings.options"#,
    );
    let mut options: Vec<String> = options
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_str().unwrap().to_string())
        .collect();
    options.sort();
    let missing: Vec<&String> = fields.iter().filter(|f| !options.contains(f)).collect();
    let unknown: Vec<&String> = options.iter().filter(|o| !fields.contains(o)).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "src/config/ and modules/settings.nix disagree:\n  fields without an option: {missing:?}\n  options the runner does not read: {unknown:?}"
    );
    eprintln!("settings options = Config fields: {options:?}");

    // What the module writes from those options is exactly that Config.
    let written = eval_lib(
        &nix,
        &format!("{{ root, lib }}: (({EVAL}).nixos \"x86_64-linux\" {FULL_MODULE_CONFIG}).config"),
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&written).unwrap()).unwrap();
    let loaded = Config::load(&path, true)
        .unwrap_or_else(|e| panic!("the modules' config does not load: {e}\n{written:#}"));
    assert_eq!(loaded, full, "{written:#}");
}

#[test]
fn module_assertions_use_the_runners_needed_directories() {
    let Some(nix) = nix_instantiate("module_assertions_use_the_runners_needed_directories") else {
        return;
    };
    let needed = eval_lib(
        &nix,
        "{ root, lib }: (import (root + \"/modules/lib.nix\") { inherit lib; pkgs = { }; }).neededDirs",
    );
    for (platform, key) in [(Platform::Linux, "linux"), (Platform::Macos, "darwin")] {
        let want: Vec<(String, bool)> = private::needed(platform)
            .iter()
            .map(|n| (n.path.to_string(), n.scope == private::Scope::Tree))
            .collect();
        let got: Vec<(String, bool)> = needed[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| {
                (
                    n["path"].as_str().unwrap().to_string(),
                    n["tree"].as_bool().unwrap(),
                )
            })
            .collect();
        assert_eq!(got, want, "modules/lib.nix neededDirs.{key}");
    }
}

#[test]
fn package_wraps_the_locked_agents() {
    let Some(nix) = nix_instantiate("package_wraps_the_locked_agents") else {
        return;
    };
    let versions = eval_lib(&nix, &format!("{{ root, lib }}: ({EVAL}).agentVersions"));
    let lock = lock();
    let agents = [
        (
            "claude-code",
            "@anthropic-ai/claude-code",
            "@anthropic-ai/claude-code",
        ),
        ("opencode", "opencode-ai", "opencode"),
        ("sandbox-runtime", "@anthropic-ai/sandbox-runtime", ""),
    ];
    let platforms = [
        ("x86_64-linux", "linux-x64"),
        ("aarch64-linux", "linux-arm64"),
        ("x86_64-darwin", "darwin-x64"),
        ("aarch64-darwin", "darwin-arm64"),
    ];
    eprintln!(
        "{:<16} {:<16} {:>10} {:>10}",
        "system", "package", "wrapped", "lock"
    );
    for (system, platform) in platforms {
        for (name, package, prefix) in agents {
            let got = &versions[system][name];
            let locked = lock_entry(&lock, package)["version"].as_str().unwrap();
            eprintln!(
                "{system:<16} {name:<16} {:>10} {:>10}",
                got["wrapped"].as_str().unwrap_or("(none)"),
                got["lock"].as_str().unwrap()
            );
            assert_eq!(got["lock"], locked, "{system} {name}");
            // Each agent's native binary is its platform package; srt is JavaScript.
            let pinned =
                prefix.is_empty() || lock_entry(&lock, &format!("{prefix}-{platform}")).is_object();
            if pinned {
                assert_eq!(got["wrapped"], locked, "{system} {name}");
            } else {
                assert!(got["wrapped"].is_null(), "{system} {name}: {got}");
            }
        }
    }
    // This machine's: both agents, as the tests run them.
    for (name, _, _) in agents {
        assert!(
            versions["x86_64-linux"][name]["wrapped"].is_string(),
            "{name}"
        );
    }
}

#[test]
fn agent_binaries_are_fetched_at_the_npm_pins() {
    let Some(nix) = nix_instantiate("agent_binaries_are_fetched_at_the_npm_pins") else {
        return;
    };
    let agents = eval(
        &nix,
        "{ root }: (import (root + \"/nix/npm-lock.nix\") (root + \"/npm/package-lock.json\")).agents",
    );
    let lock = lock();
    let mut pinned = 0;
    for (agent, prefix) in [
        ("claude-code", "@anthropic-ai/claude-code"),
        ("opencode", "opencode"),
    ] {
        for (system, pin) in agents[agent]["binaries"].as_object().unwrap() {
            if pin.is_null() {
                continue;
            }
            let name = pin["name"].as_str().unwrap();
            assert!(name.starts_with(&format!("{prefix}-")), "{system}: {name}");
            let entry = lock_entry(&lock, name);
            assert_eq!(pin["version"], entry["version"], "{name}");
            assert_eq!(pin["hash"], entry["integrity"], "{name}");
            let unscoped = name.rsplit('/').next().unwrap();
            let url = format!(
                "https://registry.npmjs.org/{name}/-/{unscoped}-{}.tgz",
                entry["version"].as_str().unwrap()
            );
            assert_eq!(pin["url"], url.as_str(), "{name}");
            pinned += 1;
        }
    }
    // Claude Code for all four systems, opencode at least for this machine's.
    assert!(pinned >= 5, "{agents:#}");
}

#[test]
fn package_refuses_agents_the_lock_does_not_pin() {
    let Some(nix) = nix_instantiate("package_refuses_agents_the_lock_does_not_pin") else {
        return;
    };
    // nixpkgs' claude-code (2.1.90 in recent copies) handed to the package instead of the lock's.
    let err = try_eval_lib(
        &nix,
        &format!(
            "{{ root, lib }}: (({EVAL}).packageWith \"x86_64-linux\" (pkgs: {{ \
               claude-code = pkgs.stdenv.mkDerivation {{ pname = \"claude-code\"; version = \"2.1.90\"; meta.mainProgram = \"claude\"; }}; \
             }})).passthru.agentVersions"
        ),
    )
    .unwrap_err();
    assert!(
        err.contains("quest-runner wraps agents at other versions than npm/package-lock.json pins: claude-code 2.1.90 (lock: 2.1.332)"),
        "{err}"
    );

    // A lock whose platform binary is of another release than its package.
    let mut lock = lock();
    lock["packages"]["node_modules/opencode-linux-x64"]["version"] = "1.18.32".into();
    let dir = tempfile::tempdir().unwrap();
    let drifted = dir.path().join("package-lock.json");
    std::fs::write(&drifted, serde_json::to_vec(&lock).unwrap()).unwrap();
    let err = try_eval_lib(
        &nix,
        &format!(
            "{{ root, lib }}: (import (root + \"/nix/npm-lock.nix\") {}).agents.opencode.binaries.x86_64-linux",
            drifted.display()
        ),
    )
    .unwrap_err();
    assert!(
        err.contains("opencode-linux-x64 is 1.18.32 but opencode-ai is 1.18.33"),
        "{err}"
    );
}

/// A copy of the host's dynamic loader and C library at a store-like path longer than the
/// executables' own interpreter, so that setting it moves their sections as it does for the
/// Nix package.
fn store_like_glibc(dir: &Path) -> Option<PathBuf> {
    let lib = dir.join("0123456789abcdfghijklmnpqrsvwxyz-glibc-2.40-66/lib");
    std::fs::create_dir_all(&lib).unwrap();
    let loader = std::fs::canonicalize("/lib64/ld-linux-x86-64.so.2").ok()?;
    std::fs::copy(&loader, lib.join("ld-linux-x86-64.so.2")).unwrap();
    for name in [
        "libc.so.6",
        "libpthread.so.0",
        "libdl.so.2",
        "libm.so.6",
        "librt.so.1",
    ] {
        std::fs::copy(
            Path::new("/lib/x86_64-linux-gnu").join(name),
            lib.join(name),
        )
        .ok()?;
    }
    Some(lib)
}

#[test]
fn agent_executables_run_after_the_packages_elf_fix_up() {
    let modules = root().join("npm/node_modules");
    let lock = lock();
    let executables = [
        (
            "@anthropic-ai/claude-code",
            modules.join("@anthropic-ai/claude-code-linux-x64/claude"),
        ),
        (
            "opencode-ai",
            modules.join("opencode-linux-x64/bin/opencode"),
        ),
    ];
    let (Ok(patchelf), Ok(python)) = (which::which("patchelf"), which::which("python3")) else {
        eprintln!("SKIPPED: patchelf or python3 is not on PATH (scripts/setup installs both)");
        return;
    };
    if std::env::consts::ARCH != "x86_64" || executables.iter().any(|(_, e)| !e.is_file()) {
        eprintln!("SKIPPED: no x86_64-linux agents in npm/node_modules");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(glibc) = store_like_glibc(dir.path()) else {
        eprintln!("SKIPPED: this host's glibc is not where Debian keeps it");
        return;
    };
    for (package, executable) in executables {
        let version = lock_entry(&lock, package)["version"].as_str().unwrap();
        let copy = dir.path().join(executable.file_name().unwrap());
        std::fs::copy(&executable, &copy).unwrap();
        // What autoPatchelfHook does: the store's loader and libraries.
        let out = Command::new(&patchelf)
            .arg("--set-interpreter")
            .arg(glibc.join("ld-linux-x86-64.so.2"))
            .arg("--set-rpath")
            .arg(&glibc)
            .arg(&copy)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let run = |what: &str| {
            let out = Command::new(&copy)
                .arg("--version")
                .env("HOME", dir.path())
                .output()
                .unwrap();
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            eprintln!("{package} {what}: {} {}", out.status, said.trim());
            (out.status.success(), said)
        };
        run("patched by patchelf alone");
        let out = Command::new(&python)
            .arg(root().join("nix/fix-dt-verdef.py"))
            .arg(&copy)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("{}", String::from_utf8_lossy(&out.stdout).trim());
        let (ok, said) = run("after nix/fix-dt-verdef.py");
        assert!(
            ok && said.split_whitespace().any(|w| w == version),
            "{package}: {said}"
        );
    }
}

/// nix/checks.nix's own evaluations (the module cases, the agents' versions), with the
/// stand-ins in place of nixpkgs: `nix flake check` is not possible here, so at least its
/// code runs.
#[test]
fn flake_checks_evaluate() {
    let Some(nix) = nix_instantiate("flake_checks_evaluate") else {
        return;
    };
    let checks = eval_lib(
        &nix,
        &format!(
            r#"{{ root, lib }}:
            let
              eval = {EVAL};
              pkgs = eval.pkgsFor "x86_64-linux";
              checks = import (root + "/nix/checks.nix") {{
                inherit pkgs lib;
                self = eval.flake // {{ outPath = root; packages.x86_64-linux.default = pkgs.quest-runner; }};
                nixpkgs = {{ lib = lib // {{ inherit (eval) nixosSystem; }}; }};
                nixFiles = [ ];
              }};
            in {{ modules = checks.modules.text; agents = checks.agent-versions.text; }}"#
        ),
    );
    let modules: serde_json::Value =
        serde_json::from_str(checks["modules"].as_str().unwrap()).unwrap();
    assert!(
        modules["cases"].as_array().unwrap().len() >= 20,
        "{modules}"
    );
    assert!(modules["toplevel"].is_string(), "{modules}");
    let agents: serde_json::Value =
        serde_json::from_str(checks["agents"].as_str().unwrap()).unwrap();
    assert_eq!(
        agents["claude-code"]["wrapped"],
        agents["claude-code"]["lock"]
    );
}

/// The options reference `scripts/nixos-options` prints is the NixOS module's own options as
/// nix/eval's `optionsDoc` renders them (descriptions written once, in the module), and every
/// option there says what it is for.
#[test]
fn the_options_reference_renders_every_option_with_a_description() {
    let Some(nix) =
        nix_instantiate("the_options_reference_renders_every_option_with_a_description")
    else {
        return;
    };
    let doc = eval_lib(&nix, &format!("{{ root, lib }}: ({EVAL}).optionsDoc"));
    let doc = doc.as_str().unwrap();
    let sections: Vec<&str> = doc.split("\n## `").skip(1).collect();
    assert!(sections.len() >= 40, "{} options:\n{doc}", sections.len());
    for section in sections {
        let (name, rest) = section.split_once('`').unwrap();
        let description = rest.split("*Type:*").next().unwrap_or("").trim();
        assert!(
            description.len() >= 20,
            "services.quest-runner option {name} has no description to speak of: {description:?}"
        );
    }
}
