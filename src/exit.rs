//! The exit codes of the `quest-runner` command, named once.
//!
//! Scripts and service managers branch on these numbers, so they never change meaning; the
//! exit-code list of docs/jobs.md names the same ones.
//!
//! | code | variant                 | meaning                                                      |
//! |------|-------------------------|--------------------------------------------------------------|
//! | 0    | [`Exit::Success`]       | the command (or the job) succeeded                           |
//! | 1    | [`Exit::Failed`]        | the job failed, or the runner hit an error doing the work    |
//! | 2    | [`Exit::BadInput`]      | a job, config file or argument is invalid, empty or missing  |
//! | 3    | [`Exit::HostNotReady`]  | the host lacks something: a binary, the state dir, a check   |
//! | 4    | [`Exit::Refused`]       | the runner refused the job (untrusted revision, account)     |
//! | 5    | [`Exit::TimedOut`]      | the job ran out of time                                      |
//! | 130  | [`Exit::Interrupted`]   | cancelled by SIGINT (128 + 2, as shells report it)           |
//! | 143  | [`Exit::Terminated`]    | cancelled by SIGTERM (128 + 15)                              |

/// An exit code of `quest-runner` (see the module's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Success,
    Failed,
    BadInput,
    HostNotReady,
    Refused,
    TimedOut,
    Interrupted,
    Terminated,
}

impl Exit {
    /// The number the process exits with.
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Failed => 1,
            Exit::BadInput => 2,
            Exit::HostNotReady => 3,
            Exit::Refused => 4,
            Exit::TimedOut => 5,
            Exit::Interrupted => 130,
            Exit::Terminated => 143,
        }
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(exit: Exit) -> std::process::ExitCode {
        std::process::ExitCode::from(exit.code())
    }
}

#[cfg(test)]
mod tests {
    use super::Exit;
    use crate::run::{Cancel, Outcome};

    /// The numbers are an interface: scripts branch on them.
    #[test]
    fn codes_are_the_documented_ones() {
        let codes: Vec<u8> = [
            Exit::Success,
            Exit::Failed,
            Exit::BadInput,
            Exit::HostNotReady,
            Exit::Refused,
            Exit::TimedOut,
            Exit::Interrupted,
            Exit::Terminated,
        ]
        .map(Exit::code)
        .to_vec();
        assert_eq!(codes, [0, 1, 2, 3, 4, 5, 130, 143]);
    }

    /// Which signal cancelled a job decides the exit code, while `result.json` keeps the one
    /// name `cancelled` it always had.
    #[test]
    fn a_cancelled_job_exits_with_its_signal_and_saves_one_name() {
        let int = Outcome::Cancelled(Cancel::Interrupt);
        let term = Outcome::Cancelled(Cancel::Terminate);
        assert_eq!((int.exit().code(), term.exit().code()), (130, 143));
        for outcome in [int, term] {
            assert_eq!(serde_json::to_value(outcome).unwrap(), "cancelled");
        }
        assert_eq!(
            serde_json::to_value(Outcome::TimedOut).unwrap(),
            "timed_out"
        );
    }
}
