//! The documentation names what exists: every `src/…`, `selftest/src/…` and `tests/…` path
//! in README.md,
//! CONTRIBUTING.md, ARCHITECTURE.md and docs/*.md (and in the comments of the Nix files, the
//! unit's settings, which `systemd-unit` prints for the operator, and the scripts) is a file or
//! directory of this tree, and every
//! `quest-runner <command>` written in code (an inline span or a code block) is a command the
//! binary takes. Docs outlive renames; this is what catches them (`src/config.rs` was cited
//! in 15 places after it became `src/config/`, and 40 `tests/<part>.rs` after the parts
//! moved to `tests/suite/`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The documents a reader looks in.
fn documents() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = ["README.md", "CONTRIBUTING.md", "ARCHITECTURE.md"]
        .iter()
        .map(|d| root().join(d))
        .collect();
    let mut more: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    more.sort();
    docs.extend(more);
    docs
}

/// Every `src/…`, `selftest/src/…` and `tests/…` path in `text`, as written (trailing punctuation dropped); a
/// `*` in one is a glob (`tests/suite/run_*.rs`).
fn tree_paths(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for prefix in ["src/", "selftest/src/", "tests/"] {
        for (i, _) in text.match_indices(prefix) {
            let before = text[..i].chars().last();
            if before.is_some_and(|c| c.is_alphanumeric() || "/_-$".contains(c)) {
                continue; // part of another path (`../src/`, `tests/src/`) or `$src/lib`
            }
            let path: String = text[i..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || "/_.-*".contains(*c))
                .collect();
            let path = path.trim_end_matches(['.', '-', '/']).to_string();
            if path.len() > prefix.len() {
                found.insert(path);
            }
        }
    }
    found
}

/// Whether `path` (relative to the root; a `*` in its last part matches any name) names
/// something here.
fn exists(path: &str) -> bool {
    let Some((dir, name)) = path.rsplit_once('/').filter(|(_, name)| name.contains('*')) else {
        return root().join(path).exists();
    };
    let (head, tail) = name.split_once('*').unwrap();
    std::fs::read_dir(root().join(dir)).is_ok_and(|entries| {
        entries.filter_map(Result::ok).any(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.len() >= head.len() + tail.len() && n.starts_with(head) && n.ends_with(tail)
        })
    })
}

/// The word after `quest-runner` in each inline code span and code-block line of `text`.
fn commands(text: &str) -> BTreeSet<String> {
    let mut code = Vec::new();
    let mut in_block = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        match in_block {
            true => code.push(line.to_string()),
            false => code.extend(line.split('`').skip(1).step_by(2).map(str::to_string)),
        }
    }
    let mut found = BTreeSet::new();
    for span in code {
        let words: Vec<&str> = span.split_whitespace().collect();
        for (i, pair) in words.windows(2).enumerate() {
            let word = pair[1];
            // The program at a command's start, not a name in another command's arguments
            // (`createdb --owner quest-runner quest-runner`).
            let starts = i == 0
                || ["|", "&&", "||", ";", "$", "#", "exec", "sudo", "time"].contains(&words[i - 1]);
            if starts
                && pair[0] == "quest-runner"
                && word.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                && word.chars().all(|c| c.is_ascii_lowercase() || c == '-')
            {
                found.insert(word.to_string());
            }
        }
    }
    found
}

fn problems_in(doc: &Path, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for path in tree_paths(text) {
        if !exists(&path) {
            problems.push(format!("{}: {path} does not exist", doc.display()));
        }
    }
    for command in commands(text) {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_quest-runner"))
            .args([&command, "--help"])
            .output()
            .unwrap();
        if !out.status.success() {
            problems.push(format!(
                "{}: `quest-runner {command}` is no command",
                doc.display()
            ));
        }
    }
    problems
}

/// The Nix files, the unit's settings and the scripts: their comments cite paths too.
fn commented_files() -> Vec<PathBuf> {
    let mut files = vec![root().join("flake.nix"), root().join(".ci/run")];
    for dir in ["modules", "nix", "nix/eval", "scripts"] {
        for entry in std::fs::read_dir(root().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let cited = path.extension().is_some_and(|e| e == "nix" || e == "json");
            if path.is_file() && (dir == "scripts" || cited) {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

#[test]
fn every_source_path_and_command_the_docs_name_exists() {
    let mut problems = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        problems.extend(problems_in(&doc, &text));
    }
    for file in commented_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for path in tree_paths(&text) {
            if !exists(&path) {
                problems.push(format!("{}: {path} does not exist", file.display()));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "stale names in the docs:\n{}",
        problems.join("\n")
    );
}

#[test]
fn a_planted_stale_path_or_command_is_caught() {
    let planted = "See `src/config.rs`, src/no_such_module/, tests/boundary.rs, \
                   src/selftest/boundary/, selftest/src/fixture/ and tests/run_*.rs, then run \
                   `quest-runner frobnicate`.";
    let problems = problems_in(Path::new("planted.md"), planted);
    assert_eq!(problems.len(), 7, "{problems:?}");
    let fine = "See src/config/, selftest/src/boundary/, tests/suite/boundary.rs, \
                tests/suite/run_*.rs, $src/lib and `quest-runner logs <id> --follow`.";
    assert!(problems_in(Path::new("fine.md"), fine).is_empty());
}

/// docs/security.md documents the table of CA variables the policy applies, variable for
/// variable.
#[test]
fn the_security_doc_lists_every_trust_variable() {
    let doc = std::fs::read_to_string(root().join("docs/security.md")).unwrap();
    for var in quest_runner::sandbox::TRUST_VARS {
        assert!(doc.contains(&format!("`{}`", var.name)), "{}", var.name);
    }
}
