use super::*;
use crate::deps::pin::{Ecosystem, Pin};

fn sri() -> String {
    format!("sha512-{}==", "A".repeat(86))
}

#[test]
fn lock_kinds_by_name() {
    assert_eq!(LockKind::of("package-lock.json"), Some(LockKind::Npm));
    assert_eq!(LockKind::of("npm-shrinkwrap.json"), Some(LockKind::Npm));
    assert_eq!(
        LockKind::of("requirements-dev.txt"),
        Some(LockKind::Requirements)
    );
    assert_eq!(LockKind::of("uv.lock"), Some(LockKind::Uv));
    assert_eq!(LockKind::of("Cargo.lock"), Some(LockKind::Cargo));
    assert_eq!(LockKind::of("package.json"), None);
}

#[test]
fn npm_v3_takes_registry_entries_and_names_the_rest() {
    let lock = serde_json::json!({
        "lockfileVersion": 3,
        "packages": {
            "": {"name": "app"},
            "node_modules/left-pad": {"version": "1.3.0",
                "resolved": "https://registry.npmjs.org/left-pad/-/left-pad-1.3.0.tgz",
                "integrity": sri(), "dependencies": {"x": "^1"}},
            "node_modules/@s/p": {"version": "2.0.0",
                "resolved": "https://registry.npmjs.org/@s/p/-/p-2.0.0.tgz", "integrity": sri()},
            "node_modules/gitdep": {"version": "1.0.0",
                "resolved": "git+ssh://git@github.com/a/b.git#abc", "integrity": sri()},
            "node_modules/old": {"version": "1.0.0",
                "resolved": "https://registry.npmjs.org/old/-/old-1.0.0.tgz",
                "integrity": "sha1-AAAAAAAAAAAAAAAAAAAAAAAAAAA="},
            "node_modules/evil": {"version": "1.0.0",
                "resolved": "https://evil.example/evil.tgz", "integrity": sri()},
            "node_modules/linked": {"link": true, "resolved": "packages/linked"},
            "node_modules/@s/omitted": {"version": "3.0.0", "integrity": sri()},
            "packages/linked": {"version": "0.0.1"}
        }
    });
    let parsed = parse(
        LockKind::Npm,
        "web/package-lock.json",
        lock.to_string().as_bytes(),
    )
    .expect("parses");
    let names: Vec<&str> = parsed
        .pins
        .iter()
        .map(|p| match p {
            Pin::Artifact(a) => a.name.as_str(),
            Pin::Pypi(_) => "",
        })
        .collect();
    assert_eq!(names, ["@s/omitted", "@s/p", "left-pad"]);
    let Pin::Artifact(omitted) = &parsed.pins[0] else {
        panic!("an artifact")
    };
    assert_eq!(
        omitted.url.url(),
        "https://registry.npmjs.org/@s/omitted/-/omitted-3.0.0.tgz"
    );
    let why: Vec<&str> = parsed.skipped.iter().map(|s| s.entry.as_str()).collect();
    assert_eq!(
        why,
        [
            "node_modules/evil",
            "node_modules/gitdep",
            "node_modules/old"
        ]
    );
    assert!(parsed
        .skipped
        .iter()
        .all(|s| s.lock == "web/package-lock.json"));
}

#[test]
fn npm_refuses_lockfile_v1_and_what_is_no_lock() {
    let v1 = r#"{"lockfileVersion": 1, "dependencies": {}}"#;
    let err = parse(LockKind::Npm, "package-lock.json", v1.as_bytes()).unwrap_err();
    assert!(err.contains("version 1") && err.contains("npm 7"), "{err}");
    let err = parse(LockKind::Npm, "package-lock.json", b"{not json").unwrap_err();
    assert!(
        err.contains("package-lock.json is not an npm lockfile"),
        "{err}"
    );
    let err = parse(LockKind::Npm, "package-lock.json", b"\xff\xfe").unwrap_err();
    assert!(err.contains("not UTF-8"), "{err}");
}

