//! The documentation names what exists: every `src/…` path in README.md, CONTRIBUTING.md,
//! ARCHITECTURE.md and docs/*.md (and in the comments of the Nix files and the unit's
//! settings, which `systemd-unit` prints for the operator) is a file or directory of this
//! tree, and every
//! `quest-runner <command>` written in code (an inline span or a code block) is a command the
//! binary takes. Docs outlive renames; this is what catches them (`src/config.rs` was cited
//! in 15 places after it became `src/config/`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

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

/// Every `src/…` path in `text`, as written (trailing punctuation dropped).
fn src_paths(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (i, _) in text.match_indices("src/") {
        let before = text[..i].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '/' || c == '_' || c == '-') {
            continue; // part of another path (`../src/`, `tests/src/`)
        }
        let path: String = text[i..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || "/_.-".contains(*c))
            .collect();
        let path = path.trim_end_matches(['.', '-', '/']).to_string();
        if path.len() > "src/".len() {
            found.insert(path);
        }
    }
    found
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
    for path in src_paths(text) {
        if !root().join(&path).exists() {
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

/// The Nix files and the unit's settings: their comments cite source paths too.
fn nix_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in ["modules", "nix", "nix/eval"] {
        for entry in std::fs::read_dir(root().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "nix" || e == "json") {
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
    for file in nix_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for path in src_paths(&text) {
            if !root().join(&path).exists() {
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
    let planted =
        "See `src/config.rs` and src/no_such_module/, then run `quest-runner frobnicate`.";
    let problems = problems_in(Path::new("planted.md"), planted);
    assert_eq!(problems.len(), 3, "{problems:?}");
    let fine = "See src/config/ and `quest-runner logs <id> --follow`.";
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
