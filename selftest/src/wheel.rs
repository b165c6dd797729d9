//! The stand-in registry's Python package: a real wheel (a zip, entries stored), so that pip
//! and uv download and install it as they would one from PyPI.

use sha2::Digest;

/// `qr_pkg-<version>-py3-none-any.whl` of the distribution `name` (PEP 427: the file name's
/// dashes become underscores).
pub fn file_name(name: &str, version: &str) -> String {
    format!("{}-{version}-py3-none-any.whl", name.replace('-', "_"))
}

/// The wheel's bytes: one module, its METADATA, WHEEL and RECORD (with each file's hash, as
/// installers check).
pub fn build(name: &str, version: &str) -> Vec<u8> {
    let module = name.replace('-', "_");
    let info = format!("{module}-{version}.dist-info");
    let mut files: Vec<(String, Vec<u8>)> = vec![
        (
            format!("{module}/__init__.py"),
            format!("VERSION = \"{version}\"\n").into_bytes(),
        ),
        (
            format!("{info}/METADATA"),
            format!("Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n").into_bytes(),
        ),
        (
            format!("{info}/WHEEL"),
            b"Wheel-Version: 1.0\nGenerator: quest-runner\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
                .to_vec(),
        ),
    ];
    let mut record = String::new();
    for (path, data) in &files {
        let digest = urlsafe_base64(&sha2::Sha256::digest(data));
        record.push_str(&format!("{path},sha256={digest},{}\n", data.len()));
    }
    record.push_str(&format!("{info}/RECORD,,\n"));
    files.push((format!("{info}/RECORD"), record.into_bytes()));
    stored_zip(&files)
}

/// A zip archive of `files`, each stored (not compressed): local headers, then the central
/// directory and its end record (APPNOTE 4.3), with no extensions.
fn stored_zip(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data) in files {
        let offset = out.len() as u32;
        let crc = crc32(data);
        let size = data.len() as u32;
        let common = |v: &mut Vec<u8>| {
            v.extend_from_slice(&20u16.to_le_bytes()); // version needed: 2.0
            v.extend_from_slice(&0u16.to_le_bytes()); // flags
            v.extend_from_slice(&0u16.to_le_bytes()); // method: stored
            v.extend_from_slice(&0u16.to_le_bytes()); // time
            v.extend_from_slice(&0x21u16.to_le_bytes()); // date: 1980-01-01
            v.extend_from_slice(&crc.to_le_bytes());
            v.extend_from_slice(&size.to_le_bytes());
            v.extend_from_slice(&size.to_le_bytes());
            v.extend_from_slice(&(name.len() as u16).to_le_bytes());
            v.extend_from_slice(&0u16.to_le_bytes()); // extra length
        };
        out.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        common(&mut out);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(data);

        central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        central.extend_from_slice(&20u16.to_le_bytes()); // version made by
        common(&mut central);
        central.extend_from_slice(&0u16.to_le_bytes()); // comment length
        central.extend_from_slice(&0u16.to_le_bytes()); // disk
        central.extend_from_slice(&0u16.to_le_bytes()); // internal attributes
        central.extend_from_slice(&0u32.to_le_bytes()); // external attributes
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
    }
    let central_offset = out.len() as u32;
    out.extend_from_slice(&central);
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(files.len() as u16).to_le_bytes());
    out.extend_from_slice(&(files.len() as u16).to_le_bytes());
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&central_offset.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

/// CRC-32 (IEEE, reflected), as zip uses it.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// URL-safe base64 without padding (the wheel RECORD's hashes).
fn urlsafe_base64(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_hashes_are_urlsafe_base64_unpadded() {
        // pip's RECORD line for an empty file.
        let digest = sha2::Sha256::digest(b"");
        assert_eq!(
            urlsafe_base64(&digest),
            "47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"
        );
    }

    #[test]
    fn crc32_of_the_check_string() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    /// Python's own zipfile reads the wheel back, every entry intact (where there is one).
    #[test]
    fn python_reads_the_wheel() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(file_name("qr-pkg", "1.0.0"));
        std::fs::write(&path, build("qr-pkg", "1.0.0")).unwrap();
        assert!(path.ends_with("qr_pkg-1.0.0-py3-none-any.whl"));
        let Ok(out) = std::process::Command::new("python3")
            .args([
                "-c",
                "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); assert z.testzip() is None; print(sorted(z.namelist())); print(z.read('qr_pkg/__init__.py').decode())",
            ])
            .arg(&path)
            .output()
        else {
            eprintln!("no python3 here");
            return;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("qr_pkg-1.0.0.dist-info/RECORD"), "{text}");
        assert!(text.contains("VERSION = \"1.0.0\""), "{text}");
    }
}
