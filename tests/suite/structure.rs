//! The structure rules of issue 16, checked by scanning the source of each crate of the
//! workspace, the runner's core (`src/`) and the boundary suite (`selftest/src/`), each on its
//! own (run with `--nocapture` to see the reports; `scripts/check-structure` does that):
//!
//! - Sizes: no non-test source file over 600 lines and no function over 80 lines, so that a
//!   newcomer can hold a file, and a function, in their head. Asserted for all of `src/`: a
//!   long table (the boundary suite's attempts) is split into tables by attack class rather
//!   than excused.
//! - Imports: the top-level modules of `src/` (`serve`, `devshell`, `config`, ...) import one
//!   another through `crate::` paths, one way only: a cycle among them (a strongly connected
//!   group of modules) fails the test, printed with the `file:line` of each import inside it.
//!   The same holds one level down and below, among the submodules of each module
//!   (`serve::queue` and `serve::source`), through `crate::` and `super::` paths.
//!
//! The scans are rough, on purpose (no parser as a dependency):
//! - Test code is left out: files named `tests.rs` or `*_tests.rs`, and a file's trailing
//!   `#[cfg(test)] mod tests` block (it counts from that line to the end of the file).
//! - A function is the text from a line's `fn <name>` to the brace closing its body, found by
//!   counting braces outside comments, string and char literals (raw strings included). A
//!   declaration without a body (a trait's) is not a function here; a nested function counts
//!   inside its parent and on its own; a brace in a signature (const generics) confuses it.
//! - Lengths count every line, blank lines and comments included, from the `fn` line (not
//!   its doc comment or attributes) to the closing brace.
//! - Macro-generated functions are not seen; functions written inside macro bodies are.
//! - An import is a `crate::<module>` path anywhere in code (a `use`, or a path written in
//!   place), and each module named in a `crate::{a::…, b}` group. `super::super::…` paths
//!   that climb out of a top-level module are not seen (`src/` has none outside tests).

use std::path::{Path, PathBuf};

/// The largest non-test source file, in lines.
const MAX_FILE_LINES: usize = 600;
/// The longest function, in lines.
const MAX_FN_LINES: usize = 80;
/// The crates the rules hold for, by the directory that holds their `src/`: the runner's core
/// (src/) and the boundary suite (selftest/src/). The binary's src/main.rs is the core's
/// neighbour and is scanned with it.
const CRATES: &[&str] = &["", "selftest/"];

/// The non-test and test source files of the crate in `base` (see [`CRATES`]), sorted.
fn crate_files(root: &Path, base: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    rust_files(&root.join(base).join("src"), &mut files);
    files.sort();
    files
}

