//! An exclusive lock shared by every runner process on one state directory.
//!
//! `flock` on a file named after what is being guarded. The holder deletes the file before it
//! lets go, so an idle state directory holds no lock files; a process that opened the old file
//! just before it was deleted notices that the path no longer names the inode it locked, and
//! tries again. Waiting polls rather than blocking a thread, so a waiter that is cancelled stops
//! waiting at once.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::FlockOperation;

/// The longest pause between two tries. Waiters are other requests for the same devShell;
/// they should notice the builder finished within a few milliseconds, and a poll is one
/// failed `flock` call.
const MAX_POLL: Duration = Duration::from_millis(10);

#[derive(Debug)]
pub struct LockFile {
    path: PathBuf,
    _file: File,
}

impl LockFile {
    /// Waits until the lock at `path` is ours.
    pub async fn acquire(path: &Path) -> io::Result<LockFile> {
        let mut pause = Duration::from_millis(2);
        loop {
            if let Some(lock) = Self::try_acquire(path)? {
                return Ok(lock);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_POLL);
        }
    }

    /// Waits up to `limit` for the lock, blocking the thread; `None` if it stayed taken. For
    /// code that cannot await (cleanup in `Drop`), which must not wait forever either.
    pub fn acquire_blocking_within(path: &Path, limit: Duration) -> io::Result<Option<LockFile>> {
        let deadline = std::time::Instant::now() + limit;
        let mut pause = Duration::from_millis(2);
        loop {
            if let Some(lock) = Self::try_acquire(path)? {
                return Ok(Some(lock));
            }
            if std::time::Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(MAX_POLL);
        }
    }

    /// Takes the lock if nobody holds it.
    pub fn try_acquire(path: &Path) -> io::Result<Option<LockFile>> {
        loop {
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .open(path)?;
            match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => {}
                Err(rustix::io::Errno::WOULDBLOCK) => return Ok(None),
                Err(e) => return Err(e.into()),
            }
            // The previous holder may have deleted the file between our open and our lock.
            let ours = file.metadata()?;
            match std::fs::metadata(path) {
                Ok(now) if now.ino() == ours.ino() && now.dev() == ours.dev() => {
                    return Ok(Some(LockFile {
                        path: path.to_path_buf(),
                        _file: file,
                    }));
                }
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        // Delete while still holding the lock; closing the file then releases it.
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn second_holder_waits_and_file_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        let first = LockFile::acquire(&path).await.unwrap();
        assert!(LockFile::try_acquire(&path).unwrap().is_none());
        drop(first);
        assert!(!path.exists(), "an idle lock leaves no file");
        let second = LockFile::try_acquire(&path).unwrap();
        assert!(second.is_some());
    }

    #[test]
    fn a_blocking_waiter_gets_the_lock_when_the_holder_lets_go_or_gives_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        let first = LockFile::try_acquire(&path).unwrap().unwrap();
        let gave_up = LockFile::acquire_blocking_within(&path, Duration::from_millis(30)).unwrap();
        assert!(gave_up.is_none());
        let waiter = {
            let path = path.clone();
            std::thread::spawn(move || {
                LockFile::acquire_blocking_within(&path, Duration::from_secs(30))
                    .map(|l| l.is_some())
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(!waiter.is_finished(), "waits while the lock is held");
        drop(first);
        assert!(waiter.join().unwrap().unwrap());
        assert!(!path.exists());
    }
}
