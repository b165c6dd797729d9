//! Leaf helpers shared across the pipeline. Nothing here imports anything else of the crate,
//! so every stage may use them without an import pointing back up (see ARCHITECTURE.md).

pub mod elf;
pub mod fd;
pub mod fs;
pub mod git_names;
pub mod hex;
pub mod http1;
pub mod io;
pub mod json_path;
pub mod mount_ns;
pub mod on_demand;
pub mod rlimit;
pub mod shell;
pub mod text;
pub mod tls;
pub mod units;
