//! Quoting for the bash scripts the runner writes (devShell environments, agent wrappers).

/// Single-quotes `value` for bash. A NUL cannot be held by a bash variable at all, so it is
/// dropped rather than silently truncating the rest of the value.
pub fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('\'');
    for c in value.chars() {
        match c {
            '\'' => out.push_str("'\\''"),
            '\0' => {}
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}
