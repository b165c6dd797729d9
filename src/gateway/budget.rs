//! An account's daily token budget, shared by every job and every runner of one state
//! directory: one small file per account (`<state>/gateway/budget/<account>.json`), read and
//! replaced under a lock file beside it. The file is replaced by rename, so a runner killed
//! mid-write leaves the old count, never half a file; a count of a day that has passed (UTC)
//! reads as zero.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::lockfile::LockFile;
use crate::util::io::{IoContext, IoError};

/// How long a request waits for another runner's update before giving up on the budget
/// (the update itself is a read and a rename).
const LOCK_WAIT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Count {
    /// The UTC day, `YYYY-MM-DD`.
    pub day: String,
    pub tokens: u64,
}

#[derive(Debug, Clone)]
pub struct Budget {
    pub account: String,
    /// Tokens per UTC day.
    pub limit: u64,
    dir: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum BudgetError {
    #[error("the budget of account {account} stayed locked for {secs}s ({lock})")]
    Locked {
        account: String,
        secs: u64,
        lock: PathBuf,
    },
    #[error(transparent)]
    Io(#[from] IoError),
}

/// Today in UTC, as the count files name it.
pub fn today() -> String {
    let now = time::OffsetDateTime::now_utc().date();
    format!(
        "{:04}-{:02}-{:02}",
        now.year(),
        u8::from(now.month()),
        now.day()
    )
}

impl Budget {
    pub fn new(state_root: &Path, account: &str, limit: u64) -> Budget {
        Budget {
            account: account.to_string(),
            limit,
            dir: state_root.join("gateway").join("budget"),
        }
    }

    /// The account's name as a file name: as it is when it is a plain name, else hex.
    fn stem(&self) -> String {
        let plain = !self.account.starts_with('.')
            && !self.account.is_empty()
            && self
                .account
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        match plain {
            true => self.account.clone(),
            false => format!("x-{}", crate::util::hex::encode(self.account.as_bytes())),
        }
    }

    pub fn file(&self) -> PathBuf {
        self.dir.join(format!("{}.json", self.stem()))
    }

    fn lock_path(&self) -> PathBuf {
        self.dir.join(format!("{}.lock", self.stem()))
    }

    /// Tokens spent today.
    pub fn spent(&self) -> Result<u64, BudgetError> {
        Ok(self.read(&today())?.tokens)
    }

    fn read(&self, day: &str) -> Result<Count, BudgetError> {
        let path = self.file();
        match std::fs::read(&path) {
            Ok(data) => {
                // The file is only ever replaced whole; one that does not parse was written
                // by something else and names no day, so it counts as nothing spent.
                let count: Count = serde_json::from_slice(&data).unwrap_or_default();
                Ok(if count.day == day {
                    count
                } else {
                    Count {
                        day: day.to_string(),
                        tokens: 0,
                    }
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Count {
                day: day.to_string(),
                tokens: 0,
            }),
            Err(source) => Err(IoError::at("reading", &path, source).into()),
        }
    }

    /// Adds `tokens` to today's count; returns the new count.
    pub fn add(&self, tokens: u64) -> Result<u64, BudgetError> {
        std::fs::create_dir_all(&self.dir).at("creating", &self.dir)?;
        let lock_path = self.lock_path();
        let _lock = LockFile::acquire_blocking_within(&lock_path, LOCK_WAIT)
            .at("locking", &lock_path)?
            .ok_or_else(|| BudgetError::Locked {
                account: self.account.clone(),
                secs: LOCK_WAIT.as_secs(),
                lock: lock_path.clone(),
            })?;
        let mut count = self.read(&today())?;
        count.tokens = count.tokens.saturating_add(tokens);
        let data = serde_json::to_vec(&count).unwrap_or_default();
        let file = self.file();
        crate::util::fs::write_atomically(&self.dir, &file, &data).at("writing", &file)?;
        Ok(count.tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up_across_handles_and_threads_and_reset_on_a_new_day() {
        let dir = tempfile::tempdir().unwrap();
        let a = Budget::new(dir.path(), "work", 1000);
        assert_eq!(a.spent().unwrap(), 0);
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let b = Budget::new(dir.path(), "work", 1000);
                std::thread::spawn(move || {
                    for _ in 0..25 {
                        b.add(2).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(a.spent().unwrap(), 400);
        // Another account has its own count.
        assert_eq!(Budget::new(dir.path(), "other", 1).spent().unwrap(), 0);
        let odd = Budget::new(dir.path(), "../x", 1);
        assert!(odd.file().starts_with(dir.path().join("gateway/budget")));
        assert_eq!(odd.file().file_name().unwrap(), "x-2e2e2f78.json");
        // Yesterday's count is not today's.
        std::fs::write(a.file(), r#"{"day":"2000-01-01","tokens":99999}"#).unwrap();
        assert_eq!(a.spent().unwrap(), 0);
        assert_eq!(a.add(5).unwrap(), 5);
        // No lock file is left behind.
        let left: Vec<_> = std::fs::read_dir(dir.path().join("gateway/budget"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(left, vec!["work.json".to_string()]);
    }
}
