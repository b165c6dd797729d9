//! A push remote as the runner's git reaches it: only the remote's own transport allowed,
//! and the credential handed to git by a program that reads the file when git asks (an SSH
//! command naming the key, a credential helper printing the token), so the secret is in no
//! argument list, no environment and no file a job can read.

use std::path::Path;

use crate::util::shell::quote;

/// How git reaches a remote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Ssh,
    Http,
    Https,
    Git,
    File,
}

impl Transport {
    /// The transport of `url`, as git decides it; `None` for one the runner does not push over
    /// (`ext::`, remote helpers).
    pub fn of(url: &str) -> Option<Transport> {
        if let Some((scheme, _)) = url.split_once("://") {
            return match scheme {
                "ssh" | "git+ssh" | "ssh+git" => Some(Transport::Ssh),
                "https" => Some(Transport::Https),
                "http" => Some(Transport::Http),
                "git" => Some(Transport::Git),
                "file" => Some(Transport::File),
                _ => None,
            };
        }
        if url.starts_with('/') {
            return Some(Transport::File);
        }
        // scp-like `[user@]host:path`: a colon before any slash.
        match (url.find(':'), url.find('/')) {
            (Some(c), slash) if c > 0 && slash.is_none_or(|s| c < s) && !url.contains("::") => {
                Some(Transport::Ssh)
            }
            _ => None,
        }
    }

    /// git's name of it in `protocol.<name>.allow`.
    fn protocol(self) -> &'static str {
        match self {
            Transport::Ssh => "ssh",
            Transport::Http => "http",
            Transport::Https => "https",
            Transport::Git => "git",
            Transport::File => "file",
        }
    }
}

/// `url` without a password or token in its user part, for the result and the log.
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let host_end = rest.find('/').unwrap_or(rest.len());
    match rest[..host_end].rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => url.to_string(),
    }
}

/// The `-c` settings and environment of the push's git: the one transport, and the
/// credential (when there is one) through the program git runs for it.
pub struct Access {
    pub config: Vec<String>,
    pub env: Vec<(String, String)>,
}

pub fn access(transport: Transport, credential: Option<&Path>, username: &str) -> Access {
    let mut config = vec![
        "protocol.allow=never".to_string(),
        format!("protocol.{}.allow=always", transport.protocol()),
        // The empty value clears every helper before it; the runner's own (if any) follows.
        "credential.helper=".to_string(),
        "core.askPass=".to_string(),
    ];
    let mut env = Vec::new();
    match (transport, credential) {
        (Transport::Ssh, key) => {
            // No agent and no other key: the deploy key, or nothing.
            let identity = key.map_or("-o IdentityFile=none".to_string(), |k| {
                format!("-i {}", quote(&k.to_string_lossy()))
            });
            env.push((
                "GIT_SSH_COMMAND".to_string(),
                format!(
                    "ssh -o BatchMode=yes -o IdentitiesOnly=yes -o IdentityAgent=none {identity}"
                ),
            ));
            env.push(("GIT_SSH_VARIANT".to_string(), "ssh".to_string()));
        }
        (Transport::Http | Transport::Https, Some(token)) => {
            // Read by the shell's builtins when git asks: the token is never an argument.
            let file = quote(&token.to_string_lossy());
            let user = quote(username);
            config.push(format!(
                "credential.helper=!f() {{ test \"$1\" = get || exit 0; IFS= read -r t < {file} || test -n \"$t\"; printf 'username=%s\\npassword=%s\\n' {user} \"$t\"; }}; f"
            ));
        }
        _ => {}
    }
    Access { config, env }
}

#[cfg(test)]
#[path = "remote_tests.rs"]
mod tests;
