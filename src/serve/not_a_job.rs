//! Why something a queue handed over is no job: the entry is set aside for good (the
//! directory queue's `serve/rejected/`, the PostgreSQL queue's `rejected` state) with this as
//! its reason, and the next entry is tried. Both queues refuse with the same words.

use std::path::PathBuf;

use crate::job::JobError;

/// A queue entry that is not a job, and why: the text is what the operator reads beside it.
#[derive(Debug, thiserror::Error)]
pub enum NotAJob {
    #[error("a symbolic link, not a job file (links are not followed)")]
    Link,
    #[error("a socket, not a job file")]
    Socket,
    /// For good, not transient: the file stays the oldest in the queue, and putting it back
    /// would stall every job behind it (a program with a strict umask, say 077).
    #[error(
        "unreadable by the runner ({0}): make it readable to the runner's user and submit it \
         again"
    )]
    Unreadable(rustix::io::Errno),
    #[error("a {0}, not a regular file")]
    NotRegular(&'static str),
    /// `size` as read: a number, or "more than N" for a file that grew past the bound.
    #[error("{size} bytes; a job file is at most {max} bytes")]
    TooLarge { size: String, max: u64 },
    #[error("the file name \"{0}\" is not UTF-8, so it names no job")]
    NameNotUtf8(String),
    #[error("invalid job: {0}")]
    NotUtf8(#[from] std::string::FromUtf8Error),
    #[error("invalid job: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("invalid queue entry: {0}")]
    NotAnEntry(#[source] serde_json::Error),
    #[error(transparent)]
    Job(#[from] JobError),
    /// The id inside differs from the one the queue holds it under (`named`: "the file name
    /// x.json", "the row's id \"x\"").
    #[error("invalid job field \"id\": {inner:?} differs from {named}")]
    IdDiffers { inner: String, named: String },
    #[error("job id {id:?} is already taken (by {})", .by.display())]
    Taken { id: String, by: PathBuf },
}
