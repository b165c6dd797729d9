//! Reading what other programs put in the queue without trusting it: any program may drop
//! a file into `queue/`, so a name is taken as bytes, and a file is opened without blocking
//! and without following a link, checked on the open descriptor (a regular file, of a
//! job's size at most), and read up to that bound. A FIFO, a device, a socket, a link or a
//! huge file is refused before a byte of it is read: none can stall the claiming loop,
//! `jobs` or `cancel`, nor fill the runner's memory.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags};

use crate::serve::not_a_job::NotAJob;

/// The most a job's file may hold. A job is at most [`crate::job::MAX_PROMPT_BYTES`]
/// (256 KiB) of prompt and a few short fields; JSON's escapes can make the prompt longer,
/// and a finished job's file adds its result (bounded by the same order). Anything larger
/// is no job, and is refused before it is read, so it costs the runner no memory.
pub const MAX_ENTRY_BYTES: u64 = 4 * 1024 * 1024;

/// Why an entry could not be read: the file is not a job file (`Refused`, for good), or
/// the host failed to read it (`Io`: a transient error, say too many open files).
#[derive(Debug, thiserror::Error)]
pub(super) enum ReadError {
    #[error(transparent)]
    Refused(#[from] NotAJob),
    #[error("unreadable: {0}")]
    Io(std::io::Error),
}

/// The text of the job file at `path`: a regular file of at most [`MAX_ENTRY_BYTES`],
/// opened with `O_NONBLOCK | O_NOFOLLOW` (so that neither a FIFO nor a link is waited for
/// or followed) and checked with `fstat` on the descriptor before any read.
pub(super) fn read_bounded(path: &Path) -> Result<String, ReadError> {
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::NOCTTY;
    let fd = match rustix::fs::open(path, flags | OFlags::CLOEXEC, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::LOOP) => return Err(NotAJob::Link.into()),
        Err(rustix::io::Errno::NXIO) => return Err(NotAJob::Socket.into()),
        Err(e @ (rustix::io::Errno::ACCESS | rustix::io::Errno::PERM)) => {
            return Err(NotAJob::Unreadable(e).into())
        }
        Err(e) => return Err(ReadError::Io(e.into())),
    };
    let stat = rustix::fs::fstat(&fd).map_err(|e| ReadError::Io(e.into()))?;
    let kind = FileType::from_raw_mode(stat.st_mode);
    if kind != FileType::RegularFile {
        return Err(NotAJob::NotRegular(kind_name(kind)).into());
    }
    let size = u64::try_from(stat.st_size).unwrap_or(0);
    if size > MAX_ENTRY_BYTES {
        return Err(too_large(&size.to_string()));
    }
    // The file may grow after the fstat: the read stops one byte past the bound.
    let mut text = Vec::with_capacity(size as usize);
    std::fs::File::from(fd)
        .take(MAX_ENTRY_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(ReadError::Io)?;
    if text.len() as u64 > MAX_ENTRY_BYTES {
        return Err(too_large(&format!("more than {MAX_ENTRY_BYTES}")));
    }
    Ok(String::from_utf8(text).map_err(NotAJob::from)?)
}

fn too_large(size: &str) -> ReadError {
    NotAJob::TooLarge {
        size: size.to_string(),
        max: MAX_ENTRY_BYTES,
    }
    .into()
}

fn kind_name(kind: FileType) -> &'static str {
    match kind {
        FileType::Fifo => "FIFO",
        FileType::Directory => "directory",
        FileType::Symlink => "symbolic link",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        FileType::Socket => "socket",
        _ => "special file",
    }
}

/// A `<id>.json` file of a state's directory, its name as the bytes it is.
pub(super) struct JobFile {
    pub name: OsString,
    pub path: PathBuf,
    /// The id its name gives it; `None` when the name is not UTF-8 (so no job id).
    pub id: Option<String>,
}

impl JobFile {
    /// The name, printable: bytes that are not UTF-8 escaped as `\xNN` (a UTF-8 name that
    /// spells such an escape shows the same; the set-aside copy's time prefix tells them apart).
    pub fn shown_name(&self) -> String {
        shown(&self.name)
    }
}

/// `name` with the bytes that are not UTF-8 (and backslashes) escaped.
pub(super) fn shown(name: &OsStr) -> String {
    match name.to_str() {
        Some(s) => s.to_string(),
        None => name.as_bytes().escape_ascii().to_string(),
    }
}

/// The job files of a state's directory: names ending in `.json`. Names starting with a
/// dot are another program's files still being written (or the queue's own temporary
/// ones), never jobs.
pub(super) fn job_files(dir: &Path) -> std::io::Result<impl Iterator<Item = JobFile>> {
    Ok(std::fs::read_dir(dir)?.flatten().filter_map(|e| {
        let name = e.file_name();
        let bytes = name.as_bytes();
        if bytes.starts_with(b".") || !bytes.ends_with(b".json") {
            return None;
        }
        let id = name
            .to_str()
            .and_then(|s| s.strip_suffix(".json"))
            .map(str::to_string);
        Some(JobFile {
            path: e.path(),
            name,
            id,
        })
    }))
}
