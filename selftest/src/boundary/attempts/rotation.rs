//! The rotation attempt: secrets read again after the host replaced them mid-job.

use super::{ran, shell, Attempt, Detect, Rule};
use crate::boundary::fixture::Fixture;
use crate::model_server::Step;

/// Reads the account's secret and the config file, has the host replace both as an operator
/// would while the job runs — a new key renamed over the account file, a new generation of the
/// config with its directory's link switched to it — and reads them again. A sandbox that hid
/// them by name (a mount over each file) shows the new ones. The marker comes back only if the
/// rotation happened while the command waited.
pub(super) fn rotate_secrets(fixture: &Fixture) -> Attempt {
    use crate::boundary::fixture::{ROTATE_DONE, ROTATE_REQUEST};
    let (key, config) = (
        fixture.account_file.display(),
        fixture.config_file.display(),
    );
    let command = format!(
        "rm -f {ROTATE_DONE}; echo \"before: $(cat {key} {config} 2>&1)\"; touch {ROTATE_REQUEST}; \
         i=0; while [ ! -e {ROTATE_DONE} ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; \
         echo \"after: $(cat {key} {config} 2>&1)\""
    );
    let mut attempt = shell(
        "rotate-secrets",
        "read the account's key and the config after the host replaces them (a key renamed over \
         the file; a config generation switched by its directory's link) while the job runs"
            .into(),
        Rule::DenyRead,
        command.clone(),
        Detect::Any(vec![
            Detect::OutputHas(fixture.secrets.rotated_account.clone()),
            Detect::OutputHas(fixture.secrets.rotated_config.clone()),
        ]),
    );
    let marker = ran(attempt.id);
    let full = format!(
        "{{ {command} ; }} 2>&1; [ -e {ROTATE_DONE} ] && echo {marker}; rm -f {ROTATE_REQUEST} {ROTATE_DONE}"
    );
    attempt.steps = vec![Step::bash(full.clone())];
    attempt.control = Some(full);
    attempt
}
