use super::*;

fn ws() -> WorkspacePaths {
    WorkspacePaths {
        checkout: "/var/lib/quest-runner/jobs/j1/checkout".into(),
        bare_clone: "/var/lib/quest-runner/repos/abc.git".into(),
        git_store: "/var/lib/quest-runner/jobs/j1/git".into(),
        worktree_admin: "/var/lib/quest-runner/jobs/j1/git/worktrees/checkout".into(),
        temp_dir: "/tmp/quest-job-x1".into(),
        job_dir: "/var/lib/quest-runner/jobs/j1/runner".into(),
        helper_tmp: "/tmp/quest-srt-abc123".into(),
        devshell_script: Some("/var/lib/quest-runner/jobs/j1/runner/devshell.sh".into()),
    }
}

fn inputs(trust: Trust) -> PolicyInputs {
    PolicyInputs {
        platform: Platform::Linux,
        trust,
        extra_hosts: vec!["git.example.org".into()],
        full_access_hosts: Vec::new(),
        dependency_hosts: Vec::new(),
        state_dir: "/var/lib/quest-runner".into(),
        operator_home: Some("/home/runner".into()),
        private: vec![
            hidden(
                "accounts.a.api_key_file",
                "/opt/keys/anthropic",
                &["/opt/keys"],
            ),
            hidden(
                "the config file",
                "/etc/quest-runner/config.json",
                &["/etc/quest-runner"],
            ),
        ],
    }
}

fn hidden(what: &str, file: &str, dirs: &[&str]) -> HiddenFile {
    HiddenFile {
        what: what.into(),
        file: file.into(),
        dirs: dirs
            .iter()
            .map(|d| crate::sandbox::private::HiddenDir {
                dir: d.into(),
                link: None,
            })
            .collect(),
    }
}

/// A private file is hidden with its whole directory, never by its name: a file renamed over
/// it (a key rotation) or beside it is hidden as well.
#[test]
fn private_files_are_hidden_with_their_directories() {
    let p = plan(&ws(), &inputs(Trust::Trusted));
    for path in [
        "/opt/keys/anthropic",
        "/opt/keys/anthropic.new",
        "/opt/keys/.anthropic.tmp",
        "/etc/quest-runner/config.json",
    ] {
        assert!(!p.may_read(Path::new(path)), "{path}");
    }
    assert!(p.deny_read.contains(&PathBuf::from("/opt/keys")));
    assert!(!p.deny_read.contains(&PathBuf::from("/opt/keys/anthropic")));
    assert!(p.may_read(Path::new("/opt/other/tool")));
    assert!(p.may_read(Path::new("/etc/passwd")));
    assert_eq!(p.private, inputs(Trust::Trusted).private);
    // sops-nix and agenix generations, whatever the links point to at the job's start.
    for path in ["/run/secrets.d/2/key", "/run/agenix.d/7/key"] {
        assert!(!p.may_read(Path::new(path)), "{path}");
    }
}

/// With the runner's `TMPDIR` elsewhere than `/tmp`, the other jobs' temp dirs beside this
/// one's are denied as they are in `/tmp`.
#[test]
fn other_jobs_temp_dirs_are_denied_wherever_tmpdir_is() {
    let mut paths = ws();
    paths.temp_dir = "/scratch/quest-job-x1".into();
    paths.helper_tmp = "/scratch/quest-srt-x1".into();
    let p = plan(&paths, &inputs(Trust::Trusted));
    assert!(p.may_read(Path::new("/scratch/quest-job-x1/file")));
    assert!(p.may_write(Path::new("/scratch/quest-job-x1/file")));
    assert!(!p.may_read(Path::new("/scratch/quest-job-other/secret")));
    assert!(!p.may_read(Path::new("/scratch/unrelated")));
}

