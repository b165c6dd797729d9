//! Where `serve` tells an operator's systems about jobs (`events` in the config): webhooks
//! that receive each event as a signed JSON POST, and a command that reads it on stdin.
//! Checked when the config is loaded; each webhook's secret is a file read when `serve`
//! starts, private in the jobs' policy's sense.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::field::FieldError;

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct EventsConfig {
    /// Each gets every event, POSTed as JSON with a signature header.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub webhooks: Vec<Webhook>,
    /// A command (its argv, the program an absolute path) run for each event, the event on
    /// its stdin: a trusted operator hook, run as the runner.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// How long the command may run before it is killed [default: 10s].
    #[serde(skip_serializing_if = "Option::is_none", with = "optional_duration")]
    pub timeout: Option<Duration>,
}

/// One webhook receiver.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Webhook {
    /// An `http://` or `https://` URL.
    pub url: String,
    /// The HMAC-SHA256 key the body is signed with (`X-Quest-Signature-256`), read from this
    /// file when `serve` starts; a private file the jobs' policy hides.
    pub secret_file: PathBuf,
}

impl EventsConfig {
    /// The command's timeout when none is set.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

    pub fn is_default(&self) -> bool {
        *self == EventsConfig::default()
    }

    /// Whether any event goes anywhere.
    pub fn is_on(&self) -> bool {
        !self.webhooks.is_empty() || !self.command.is_empty()
    }

    /// `timeout`, or its default.
    pub fn timeout(&self) -> Duration {
        self.timeout.unwrap_or(Self::DEFAULT_TIMEOUT)
    }

    /// Each webhook's URL is http(s) with a host and its secret file an absolute path; the
    /// command's program is an absolute path.
    pub fn check(&self) -> Result<(), FieldError> {
        for (i, hook) in self.webhooks.iter().enumerate() {
            let field = format!("events.webhooks[{i}]");
            let uri: Option<http::Uri> = hook.url.parse().ok();
            let ok = uri.as_ref().is_some_and(|u| {
                matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some()
            });
            if !ok {
                return Err(FieldError::new(
                    &format!("{field}.url"),
                    format!("{:?} is not an http:// or https:// URL", hook.url),
                ));
            }
            if !hook.secret_file.is_absolute() {
                return Err(FieldError::new(
                    &format!("{field}.secret_file"),
                    format!("{} is not an absolute path", hook.secret_file.display()),
                ));
            }
        }
        if let Some(program) = self.command.first() {
            if !program.starts_with('/') {
                return Err(FieldError::new(
                    "events.command",
                    format!("{program:?} is not an absolute path (the program to run)"),
                ));
            }
        }
        if self.timeout == Some(Duration::ZERO) {
            return Err(FieldError::new("events.timeout", "must be more than 0s"));
        }
        Ok(())
    }
}

/// An optional duration written as people do (`"10s"`).
mod optional_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&humantime::format_duration(*d).to_string()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let text = Option::<String>::deserialize(d)?;
        text.map(|t| {
            humantime::parse_duration(&t).map_err(|e| {
                serde::de::Error::custom(format!("{t:?} is not a duration ({e}); e.g. \"10s\""))
            })
        })
        .transpose()
    }
}
