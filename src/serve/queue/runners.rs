//! Whether any `serve` works this directory queue: `submit` succeeds with none running, and
//! a job then waits with nothing to say why. Each `serve` holds a lock on
//! `serve/runners/<pid>.lock` for its lifetime; a reader tries each lock, and one it can take
//! belongs to a runner that is gone (the lock goes with its file). No heartbeat, no clock:
//! the kernel releases a dead process's locks.

use std::path::PathBuf;

use super::FsQueue;
use crate::lockfile::LockFile;

/// This process's mark as a runner of the queue, held while it serves.
pub struct Serving(#[allow(dead_code)] LockFile);

impl FsQueue {
    fn runners_dir(&self) -> PathBuf {
        self.sub("serve/runners")
    }

    /// Marks this process as serving the queue until the mark is dropped.
    pub fn serving(&self) -> std::io::Result<Serving> {
        let dir = self.runners_dir();
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(format!("{}.lock", std::process::id()));
        match LockFile::try_acquire(&path)? {
            Some(lock) => Ok(Serving(lock)),
            None => Err(std::io::Error::other(format!(
                "{} is locked by another process",
                path.display()
            ))),
        }
    }

    /// The pids of the runners serving the queue now; the marks of runners that are gone are
    /// removed on the way.
    pub fn runners(&self) -> Vec<u32> {
        let Ok(entries) = std::fs::read_dir(self.runners_dir()) else {
            return Vec::new();
        };
        let mut alive = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".lock"))
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            // Taken: its runner is gone, and dropping the lock removes its file.
            match LockFile::try_acquire(&entry.path()) {
                Ok(Some(_gone)) => {}
                Ok(None) => alive.push(pid),
                Err(_) => {}
            }
        }
        alive.sort_unstable();
        alive
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_serving_mark_is_seen_and_a_dropped_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let state = crate::state::StateDir::at(dir.path());
        let queue = FsQueue::open(&state, std::time::Duration::from_secs(60)).unwrap();
        assert!(queue.runners().is_empty());
        let mark = queue.serving().unwrap();
        // The lock is per open file: the reader's own try fails while the mark holds it.
        assert_eq!(queue.runners(), vec![std::process::id()]);
        drop(mark);
        assert!(queue.runners().is_empty());
        assert_eq!(std::fs::read_dir(queue.runners_dir()).unwrap().count(), 0);
    }
}