#[test]
fn reads_are_confined_to_the_workspace_and_the_system() {
    let p = plan(&ws(), &inputs(Trust::Trusted));
    for readable in [
        "/var/lib/quest-runner/jobs/j1/checkout/src/main.rs",
        "/var/lib/quest-runner/repos/abc.git/objects/ab/cd",
        "/var/lib/quest-runner/jobs/j1/git/objects/ab/cd",
        "/var/lib/quest-runner/jobs/j1/git/config",
        "/tmp/quest-job-x1/.cache",
        "/var/lib/quest-runner/jobs/j1/runner/devshell.sh",
        "/nix/store/abc-bash/bin/bash",
        "/usr/bin/env",
        "/etc/passwd",
    ] {
        assert!(p.may_read(Path::new(readable)), "{readable}");
    }
    for secret in [
        "/home/runner/.ssh/id_ed25519",
        "/root/.claude/.credentials.json",
        "/run/user/0/bus",
        "/tmp/quest-job-other/x",
        "/tmp/claude",
        "/var/lib/quest-runner/config.json",
        "/var/lib/quest-runner/jobs/j1/runner/claude/.credentials.json",
        "/var/lib/quest-runner/jobs/j2/checkout/x",
        "/var/lib/quest-runner/jobs/j2/git/objects/ab/cd",
        "/var/lib/quest-runner/repos/abc.git/refs/heads/main",
        "/var/lib/quest-runner/repos/abc.git/config",
        "/var/lib/quest-runner/repos/other.git/objects/ab/cd",
        "/etc/shadow",
        "/etc/ssh/ssh_host_ed25519_key",
        "/run/secrets/anthropic",
        "/run/credentials/quest-runner.service/key",
        "/opt/keys/anthropic",
        "/etc/quest-runner/config.json",
    ] {
        assert!(!p.may_read(Path::new(secret)), "{secret}");
    }
}

#[test]
fn writes_are_confined_and_git_config_is_read_only() {
    let p = plan(&ws(), &inputs(Trust::Trusted));
    for writable in [
        "/var/lib/quest-runner/jobs/j1/checkout/src/main.rs",
        "/tmp/quest-job-x1/x",
        "/var/lib/quest-runner/jobs/j1/git/objects/ab/cd",
        "/var/lib/quest-runner/jobs/j1/git/refs/heads/main",
        "/var/lib/quest-runner/jobs/j1/git/logs/HEAD",
        "/var/lib/quest-runner/jobs/j1/git/worktrees/checkout/HEAD",
        "/var/lib/quest-runner/jobs/j1/git/worktrees/checkout/index",
    ] {
        assert!(p.may_write(Path::new(writable)), "{writable}");
    }
    for protected in [
        // Nothing of the shared clone: later jobs check out from it.
        "/var/lib/quest-runner/repos/abc.git/objects/ab/cd",
        "/var/lib/quest-runner/repos/abc.git/refs/replace/ab",
        "/var/lib/quest-runner/repos/abc.git/hooks/pre-commit",
        "/var/lib/quest-runner/repos/abc.git/config",
        // The store's configuration, alternates and the pointers between it and the checkout.
        "/var/lib/quest-runner/jobs/j1/git/config",
        "/var/lib/quest-runner/jobs/j1/git/HEAD",
        "/var/lib/quest-runner/jobs/j1/git/info/exclude",
        "/var/lib/quest-runner/jobs/j1/git/hooks/pre-commit",
        "/var/lib/quest-runner/jobs/j1/git/commondir",
        "/var/lib/quest-runner/jobs/j1/git/objects/info/alternates",
        "/var/lib/quest-runner/jobs/j1/git/worktrees/checkout/commondir",
        "/var/lib/quest-runner/jobs/j1/git/worktrees/checkout/gitdir",
        "/var/lib/quest-runner/jobs/j1/git/worktrees/checkout/config.worktree",
        "/var/lib/quest-runner/jobs/j1/checkout/.git",
        "/tmp/quest-job-x1/.config/git/config",
        "/tmp/quest-job-x1/.config/git/attributes",
        "/var/lib/quest-runner/jobs/j1/runner/devshell.sh",
        "/tmp/x",
        "/home/runner/.bashrc",
        "/var/lib/quest-runner/jobs/j2/git/worktrees/checkout/HEAD",
    ] {
        assert!(!p.may_write(Path::new(protected)), "{protected}");
    }
}

#[test]
fn network_follows_trust() {
    let trusted = plan(&ws(), &inputs(Trust::Trusted));
    for host in REGISTRIES {
        assert!(trusted.allowed_hosts.iter().any(|h| h == host));
    }
    assert!(trusted.allowed_hosts.iter().any(|h| h == "git.example.org"));
    assert!(!trusted.allowed_hosts.iter().any(|h| h == "crates.io"));
    assert!(trusted.network_summary().contains("registry.npmjs.org"));
    let untrusted = plan(&ws(), &inputs(Trust::Untrusted));
    assert!(untrusted.allowed_hosts.is_empty());
    assert!(untrusted.network_summary().contains("no network"));
}

