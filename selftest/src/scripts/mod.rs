//! The shell the suite's jobs run, kept as files: an editor shows them as shell, and the test
//! below has `bash -n` parse each one. A script names what its caller puts in as `@NAME@`
//! (a placeholder is a plain word to the shell, so a script parses as written); [`fill`] puts
//! the values in, as text, exactly as a `format!` would have: quoting a value is the caller's
//! part (`quest_runner::util::shell::quote`).

/// Reads of the real registries by every client the host has (`selftest --registries`,
/// super::registries): the prelude every command starts with, then one command each.
pub const REGISTRY_PRELUDE: &str = include_str!("registry-prelude.sh");
pub const REGISTRY_NPM_VIEW: &str = include_str!("registry-npm-view.sh");
pub const REGISTRY_NPM_INSTALL: &str = include_str!("registry-npm-install.sh");
pub const REGISTRY_PIP_DOWNLOAD: &str = include_str!("registry-pip-download.sh");
pub const REGISTRY_CARGO_FETCH: &str = include_str!("registry-cargo-fetch.sh");
pub const REGISTRY_YARN: &str = include_str!("registry-yarn.sh");
pub const REGISTRY_YARN_BERRY: &str = include_str!("registry-yarn-berry.sh");
pub const REGISTRY_PNPM: &str = include_str!("registry-pnpm.sh");
pub const REGISTRY_BUN: &str = include_str!("registry-bun.sh");
pub const REGISTRY_DENO: &str = include_str!("registry-deno.sh");
pub const REGISTRY_UV: &str = include_str!("registry-uv.sh");
pub const REGISTRY_JAVA: &str = include_str!("registry-java.sh");
pub const REGISTRY_REFUSAL_PROBES: &str = include_str!("registry-refusal-probes.sh");

/// The boundary suite's permitted reads from the stand-in registry (boundary/attempts/
/// permitted.rs): npm's config for it, the reads over HTTP, and every package manager's over
/// HTTPS with the host's configuration planted.
pub const BOUNDARY_NPMRC: &str = include_str!("boundary-npmrc.sh");
pub const BOUNDARY_REGISTRY_READS: &str = include_str!("boundary-registry-reads.sh");
pub const BOUNDARY_PACKAGE_MANAGER_READS: &str = include_str!("boundary-package-manager-reads.sh");
/// Git configuration written into the job's HOME, whose every hook would run on the host
/// (boundary/attempts/git_attacks.rs).
pub const BOUNDARY_HOME_GIT_CONFIG: &str = include_str!("boundary-home-git-config.sh");

/// Every script, by its file name, for the parse test.
pub const ALL: &[(&str, &str)] = &[
    ("registry-prelude.sh", REGISTRY_PRELUDE),
    ("registry-npm-view.sh", REGISTRY_NPM_VIEW),
    ("registry-npm-install.sh", REGISTRY_NPM_INSTALL),
    ("registry-pip-download.sh", REGISTRY_PIP_DOWNLOAD),
    ("registry-cargo-fetch.sh", REGISTRY_CARGO_FETCH),
    ("registry-yarn.sh", REGISTRY_YARN),
    ("registry-yarn-berry.sh", REGISTRY_YARN_BERRY),
    ("registry-pnpm.sh", REGISTRY_PNPM),
    ("registry-bun.sh", REGISTRY_BUN),
    ("registry-deno.sh", REGISTRY_DENO),
    ("registry-uv.sh", REGISTRY_UV),
    ("registry-java.sh", REGISTRY_JAVA),
    ("registry-refusal-probes.sh", REGISTRY_REFUSAL_PROBES),
    ("boundary-npmrc.sh", BOUNDARY_NPMRC),
    ("boundary-registry-reads.sh", BOUNDARY_REGISTRY_READS),
    (
        "boundary-package-manager-reads.sh",
        BOUNDARY_PACKAGE_MANAGER_READS,
    ),
    ("boundary-home-git-config.sh", BOUNDARY_HOME_GIT_CONFIG),
];

/// `script` with each `@NAME@` of `values` replaced by its value, without the file's last
/// newline (a command is sent as the agent would write it).
pub fn fill(script: &str, values: &[(&str, &str)]) -> String {
    let mut text = script.strip_suffix('\n').unwrap_or(script).to_string();
    for (name, value) in values {
        text = text.replace(&format!("@{name}@"), value);
    }
    debug_assert!(
        unfilled(&text).is_empty(),
        "placeholders left: {:?}",
        unfilled(&text)
    );
    text
}

/// The `@NAME@` placeholders (capitals and `_`) still in `text`.
pub fn unfilled(text: &str) -> Vec<String> {
    let mut left = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find('@') {
        let after = &rest[at + 1..];
        let name: String = after
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || *c == '_')
            .collect();
        if !name.is_empty() && after[name.len()..].starts_with('@') {
            left.push(name.clone());
            rest = &after[name.len() + 1..];
        } else {
            rest = after;
        }
    }
    left
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_parses() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/scripts");
        let on_disk = std::fs::read_dir(&dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "sh")
            })
            .count();
        assert_eq!(
            on_disk,
            ALL.len(),
            "every .sh file of {} is in ALL",
            dir.display()
        );
        for (name, text) in ALL {
            let out = std::process::Command::new("bash")
                .args(["-n", "-c", text])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{name} does not parse: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    #[test]
    fn a_script_that_does_not_parse_is_caught_and_placeholders_are_found() {
        let out = std::process::Command::new("bash")
            .args(["-n", "-c", "if true; then echo"])
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert_eq!(
            unfilled("npm:@PKG@@@VER@ \"$@\" a@b"),
            ["PKG".to_string(), "VER".to_string()]
        );
        assert_eq!(fill("x @A@ @B_C@\n", &[("A", "1"), ("B_C", "2")]), "x 1 2");
    }
}