#[test]
fn requirements_take_hash_pinned_lines() {
    let h1 = "a".repeat(64);
    let h2 = "b".repeat(64);
    let text = format!(
        "# a comment\n\
         six==1.16.0 \\\n    --hash=sha256:{h1} \\\n    --hash=sha256:{h2}\n\
         Requests[socks]==2.31.0 ; python_version >= \"3.7\" --hash sha256:{h1}\n\
         loose>=1.0 --hash=sha256:{h1}\n\
         nohash==1.0\n\
         direct @ https://example.org/x.whl\n\
         -r other.txt\n\
         -e .\n"
    );
    let parsed = parse(LockKind::Requirements, "requirements.txt", text.as_bytes()).unwrap();
    let pins: Vec<(String, String, usize)> = parsed
        .pins
        .iter()
        .map(|p| match p {
            Pin::Pypi(h) => (h.name.clone(), h.version.clone(), h.hashes.len()),
            Pin::Artifact(_) => panic!("requirements pin by hash"),
        })
        .collect();
    assert_eq!(
        pins,
        [
            ("six".into(), "1.16.0".into(), 2),
            ("Requests".into(), "2.31.0".into(), 1)
        ]
    );
    assert_eq!(parsed.skipped.len(), 4, "{:?}", parsed.skipped);
}

#[test]
fn uv_lock_takes_pypi_files_for_this_host() {
    let h = "c".repeat(64);
    let text = format!(
        r#"version = 1
requires-python = ">=3.8"

[[package]]
name = "app"
version = "0.1.0"
source = {{ virtual = "." }}

[[package]]
name = "six"
version = "1.16.0"
source = {{ registry = "https://pypi.org/simple" }}
sdist = {{ url = "https://files.pythonhosted.org/packages/a/b/six-1.16.0.tar.gz", hash = "sha256:{h}", size = 1 }}
wheels = [
    {{ url = "https://files.pythonhosted.org/packages/c/d/six-1.16.0-py2.py3-none-any.whl", hash = "sha256:{h}", size = 1 }},
    {{ url = "https://files.pythonhosted.org/packages/e/f/six-1.16.0-cp311-cp311-win_amd64.whl", hash = "sha256:{h}", size = 1 }},
]

[[package]]
name = "private"
version = "1.0"
source = {{ registry = "https://pypi.example.org/simple" }}
"#
    );
    let parsed = parse(LockKind::Uv, "uv.lock", text.as_bytes()).unwrap();
    let files: Vec<&str> = parsed
        .pins
        .iter()
        .map(|p| match p {
            Pin::Artifact(a) => {
                assert_eq!(a.ecosystem, Ecosystem::Pypi);
                a.filename.as_str()
            }
            Pin::Pypi(_) => panic!("uv.lock names its files"),
        })
        .collect();
    assert_eq!(
        files,
        ["six-1.16.0.tar.gz", "six-1.16.0-py2.py3-none-any.whl"]
    );
    assert_eq!(parsed.skipped.len(), 1);
    assert!(parse(LockKind::Uv, "uv.lock", b"version = 9").is_err());
}

#[test]
fn cargo_lock_takes_crates_io_checksums() {
    let h = "d".repeat(64);
    let text = format!(
        r#"version = 4

[[package]]
name = "app"
version = "0.1.0"

[[package]]
name = "itoa"
version = "1.0.11"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "{h}"

[[package]]
name = "gitdep"
version = "0.1.0"
source = "git+https://github.com/a/b#abc"

[[package]]
name = "nochecksum"
version = "0.1.0"
source = "registry+https://github.com/rust-lang/crates.io-index"
"#
    );
    let parsed = parse(LockKind::Cargo, "Cargo.lock", text.as_bytes()).unwrap();
    let Pin::Artifact(a) = &parsed.pins[0] else {
        panic!("an artifact")
    };
    assert_eq!(parsed.pins.len(), 1);
    assert_eq!(
        a.url.url(),
        "https://static.crates.io/crates/itoa/itoa-1.0.11.crate"
    );
    assert_eq!(a.digest.key(), format!("sha256-{h}"));
    assert_eq!(parsed.skipped.len(), 2);
    assert!(parse(LockKind::Cargo, "Cargo.lock", b"[[package]]\nname = 3").is_err());
}

#[test]
fn wheels_for_other_platforms_are_not_this_hosts() {
    use super::python::fits_this_host;
    assert!(fits_this_host("six-1.16.0-py2.py3-none-any.whl"));
    assert!(fits_this_host("six-1.16.0.tar.gz"));
    assert!(!fits_this_host("x-1.0-cp311-cp311-win_amd64.whl"));
    if cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        assert!(fits_this_host(
            "x-1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
        ));
        assert!(!fits_this_host(
            "x-1.0-cp311-cp311-manylinux_2_17_aarch64.whl"
        ));
    }
}
