//! Files written whole or not at all.

use std::path::Path;

/// Writes `data` to `path` through a temporary file in `dir` (created if missing; it must be
/// on `path`'s file system), synced and then renamed over `path`: a reader sees the old
/// content or the new, never part of it, and a crash leaves no half-written file.
pub fn write_atomically(dir: &Path, path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(data)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
