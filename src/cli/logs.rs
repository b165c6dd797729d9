//! `quest-runner logs ID`: what a job's agent did, as it does it. By default its event stream
//! rendered for a person (`crate::activity`); `--json` the same events for machines;
//! `--transcript` the raw stream, `--stderr` the agent's own log, `--network` and `--model`
//! the job's network and model logs, which the runner writes.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Duration;

use super::queue::{failure, Queue};
use super::{Context, Failure};
use crate::activity::{Format, Renderer};
use crate::exit::Exit;
use crate::serve::pg;
use crate::serve::queue::{JobState, QueueError};

#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    pub id: String,
    /// Keep printing until the job ends.
    #[arg(long, short)]
    pub follow: bool,
    /// The activity as JSON lines: one event a line, `kind` text, tool, output, end or error.
    #[arg(long, group = "what")]
    pub json: bool,
    /// The agent's raw event stream (transcript.jsonl).
    #[arg(long, group = "what")]
    pub transcript: bool,
    /// The agent's stderr (agent.log).
    #[arg(long, group = "what")]
    pub stderr: bool,
    /// The job's network log: each request through its proxy and the decision on it.
    #[arg(long, group = "what")]
    pub network: bool,
    /// The job's model log: each request through the runner's model gateway.
    #[arg(long, group = "what")]
    pub model: bool,
}

/// Which of the job's files `logs` prints, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Activity(Format),
    Transcript,
    Stderr,
    Network,
    Model,
}

impl Source {
    fn of(args: &LogsArgs) -> Source {
        match () {
            _ if args.json => Source::Activity(Format::Json),
            _ if args.transcript => Source::Transcript,
            _ if args.stderr => Source::Stderr,
            _ if args.network => Source::Network,
            _ if args.model => Source::Model,
            _ => Source::Activity(Format::Human),
        }
    }

    /// The file in the job's directory.
    fn file(self) -> &'static str {
        match self {
            Source::Activity(_) | Source::Transcript => "runner/transcript.jsonl",
            Source::Stderr => "runner/agent.log",
            Source::Network => "network.log",
            Source::Model => "model.log",
        }
    }

    /// Where the bytes go: rendered; or as they are for a program, and on a terminal with what
    /// could steer it or reorder what it shows escaped (the files hold what the job wrote).
    fn sink<'a>(self, out: &'a mut dyn Write, terminal: bool) -> Box<dyn Write + 'a> {
        match self {
            Source::Activity(format) => Box::new(Renderer::new(out, format)),
            _ if terminal => Box::new(crate::util::text::ShownLines::new(out)),
            _ => Box::new(out),
        }
    }
}

pub fn logs(ctx: Context, args: LogsArgs) -> Result<(), Failure> {
    crate::job::check_id(&args.id)?;
    let source = Source::of(&args);
    let queue = match Queue::open(&ctx)? {
        Queue::Dir(queue) => queue,
        Queue::Pg(db) => {
            let stream = match source {
                Source::Activity(_) | Source::Transcript => pg::logship::Stream::Transcript,
                Source::Stderr => pg::logship::Stream::Agent,
                Source::Network => pg::logship::Stream::Network,
                Source::Model => pg::logship::Stream::Model,
            };
            let (id, follow) = (&args.id, args.follow);
            return db.run(|client| async move {
                let mut stdout = std::io::stdout().lock();
                let terminal = stdout.is_terminal();
                let mut out = source.sink(&mut stdout, terminal);
                pg::admin::logs(&client, id, stream, follow, &mut out).await
            });
        }
    };
    // A job `run` made has no queue state: it is running until its result is written.
    let ran = super::ran::dir(&ctx, &args.id).filter(|_| queue.find_state(&args.id).is_none());
    let state_now = || match &ran {
        Some(dir) if super::ran::finished(dir) => Some(JobState::Done),
        Some(_) => Some(JobState::Running),
        None => queue.find_state(&args.id),
    };
    let Some(state) = state_now() else {
        return Err(failure(QueueError::NotFound(args.id)));
    };
    let path = queue.job_dir(&args.id).join(source.file());
    let mut stdout = std::io::stdout().lock();
    let terminal = stdout.is_terminal();
    let mut out = source.sink(&mut stdout, terminal);
    follow(&path, state, args.follow, state_now, &mut out)
}

/// Prints `path` and, when following, what is added to it until the job ends.
fn follow(
    path: &Path,
    mut state: JobState,
    follow: bool,
    state_now: impl Fn() -> Option<JobState>,
    out: &mut impl Write,
) -> Result<(), Failure> {
    let mut offset = 0u64;
    loop {
        offset += copy_from(path, offset, out).map_err(|e| match e.kind() {
            std::io::ErrorKind::BrokenPipe => Failure::quiet(),
            _ => Failure::new(Exit::Failed, format!("reading {}: {e}", path.display())),
        })?;
        if !follow || state.is_finished() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
        match state_now() {
            Some(now) => state = now,
            None => return Ok(()),
        }
        if state == JobState::Queued {
            offset = 0; // a requeued job starts a new log
        }
    }
}

/// Writes what `path` holds from `offset` on; returns how many bytes. A missing file is empty.
fn copy_from(path: &Path, offset: u64, out: &mut impl Write) -> std::io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    if file.metadata()?.len() < offset {
        return Ok(0);
    }
    file.seek(SeekFrom::Start(offset))?;
    let n = std::io::copy(&mut file, out)?;
    out.flush()?;
    Ok(n)
}
