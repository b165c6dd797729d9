//! The error of one config field, which every section's check returns: apart from the file's
//! parsing ([`super::file`]) so that the sections it parses need not import it back.

/// A config field whose value is wrong, and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: &str, message: impl Into<String>) -> FieldError {
        FieldError {
            field: field.to_string(),
            message: message.into(),
        }
    }
}