#[test]
fn environment_keeps_only_the_allowlist() {
    let p = plan(&ws(), &inputs(Trust::Trusted));
    let host_env = [
        ("PATH", "/usr/bin"),
        ("LANG", "C.UTF-8"),
        ("LC_ALL", "C.UTF-8"),
        ("HTTPS_PROXY", "http://proxy:3128"),
        ("SSL_CERT_FILE", "/etc/ssl/certs/ca.pem"),
        ("HOME", "/home/runner"),
        ("TMPDIR", "/tmp"),
        ("SSH_AUTH_SOCK", "/run/user/0/ssh"),
        ("AWS_SECRET_ACCESS_KEY", "x"),
        ("GH_TOKEN", "x"),
        ("ANTHROPIC_API_KEY", "x"),
        ("OPENAI_API_KEY", "x"),
        ("OPENCODE_SERVER_PASSWORD", "x"),
        ("XDG_DATA_HOME", "/home/runner/.local/share"),
        ("GOOGLE_APPLICATION_CREDENTIALS", "x"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()));
    let env = p.environment(host_env);
    // The job CA's trust variables are the policy's own (see the test below).
    let keys: Vec<&str> = env
        .keys()
        .map(String::as_str)
        .filter(|k| {
            !TRUST_VARS.iter().any(|v| v.name == *k) && !RETRY_VARS.iter().any(|(v, _)| v == k)
        })
        .collect();
    assert_eq!(
        keys,
        [
            "GIT_AUTHOR_EMAIL",
            "GIT_AUTHOR_NAME",
            "GIT_COMMITTER_EMAIL",
            "GIT_COMMITTER_NAME",
            "GIT_CONFIG_NOSYSTEM",
            "GIT_TERMINAL_PROMPT",
            "HOME",
            "HTTPS_PROXY",
            "LANG",
            "LC_ALL",
            "PATH",
            "SHELL",
            "TMPDIR"
        ]
    );
    assert_eq!(env["HOME"], "/tmp/quest-job-x1");
    assert_eq!(env["TMPDIR"], "/tmp/quest-job-x1");
}

#[test]
fn macos_paths() {
    let mut i = inputs(Trust::Untrusted);
    i.platform = Platform::Macos;
    i.operator_home = Some("/Users/op".into());
    let mut w = ws();
    w.temp_dir = "/private/tmp/quest-job-x1".into();
    let p = plan(&w, &i);
    assert!(!p.may_read(Path::new("/Users/op/.ssh/id_rsa")));
    assert!(!p.may_read(Path::new("/Users/op/Library/Keychains/login.keychain-db")));
    assert!(!p.may_read(Path::new("/private/tmp/other")));
    assert!(p.may_read(Path::new("/private/tmp/quest-job-x1/a")));
    assert!(!p.may_read(Path::new("/Library/Keychains/System.keychain")));
}

#[test]
fn trusted_jobs_trust_their_own_ca_and_registries_answer_reads_only() {
    let p = plan(&ws(), &inputs(Trust::Trusted));
    let ca = p.ca.clone().expect("a trusted job has a CA");
    assert!(ca.cert.starts_with(&ws().job_dir) && ca.bundle.starts_with(&ws().job_dir));
    assert!(p.may_read(&ca.cert) && p.may_read(&ca.bundle));
    assert!(!p.may_write(&ca.cert) && !p.may_write(&ca.bundle));
    let env = p.environment(vec![(
        "SSL_CERT_FILE".to_string(),
        "/elsewhere".to_string(),
    )]);
    for var in TRUST_VARS {
        let want = match var.file {
            TrustFile::Bundle if var.name == "UV_NATIVE_TLS" => "true".to_string(),
            TrustFile::Bundle => ca.bundle.to_string_lossy().into_owned(),
            TrustFile::Cert => ca.cert.to_string_lossy().into_owned(),
            TrustFile::JavaOptions => format!(
                "-Djavax.net.ssl.trustStore={} -Djavax.net.ssl.trustStoreType=PKCS12",
                ca.java_trust_store.display()
            ),
        };
        assert_eq!(env.get(var.name), Some(&want), "{}", var.name);
    }
    assert!(p.may_read(&ca.java_trust_store) && !p.may_write(&ca.java_trust_store));
    assert_eq!(p.read_only_methods, ["GET", "HEAD"]);
    assert!(p.full_access_hosts.is_empty());

    let mut i = inputs(Trust::Trusted);
    i.full_access_hosts = vec!["git.example.org".into(), "push.example.org".into()];
    let p = plan(&ws(), &i);
    assert_eq!(p.full_access_hosts, ["git.example.org", "push.example.org"]);
    assert!(p.allowed_hosts.iter().any(|h| h == "push.example.org"));

    let untrusted = plan(&ws(), &inputs(Trust::Untrusted));
    assert!(untrusted.ca.is_none() && untrusted.full_access_hosts.is_empty());
    let env = untrusted.environment(Vec::new());
    assert!(!env.contains_key("NODE_EXTRA_CA_CERTS"));
}

