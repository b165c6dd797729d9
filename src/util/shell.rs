//! Quoting for the bash scripts the runner writes (devShell environments, agent wrappers).

/// Single-quotes `value` for bash. A NUL cannot be held by a bash variable at all, so it is
/// dropped rather than silently truncating the rest of the value.
pub fn quote(value: &str) -> String {
    // Only ASCII bytes are added or dropped, so the result stays UTF-8.
    String::from_utf8_lossy(&quote_bytes(value.as_bytes())).into_owned()
}

/// [`quote`] for bytes (a path, a command line), which need not be UTF-8.
pub fn quote_bytes(value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len() + 2);
    out.push(b'\'');
    for &b in value {
        match b {
            b'\'' => out.extend_from_slice(b"'\\''"),
            0 => {}
            b => out.push(b),
        }
    }
    out.push(b'\'');
    out
}
