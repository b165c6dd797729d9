//! The agent's log and event stream, copied into the database while a job runs, so that
//! `logs [--follow]` works from any host, wherever the job ran.
//!
//! Each attempt's `agent.log` and `transcript.jsonl` (in `jobs/<id>/runner/` of the runner's
//! state dir) are read from where the last copy stopped, every [`SHIP_EVERY`] and once more
//! when the attempt ends, and stored as numbered chunks of at most [`CHUNK`] bytes. A stream
//! is kept to [`LIMIT`] bytes: past it, one last chunk says where the whole file is. The
//! runner's own files are not changed. A chunk is stored with `ON CONFLICT DO NOTHING`, so
//! a retry after a lost reply does not store it twice.

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::Duration;

use super::session::{QueryError, Session};

/// The largest chunk.
pub const CHUNK: usize = 256 * 1024;
/// What a stream of one attempt keeps in the database.
pub const LIMIT: u64 = 8 * 1024 * 1024;
/// How often a running job's new output is copied: `logs --follow` lags by at most this.
pub const SHIP_EVERY: Duration = Duration::from_millis(500);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// The agent's stderr (`agent.log`).
    Agent,
    /// The agent's event stream (`transcript.jsonl`).
    Transcript,
    /// The job's network log (`network.log`, the runner's).
    Network,
    /// The job's model log (`model.log`, the runner's).
    Model,
}

impl Stream {
    pub const ALL: [Stream; 4] = [
        Stream::Agent,
        Stream::Transcript,
        Stream::Network,
        Stream::Model,
    ];

    /// The name in the `logs` table.
    pub fn name(self) -> &'static str {
        match self {
            Stream::Agent => "agent",
            Stream::Transcript => "transcript",
            Stream::Network => "network",
            Stream::Model => "model",
        }
    }

    /// The file, from the attempt's `runner/` directory (the job's own logs are beside it).
    pub fn file(self) -> &'static str {
        match self {
            Stream::Agent => "agent.log",
            Stream::Transcript => "transcript.jsonl",
            Stream::Network => "../network.log",
            Stream::Model => "../model.log",
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Progress {
    /// Bytes of the file copied so far.
    offset: u64,
    /// The next chunk's number.
    seq: i32,
    /// Past [`LIMIT`]: nothing more is copied.
    cut: bool,
}

/// One attempt's copier.
pub struct Shipper {
    job_id: String,
    attempt: i32,
    /// The attempt's `runner/` directory on this host.
    dir: PathBuf,
    host: String,
    progress: tokio::sync::Mutex<[Progress; Stream::ALL.len()]>,
}

impl Shipper {
    pub fn new(job_id: &str, attempt: i32, dir: PathBuf, host: &str) -> Shipper {
        Shipper {
            job_id: job_id.to_string(),
            attempt,
            dir,
            host: host.to_string(),
            progress: tokio::sync::Mutex::new([Progress::default(); Stream::ALL.len()]),
        }
    }

    /// Copies what the files gained since the last call. Stops at the first failure, to
    /// resume from there next time.
    pub async fn ship(&self, session: &Session) -> Result<(), QueryError> {
        let mut progress = self.progress.lock().await;
        for (i, stream) in Stream::ALL.into_iter().enumerate() {
            let p = &mut progress[i];
            while !p.cut {
                let path = self.dir.join(stream.file());
                let mut data = read_from(&path, p.offset, CHUNK);
                if data.is_empty() {
                    break;
                }
                let room = LIMIT - p.offset;
                let full = data.len() == CHUNK;
                let cut = data.len() as u64 >= room;
                data.truncate(room as usize);
                self.insert(session, stream, p.seq, data.clone()).await?;
                p.offset += data.len() as u64;
                p.seq += 1;
                if cut {
                    let note = format!(
                        "\n[quest-runner: the {} was cut at {} MiB here; all of it is {} on {}]\n",
                        stream.file(),
                        LIMIT / (1024 * 1024),
                        path.display(),
                        self.host
                    );
                    self.insert(session, stream, p.seq, note.into_bytes())
                        .await?;
                    p.seq += 1;
                    p.cut = true;
                }
                if !full {
                    break;
                }
            }
        }
        Ok(())
    }

    async fn insert(
        &self,
        session: &Session,
        stream: Stream,
        seq: i32,
        data: Vec<u8>,
    ) -> Result<(), QueryError> {
        let (id, attempt, name) = (&self.job_id, &self.attempt, stream.name());
        session
            .run("storing the agent's output", |c| async move {
                c.execute(
                    "INSERT INTO quest_runner.logs (job_id, attempt, stream, seq, data)
                     VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                    &[id, attempt, &name, &seq, &data],
                )
                .await
            })
            .await
            .map(|_| ())
    }
}

/// Up to `max` bytes of `path` from `offset`; nothing if the file is missing or shorter
/// (a file that shrank is another attempt's, which is not copied).
fn read_from(path: &std::path::Path, offset: u64, max: usize) -> Vec<u8> {
    let Ok(mut file) = std::fs::File::open(path) else {
        return Vec::new();
    };
    if file.seek(SeekFrom::Start(offset)).is_err() {
        return Vec::new();
    }
    let mut data = Vec::with_capacity(max.min(64 * 1024));
    let _ = file.take(max as u64).read_to_end(&mut data);
    data
}