/// `file` relative to the crate's directory (`selftest/src/wheel.rs` → `src/wheel.rs`), as
/// the module scans read it.
fn in_crate(root: &Path, base: &str, file: &Path) -> String {
    file.strip_prefix(root.join(base))
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

#[derive(Debug)]
struct Offence {
    path: String,
    what: String,
}

#[test]
fn files_and_functions_stay_small() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files: Vec<PathBuf> = CRATES.iter().flat_map(|b| crate_files(root, b)).collect();
    assert!(!files.is_empty(), "no source files found under src/");

    let mut offences = Vec::new();
    for file in &files {
        let rel = file
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if is_test_file(file) {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        offences.extend(check(&rel, &text));
    }

    assert!(
        offences.is_empty(),
        "files over {MAX_FILE_LINES} lines or functions over {MAX_FN_LINES} lines in src/ or selftest/src/ \
         (split them along their concerns, into named steps):\n{}",
        offences
            .iter()
            .map(|o| format!("  {}: {}", o.path, o.what))
            .collect::<Vec<_>>()
            .join("\n")
    );
    println!(
        "structure: {} file(s) of src/ and selftest/src/ within {MAX_FILE_LINES} lines, no function over {MAX_FN_LINES}",
        files.iter().filter(|f| !is_test_file(f)).count()
    );
}

/// The scanner itself, on a made-up file: a long function is found however its strings and
/// comments hold braces, a declaration is not a function, and the test module is left out.
#[test]
fn the_scan_counts_bodies_not_strings_or_tests() {
    let mut src = String::from("trait T {\n    fn declared(&self);\n}\n\nfn long() {\n");
    src.push_str("    let s = \"}}}\"; // }\n    let r = r#\"{ \"# ;\n    let c = '}';\n");
    src.push_str("    /* { */\n");
    for _ in 0..MAX_FN_LINES {
        src.push_str("    let _x = 1;\n");
    }
    src.push_str("}\n\nfn short<'a>(x: &'a str) -> &'a str {\n    x\n}\n");
    src.push_str("\n#[cfg(test)]\nmod tests {\n    fn also_long() {\n");
    for _ in 0..MAX_FN_LINES {
        src.push_str("        let _x = 1;\n");
    }
    src.push_str("    }\n}\n");
    let fns = functions(&src);
    let names: Vec<&str> = fns.iter().map(|f| f.0.as_str()).collect();
    assert_eq!(names, ["long", "short"], "{fns:?}");
    assert_eq!(fns[0].2, MAX_FN_LINES + 6);
    assert_eq!(fns[1].2, 3);
    let offences = check("x.rs", &src);
    assert_eq!(offences.len(), 1, "{offences:?}");
    assert!(offences[0].what.starts_with("fn long"), "{offences:?}");
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn is_test_file(path: &Path) -> bool {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    name == "tests.rs" || name.ends_with("_tests.rs")
}

/// The offences of one file.
fn check(rel: &str, text: &str) -> Vec<Offence> {
    let mut out = Vec::new();
    let lines = code_lines(text);
    if lines > MAX_FILE_LINES {
        out.push(Offence {
            path: rel.to_string(),
            what: format!("{lines} lines (over {MAX_FILE_LINES})"),
        });
    }
    for (name, line, len) in functions(text) {
        if len > MAX_FN_LINES {
            out.push(Offence {
                path: rel.to_string(),
                what: format!("fn {name} at line {line}: {len} lines (over {MAX_FN_LINES})"),
            });
        }
    }
    out
}

/// The line (0-based) where the file's trailing test module starts, if it has one.
fn test_module_start(text: &str) -> Option<usize> {
    let lines: Vec<&str> = text.lines().collect();
    (0..lines.len()).find(|&i| {
        lines[i].trim() == "#[cfg(test)]"
            && lines[i + 1..]
                .iter()
                .map(|l| l.trim())
                .find(|l| !l.starts_with("#["))
                .is_some_and(|l| l.starts_with("mod tests"))
    })
}

/// The file's lines, without its trailing test module.
fn code_lines(text: &str) -> usize {
    test_module_start(text).unwrap_or(text.lines().count())
}

/// `text` with everything that is not code (comments, string and char literals) blanked
/// out, newlines kept, so that braces and keywords can be found by position.
fn mask(text: &str) -> Vec<u8> {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = rest
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |p| i + p);
            blank(&mut out, i, end);
            i = end;
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            let mut j = i;
            while j < b.len() {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if let Some(hashes) = raw_string_start(b, i) {
            let open = i + rest.iter().position(|&c| c == b'"').unwrap_or(0) + 1;
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let end = b[open..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(b.len(), |p| open + p + close.len());
            blank(&mut out, i, end);
            i = end;
        } else if rest[0] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if rest[0] == b'\'' {
            // A char literal ('x', '\n', '\u{1F600}'), or a lifetime ('a) left as it is.
            let end = if rest.get(1) == Some(&b'\\') {
                // The escaped character is at 2; the closing quote comes after it.
                rest.iter()
                    .skip(3)
                    .position(|&c| c == b'\'')
                    .map(|p| i + 3 + p + 1)
            } else {
                let width = text
                    .get(i + 1..)
                    .and_then(|s| s.chars().next())
                    .map_or(1, char::len_utf8);
                (rest.get(1 + width) == Some(&b'\'')).then_some(i + 2 + width)
            };
            match end {
                Some(end) => {
                    blank(&mut out, i, end);
                    i = end;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    out
}

/// At `i`, the number of `#`s of a raw string literal (`r"`, `r#"`, `br"`…) that starts
/// there, if one does.
fn raw_string_start(b: &[u8], i: usize) -> Option<usize> {
    if i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_') {
        return None;
    }
    let mut j = i;
    if b.get(j) == Some(&b'b') {
        j += 1;
    }
    if b.get(j) != Some(&b'r') {
        return None;
    }
    j += 1;
    let hashes = b[j..].iter().take_while(|&&c| c == b'#').count();
    (b.get(j + hashes) == Some(&b'"')).then_some(hashes)
}

/// The functions with a body outside the trailing test module, as (name, line of `fn`
/// (1-based), length in lines).
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let code = mask(text);
    let line_of = |pos: usize| code[..pos].iter().filter(|&&c| c == b'\n').count();
    let stop = test_module_start(text).unwrap_or(usize::MAX);
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(p) = find_fn(&code, i) {
        i = p + 2;
        let line = line_of(p);
        if line >= stop {
            break;
        }
        let name: String = code[p + 2..]
            .iter()
            .skip_while(|c| c.is_ascii_whitespace())
            .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
            .map(|&c| c as char)
            .collect();
        if name.is_empty() {
            continue; // a function pointer type, `fn(u8)`
        }
        let Some(open) = code[p..].iter().position(|&c| c == b'{' || c == b';') else {
            break;
        };
        let open = p + open;
        if code[open] == b';' {
            continue; // a declaration
        }
        let mut depth = 0usize;
        let mut close = None;
        for (j, &c) in code.iter().enumerate().skip(open) {
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(j);
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(close) = close else {
            break;
        };
        out.push((name, line + 1, line_of(close) - line + 1));
    }
    out
}

/// The next `fn` keyword at or after `from`: a whole word followed by whitespace.
fn find_fn(code: &[u8], from: usize) -> Option<usize> {
    (from..code.len().saturating_sub(2)).find(|&p| {
        code[p..].starts_with(b"fn")
            && code[p + 2].is_ascii_whitespace()
            && (p == 0 || !(code[p - 1].is_ascii_alphanumeric() || code[p - 1] == b'_'))
    })
}

/// The top-level module a file under `src/` belongs to (`src/serve/queue/mod.rs` → `serve`);
/// none for the crate roots.
fn top_module(rel: &str) -> Option<String> {
    let first = rel.strip_prefix("src/")?.split('/').next()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(name, "lib" | "main")).then(|| name.to_string())
}

/// The top-level modules a file's code names through `crate::` paths, each with the line
/// (1-based) that names it, outside the trailing test module.
fn crate_refs(text: &str) -> Vec<(String, usize)> {
    let mut refs: Vec<(String, usize)> = crate_paths(text)
        .into_iter()
        .map(|(path, line)| (path[0].clone(), line))
        .collect();
    // A group names a module once however many of its items it imports.
    refs.dedup();
    refs
}

/// The `crate::` paths of a file's code (`crate::serve::queue::FsQueue` → `serve`, `queue`,
/// `FsQueue`; each item of a group, nested ones too, on its own), each with its line,
/// outside the test module.
fn crate_paths(text: &str) -> Vec<(Vec<String>, usize)> {
    let code = mask(text);
    let stop = test_module_start(text).unwrap_or(usize::MAX);
    let mut out = Vec::new();
    let mut line = 0;
    let mut counted = 0;
    let mut p = 0;
    while p + 7 <= code.len() {
        if !code[p..].starts_with(b"crate::")
            || (p > 0
                && (code[p - 1].is_ascii_alphanumeric() || matches!(code[p - 1], b'_' | b'$')))
        {
            p += 1;
            continue;
        }
        line += code[counted..p].iter().filter(|&&c| c == b'\n').count();
        counted = p;
        if line >= stop {
            break;
        }
        let mut paths = Vec::new();
        use_tree(&code, p + 7, &[], &mut paths);
        out.extend(
            paths
                .into_iter()
                .filter(|path| !path.is_empty())
                .map(|path| (path, line + 1)),
        );
        p += 7;
    }
    out
}

/// The paths of the use tree at `at` (a path, or a `{…}` group of trees), each after
/// `prefix`; `self` in a group is the prefix itself.
fn use_tree(code: &[u8], mut at: usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let mut path = prefix.to_vec();
    loop {
        at += code[at..]
            .iter()
            .take_while(|c| c.is_ascii_whitespace())
            .count();
        if code.get(at) == Some(&b'{') {
            let mut depth = 0usize;
            let mut item_start = at + 1;
            for (j, &c) in code.iter().enumerate().skip(at) {
                match c {
                    b'{' => depth += 1,
                    b'}' | b',' if depth == 1 => {
                        use_tree(code, item_start, &path, out);
                        item_start = j + 1;
                        if c == b'}' {
                            break;
                        }
                    }
                    b'}' => depth -= 1,
                    _ => {}
                }
            }
            return;
        }
        let name: String = code[at..]
            .iter()
            .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
            .map(|&c| c as char)
            .collect();
        at += name.len();
        let last = name.is_empty() || !code[at..].starts_with(b"::");
        if !name.is_empty() && name != "self" {
            path.push(name);
        }
        if last {
            break;
        }
        at += 2;
    }
    if path.len() > prefix.len() || !prefix.is_empty() {
        out.push(path);
    }
}

/// The modules a file's code names through `super::<name>` paths, with their lines, outside
/// the test module.
fn super_refs(text: &str) -> Vec<(String, usize)> {
    let code = mask(text);
    let stop = test_module_start(text).unwrap_or(usize::MAX);
    let mut out = Vec::new();
    for (p, _) in code
        .windows(7)
        .enumerate()
        .filter(|(_, w)| *w == b"super::")
    {
        if p > 0 && (code[p - 1].is_ascii_alphanumeric() || matches!(code[p - 1], b'_' | b':')) {
            continue;
        }
        let line = code[..p].iter().filter(|&&c| c == b'\n').count();
        if line >= stop {
            break;
        }
        let name: String = code[p + 7..]
            .iter()
            .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
            .map(|&c| c as char)
            .collect();
        if !name.is_empty() && name != "super" {
            out.push((name, line + 1));
        }
    }
    out
}

/// Every import between two different top-level modules of the crate in `base` (test code
/// left out): (from, to) → the `file:line` sites that make it.
fn import_graph(root: &Path, base: &str) -> Graph {
    let files = crate_files(root, base);
    let mut edges = std::collections::BTreeMap::<(String, String), Vec<String>>::new();
    for file in &files {
        let rel = file
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let Some(from) = top_module(&in_crate(root, base, file)) else {
            continue;
        };
        if is_test_file(file) {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        for (to, line) in crate_refs(&text) {
            if to != from {
                edges
                    .entry((from.clone(), to))
                    .or_default()
                    .push(format!("{rel}:{line}"));
            }
        }
    }
    edges
}

/// The cycles of a graph: its strongly connected groups of more than one node, each sorted,
/// in order of their first node.
fn cycles(edges: &Graph) -> Vec<Vec<String>> {
    use std::collections::{BTreeMap, BTreeSet};
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        next.entry(from).or_default().push(to);
        next.entry(to).or_default();
    }
    let reach = |start: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![start];
        while let Some(n) = todo.pop() {
            for &m in next.get(n).into_iter().flatten() {
                if seen.insert(m.to_string()) {
                    todo.push(m);
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&str, BTreeSet<String>> = next.keys().map(|&n| (n, reach(n))).collect();
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for (&n, from_n) in &reached {
        if done.contains(n) || !from_n.contains(n) {
            continue;
        }
        let group: Vec<String> = from_n
            .iter()
            .filter(|m| reached[m.as_str()].contains(n))
            .cloned()
            .collect();
        if group.len() > 1 {
            done.extend(group.iter().cloned());
            out.push(group);
        }
    }
    out
}

/// The one-way rule: no cycle among the top-level modules of `src/`. A cycle fails the test
/// and is printed with the imports inside it (`file:line`), which are the places to cut.
#[test]
fn imports_flow_one_way() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for base in CRATES {
        let edges = import_graph(root, base);
        let cycles = cycles(&edges);
        println!(
            "imports: {} cycle(s) among the top-level modules of {base}src/",
            cycles.len()
        );
        for group in &cycles {
            println!("  cycle of {} modules: {}", group.len(), group.join(", "));
            for ((from, to), sites) in &edges {
                if group.contains(from) && group.contains(to) {
                    println!("    {from} -> {to}: {}", sites.join(" "));
                }
            }
            found.push(format!("{base}src/: {}", group.join(", ")));
        }
        if cycles.is_empty() {
            for (depth, modules) in layers(&edges).iter().enumerate() {
                println!("  layer {depth}: {}", modules.join(", "));
            }
        }
        if base.is_empty() {
            let from_util: Vec<_> = edges
                .iter()
                .filter(|((from, _), _)| from == "util")
                .collect();
            assert!(
                from_util.is_empty(),
                "util holds the leaves and imports nothing else of the crate: {from_util:?}"
            );
        }
    }
    assert!(
        found.is_empty(),
        "imports must flow one way (cli -> stages -> leaves): cycles among a crate's \
         top-level modules, printed above with the imports to cut (run with --nocapture): \
         {found:?}"
    );
}

/// The modules by how far they are from the leaves: layer 0 imports nothing of the crate,
/// layer n imports only modules of layers below n. Only for a graph without cycles.
fn layers(edges: &Graph) -> Vec<Vec<String>> {
    use std::collections::BTreeMap;
    let mut modules: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        modules.entry(from).or_default().push(to);
        modules.entry(to).or_default();
    }
    let mut depth: BTreeMap<&str, usize> = BTreeMap::new();
    while depth.len() < modules.len() {
        let before = depth.len();
        for (&m, imports) in &modules {
            if !depth.contains_key(m) && imports.iter().all(|i| depth.contains_key(i)) {
                let d = imports.iter().map(|i| depth[i] + 1).max().unwrap_or(0);
                depth.insert(m, d);
            }
        }
        if depth.len() == before {
            break; // a cycle: the rest has no depth
        }
    }
    let mut out: Vec<Vec<String>> = Vec::new();
    for (m, d) in depth {
        if out.len() <= d {
            out.resize(d + 1, Vec::new());
        }
        out[d].push(m.to_string());
    }
    out
}

/// A file's module path below `src/` (`src/serve/queue/mod.rs` → `serve`, `queue`); empty
/// for the crate roots.
fn module_path(rel: &str) -> Vec<String> {
    let inner = rel.strip_prefix("src/").unwrap_or(rel);
    let inner = inner.strip_suffix(".rs").unwrap_or(inner);
    let mut parts: Vec<String> = inner.split('/').map(str::to_string).collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    if parts == ["lib"] || parts == ["main"] {
        parts.clear();
    }
    parts
}

type Graph = std::collections::BTreeMap<(String, String), Vec<String>>;

/// The imports between sibling modules below the top level, by their parent: a
/// `crate::a::b::x::…` path in `a::b::y` (through `crate::` or `super::`) is an edge `y → x`
/// of `a::b`. The top level is [`import_graph`]'s.
fn nested_import_graphs(root: &Path, base: &str) -> std::collections::BTreeMap<String, Graph> {
    use std::collections::BTreeSet;
    let mut files = crate_files(root, base);
    files.retain(|f| !is_test_file(f));
    let rel = |f: &PathBuf| f.strip_prefix(root).unwrap().to_string_lossy().into_owned();
    let modules: BTreeSet<Vec<String>> = files
        .iter()
        .map(|f| module_path(&in_crate(root, base, f)))
        .collect();
    let mut graphs = std::collections::BTreeMap::<String, Graph>::new();
    for file in &files {
        let rel = rel(file);
        let from = module_path(&in_crate(root, base, file));
        let text = std::fs::read_to_string(file).unwrap();
        let mut targets: Vec<(Vec<String>, usize)> = crate_paths(&text)
            .into_iter()
            .map(|(path, line)| {
                let known = (1..=path.len())
                    .take_while(|&n| modules.contains(&path[..n]))
                    .last()
                    .unwrap_or(0);
                (path[..known].to_vec(), line)
            })
            .collect();
        if let Some((_, parent)) = from.split_last() {
            for (name, line) in super_refs(&text) {
                let sibling = [parent, &[name]].concat();
                if modules.contains(&sibling) {
                    targets.push((sibling, line));
                }
            }
        }
        for (to, line) in targets {
            let shared = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if shared == 0 || shared >= from.len() || shared >= to.len() {
                continue; // the top level, or a module's own parent or child
            }
            graphs
                .entry(from[..shared].join("::"))
                .or_default()
                .entry((from[shared].clone(), to[shared].clone()))
                .or_default()
                .push(format!("{rel}:{line}"));
        }
    }
    for sites in graphs.values_mut().flat_map(|g| g.values_mut()) {
        sites.dedup();
    }
    graphs
}

/// The one-way rule one level down, and below: no cycle among the submodules of any module,
/// the boundary suite's included.
#[test]
fn submodule_imports_flow_one_way() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    let graphs = CRATES.iter().flat_map(|base| {
        nested_import_graphs(root, base)
            .into_iter()
            .map(move |(parent, edges)| (format!("{base}src/ {parent}"), edges))
    });
    for (parent, edges) in graphs {
        for group in cycles(&edges) {
            println!("cycle in {parent}: {}", group.join(", "));
            for ((from, to), sites) in &edges {
                if group.contains(from) && group.contains(to) {
                    println!("    {from} -> {to}: {}", sites.join(" "));
                }
            }
            found.push(format!("{parent}: {}", group.join(", ")));
        }
    }
    assert!(
        found.is_empty(),
        "imports among submodules must flow one way; cycles (printed above with the imports \
         to cut, run with --nocapture): {found:?}"
    );
}

#[test]
fn the_submodule_scan_sees_crate_and_super_paths() {
    let src = "use crate::serve::{queue::FsQueue, source::Claimed};\n\
               use super::limits::Limits;\n";
    assert_eq!(
        crate_paths(src),
        [
            (vec!["serve".into(), "queue".into(), "FsQueue".into()], 1),
            (vec!["serve".into(), "source".into(), "Claimed".into()], 1)
        ]
    );
    assert_eq!(super_refs(src), [("limits".to_string(), 2)]);
    assert_eq!(module_path("src/serve/queue/mod.rs"), ["serve", "queue"]);
    assert_eq!(module_path("src/serve/limits.rs"), ["serve", "limits"]);
    assert!(module_path("src/lib.rs").is_empty());
}

/// The import scan, on a made-up file: grouped and in-place paths are found, comments,
/// strings, `$crate` and the test module are not; and a cycle is told from a one-way chain.
#[test]
fn the_import_scan_finds_paths_not_strings_or_tests() {
    let src = "use crate::{config::Config, job::{Job, JobSpec}, self};\n\
               // use crate::commented;\n\
               fn f() { let _ = \"crate::quoted\"; crate::serve::limits::parse_size(\"1\"); }\n\
               macro_rules! m { () => { $crate::hidden::x() } }\n\
               #[cfg(test)]\nmod tests {\n    use crate::testonly;\n}\n";
    let refs = crate_refs(src);
    assert_eq!(
        refs,
        [
            ("config".to_string(), 1),
            ("job".to_string(), 1),
            ("serve".to_string(), 3)
        ],
        "{refs:?}"
    );
    let edge = |a: &str, b: &str| ((a.to_string(), b.to_string()), vec![String::new()]);
    let chain: std::collections::BTreeMap<_, _> =
        [edge("cli", "run"), edge("run", "job"), edge("cli", "job")].into();
    assert!(cycles(&chain).is_empty());
    let looped: std::collections::BTreeMap<_, _> = [
        edge("cli", "run"),
        edge("run", "job"),
        edge("job", "run"),
        edge("job", "util"),
    ]
    .into();
    assert_eq!(cycles(&looped), [["job".to_string(), "run".to_string()]]);
    assert_eq!(
        top_module("src/serve/queue/mod.rs").as_deref(),
        Some("serve")
    );
    assert_eq!(top_module("src/run.rs").as_deref(), Some("run"));
    assert_eq!(top_module("src/lib.rs"), None);
}