/// The variable that beats each common package manager's file configuration is set: npm's
/// `cafile` in a global npmrc, pip's `cert` in pip.conf, and so on.
#[test]
fn every_common_client_has_its_overriding_variable() {
    let p = plan(&ws(), &inputs(Trust::Trusted));
    let env = p.environment(Vec::new());
    for name in [
        "npm_config_cafile",
        "YARN_HTTPS_CA_FILE_PATH",
        "NODE_EXTRA_CA_CERTS",
        "DENO_CERT",
        "PIP_CERT",
        "REQUESTS_CA_BUNDLE",
        "SSL_CERT_FILE",
        "UV_NATIVE_TLS",
        "CARGO_HTTP_CAINFO",
        "GIT_SSL_CAINFO",
        "CURL_CA_BUNDLE",
        "NIX_SSL_CERT_FILE",
        "BUNDLE_SSL_CA_CERT",
        "JAVA_TOOL_OPTIONS",
    ] {
        assert!(env.contains_key(name), "{name}");
    }
}

/// A state directory with a space: the JVM splits its options at whitespace.
#[test]
fn java_options_quote_a_path_with_spaces() {
    let ca = CaFiles {
        cert: "/s d/ca.pem".into(),
        bundle: "/s d/b.pem".into(),
        java_trust_store: "/s d/ca.p12".into(),
    };
    let java = TRUST_VARS
        .iter()
        .find(|v| v.name == "JAVA_TOOL_OPTIONS")
        .unwrap();
    assert_eq!(
        java.value(&ca),
        "\"-Djavax.net.ssl.trustStore=/s d/ca.p12\" -Djavax.net.ssl.trustStoreType=PKCS12"
    );
}

/// The prelude, run by bash as each command's first lines, points the package managers' proxy
/// settings at the sandbox's proxy and gives the JVM its proxy properties; an untrusted job
/// (no proxy) gets none.
#[test]
fn the_prelude_points_package_managers_at_the_sandboxs_proxy() {
    let p = plan(&ws(), &inputs(Trust::Trusted));
    let script = format!(
        "{}env | grep -E '^(npm_config_|YARN_|PIP_PROXY|CARGO_HTTP_PROXY|JAVA_TOOL_OPTIONS)' | sort",
        p.command_prelude()
    );
    let out = std::process::Command::new("bash")
        .args(["--noprofile", "--norc", "-c", &script])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HTTP_PROXY", "http://localhost:3128")
        .env("HTTPS_PROXY", "http://localhost:3128")
        .env("NO_PROXY", "localhost,127.0.0.1")
        .env("JAVA_TOOL_OPTIONS", "-Dx=y")
        .output()
        .expect("bash runs");
    let env = String::from_utf8_lossy(&out.stdout);
    for line in [
        "CARGO_HTTP_PROXY=http://localhost:3128",
        "JAVA_TOOL_OPTIONS=-Dx=y -Dhttps.proxyHost=localhost -Dhttps.proxyPort=3128 -Dhttp.proxyHost=localhost -Dhttp.proxyPort=3128",
        "PIP_PROXY=http://localhost:3128",
        "YARN_HTTPS_PROXY=http://localhost:3128",
        "npm_config_https_proxy=http://localhost:3128",
        "npm_config_proxy=http://localhost:3128",
    ] {
        assert!(env.lines().any(|l| l == line), "{line} in:\n{env}");
    }
    assert!(!env.contains("npm_config_noproxy"), "{env}");
    assert!(plan(&ws(), &inputs(Trust::Untrusted))
        .command_prelude()
        .is_empty());
}
