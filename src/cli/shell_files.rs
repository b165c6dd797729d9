//! `completions <shell>` and `man`: the files a package installs beside the binary, made from
//! the same command definition, so they never drift from the options the binary takes.

use clap::CommandFactory;

use super::{Cli, Failure};
use crate::exit::Exit;

pub fn completions(shell: clap_complete::Shell) -> Result<(), Failure> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "quest-runner", &mut script);
    super::out_raw(String::from_utf8_lossy(&script))
}

pub fn man() -> Result<(), Failure> {
    let mut page = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut page)
        .map_err(|e| Failure::new(Exit::Failed, format!("rendering the man page: {e}")))?;
    super::out_raw(String::from_utf8_lossy(&page))
}
