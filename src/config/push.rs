//! Where a finished job's commits are pushed, per repository (`push` in the config): checked
//! when the config is loaded, so a branch template that could name a branch outside its
//! namespace, or a tag, never reaches a push.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::field::FieldError;
use crate::util::git_names::is_ref_name;

/// The placeholder a branch template names the job by.
pub const JOB_PLACEHOLDER: &str = "{job}";

/// One repository's push settings. The branch pushed is
/// `refs/heads/<namespace>/<branch with {job} replaced>`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PushConfig {
    /// Where to push [default: the job's repository, its origin].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
    /// The branches the runner may create: every pushed branch is under `<namespace>/`.
    pub namespace: String,
    /// The branch's name under the namespace; `{job}` is the job's id.
    #[serde(default = "default_branch")]
    pub branch: String,
    /// An SSH private key (ssh remotes) or an HTTPS token (http(s) remotes), read at push
    /// time by the runner's git alone; a private file the jobs' policy hides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_file: Option<PathBuf>,
    /// The user name sent with an HTTPS token [default: `x-access-token`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// Push the commits of untrusted jobs too (their code was written by whoever pushed the
    /// revision); off by default.
    #[serde(default)]
    pub untrusted: bool,
}

fn default_branch() -> String {
    JOB_PLACEHOLDER.to_string()
}

impl PushConfig {
    /// The full ref job `job_id` is pushed to, or why the name is not one the runner pushes.
    pub fn branch_ref(&self, job_id: &str) -> Result<String, String> {
        let name = self.branch.replace(JOB_PLACEHOLDER, job_id);
        let full = format!("{}/{name}", self.namespace);
        let parts_ok = full
            .split('/')
            .all(|p| !p.is_empty() && !p.starts_with('.') && !p.ends_with('.'));
        if !is_ref_name(&full) || !parts_ok || name.contains('{') || name.contains('}') {
            return Err(format!(
                "{full:?} is not a branch name under the namespace {:?}",
                self.namespace
            ));
        }
        Ok(format!("refs/heads/{full}"))
    }

    /// Checks the settings at `field` (`push.<repo>`): a namespace and a template that stay
    /// a branch under it for every job id, and an absolute credential path.
    pub fn check(&self, field: &str) -> Result<(), FieldError> {
        let ns_ok = is_ref_name(&self.namespace)
            && self
                .namespace
                .split('/')
                .all(|p| !p.is_empty() && !p.starts_with('.'));
        if !ns_ok {
            return Err(FieldError::new(
                &format!("{field}.namespace"),
                format!(
                    "{:?} is not a branch namespace (letters, digits, / . _ - +)",
                    self.namespace
                ),
            ));
        }
        if !self.branch.contains(JOB_PLACEHOLDER) {
            return Err(FieldError::new(
                &format!("{field}.branch"),
                format!(
                    "{:?} does not name the job ({JOB_PLACEHOLDER})",
                    self.branch
                ),
            ));
        }
        // A job id is letters, digits and `. _ -` (crate::job::check_id): the longest, and
        // those ending in what the template may complete into `.lock`, stand for all.
        for sample in ["j", "a-b_c.d", "j.l", "j.lo", "j.loc", &"x".repeat(64)] {
            self.branch_ref(sample)
                .map_err(|m| FieldError::new(&format!("{field}.branch"), m))?;
        }
        if let Some(file) = &self.credential_file {
            if !file.is_absolute() {
                return Err(FieldError::new(
                    &format!("{field}.credential_file"),
                    format!("{} is not an absolute path", file.display()),
                ));
            }
        }
        if let Some(user) = &self.username {
            if user.is_empty() || user.chars().any(|c| c.is_control() || c == '\n') {
                return Err(FieldError::new(
                    &format!("{field}.username"),
                    "must be a non-empty line",
                ));
            }
        }
        Ok(())
    }
}

/// Every repository's settings, checked.
pub fn check_all(push: &BTreeMap<String, PushConfig>) -> Result<(), FieldError> {
    for (repo, config) in push {
        config.check(&format!("push.{repo}"))?;
    }
    Ok(())
}

/// The settings for a job's `repo`: those under its exact URL (or path) as the job names it.
/// Never by a looser match such as the repository's name: whoever submits a job chooses its
/// URL, and a job of `https://elsewhere/app.git` must not be pushed with `app`'s credential
/// (which would go to `elsewhere` when the remote is the job's origin).
pub fn for_repo<'a>(push: &'a BTreeMap<String, PushConfig>, repo: &str) -> Option<&'a PushConfig> {
    push.get(repo)
}

#[cfg(test)]
#[path = "push_tests.rs"]
mod tests;
