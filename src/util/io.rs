//! The one I/O error of the runner's modules: what was being done (and to which path) with the
//! `io::Error` that stopped it, read as `reading /var/lib/x: Permission denied`. Each module's
//! error enum wraps it (`#[error(transparent)] Io(#[from] IoError)`) rather than defining its
//! own variant and constructors; [`IoContext`] attaches the context to an `io::Result`.

use std::path::Path;
use std::sync::Arc;

/// An `io::Error` with what was being done. Cloneable (the `io::Error` is shared), as the
/// errors of a cache shared by waiters must be.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{context}: {source}")]
pub struct IoError {
    /// `reading /path`, `starting the proxy`: what failed, in the words of the message.
    pub context: String,
    #[source]
    pub source: Arc<std::io::Error>,
}

impl IoError {
    pub fn new(context: impl Into<String>, source: std::io::Error) -> IoError {
        IoError {
            context: context.into(),
            source: Arc::new(source),
        }
    }

    /// `{action} {path}: {source}`.
    pub fn at(action: &str, path: &Path, source: std::io::Error) -> IoError {
        IoError::new(format!("{action} {}", path.display()), source)
    }

    pub fn kind(&self) -> std::io::ErrorKind {
        self.source.kind()
    }
}

/// Context for an `io::Result`, made only when it is an error.
pub trait IoContext<T> {
    /// `{context}: {source}`.
    fn context(self, context: &str) -> Result<T, IoError>;
    /// `{action} {path}: {source}`.
    fn at(self, action: &str, path: &Path) -> Result<T, IoError>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn context(self, context: &str) -> Result<T, IoError> {
        self.map_err(|source| IoError::new(context, source))
    }

    fn at(self, action: &str, path: &Path) -> Result<T, IoError> {
        self.map_err(|source| IoError::at(action, path, source))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_is_the_context_then_the_cause() {
        let denied = || std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let err = Err::<(), _>(denied())
            .at("reading", Path::new("/x/y"))
            .unwrap_err();
        assert_eq!(err.to_string(), format!("reading /x/y: {}", denied()));
        assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied);
        let err = Err::<(), _>(denied()).context("binding").unwrap_err();
        assert_eq!(err.to_string(), format!("binding: {}", denied()));
    }
}
