//! Queueing a job: checked against the config, then written under a temporary name and
//! renamed into `queue/` without replacing, so two submits of one id cannot both win.

use super::entry::to_json;
use super::{now_rfc3339, Entry, FsQueue, JobState, QueueError};
use crate::config::Config;
use crate::job::{Job, JobSpec};
use crate::util::io::{IoContext, IoError};

impl FsQueue {
    /// Validates `spec` (a generated id when it has none), checks its account against
    /// `config`, and queues it. Returns the job as it will run.
    pub fn submit(&self, mut spec: JobSpec, config: &Config) -> Result<Job, QueueError> {
        let job = spec.clone().validate(self.default_timeout())?;
        match config.accounts.get(&job.account) {
            None => {
                return Err(QueueError::Account(format!(
                    "{:?} is not an account in the runner's config",
                    job.account
                )))
            }
            Some(a) if a.agent() != job.agent => {
                return Err(QueueError::Account(format!(
                    "{:?} is for {}, but the job asks for {}",
                    job.account,
                    a.agent().name(),
                    job.agent.name()
                )))
            }
            Some(_) => {}
        }
        if let Some(path) = self.existing(&job.id) {
            return Err(QueueError::Duplicate { id: job.id, path });
        }
        spec.id = Some(job.id.clone());
        let entry = Entry {
            job: spec,
            submitted_at: now_rfc3339(),
            attempts: Vec::new(),
            result: None,
        };
        let target = self.path(JobState::Queued, &job.id);
        let dir = self.sub(JobState::Queued.dir());
        let data = to_json(&entry);
        let tmp = tempfile::Builder::new()
            .prefix(".submit-")
            .tempfile_in(&dir)
            .at("creating a file in", &dir)?;
        std::fs::write(tmp.path(), &data).at("writing", tmp.path())?;
        tmp.as_file().sync_all().at("syncing", tmp.path())?;
        // No-replace: two submits of one id race to this rename, and only one wins.
        match rustix::fs::renameat_with(
            rustix::fs::CWD,
            tmp.path(),
            rustix::fs::CWD,
            &target,
            rustix::fs::RenameFlags::NOREPLACE,
        ) {
            Ok(()) => Ok(job),
            Err(rustix::io::Errno::EXIST) => Err(QueueError::Duplicate {
                id: job.id,
                path: target,
            }),
            Err(e) => Err(IoError::at("queueing", &target, e.into()).into()),
        }
    }
}
