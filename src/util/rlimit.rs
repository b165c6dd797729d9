//! Resource limits set on a command between fork and exec (RLIMIT_*), shared by the agent
//! hook (`serve::limits`) and the file-size limit (`disk`).

pub use rustix::process::Resource;
use rustix::process::Rlimit;

/// Sets `resource` to `soft` with `hard` as its hard limit, both kept at or under the calling
/// process's own hard limit: raising that needs CAP_SYS_RESOURCE, and the command would not
/// start. Two system calls and no allocation, so it may run in a `pre_exec` hook.
pub fn set_capped(resource: Resource, soft: u64, hard: u64) -> std::io::Result<()> {
    // `None` is RLIM_INFINITY, the largest value.
    let own = rustix::process::getrlimit(resource)
        .maximum
        .unwrap_or(u64::MAX);
    let hard = hard.min(own);
    let new = Rlimit {
        current: Some(soft.min(hard)),
        maximum: Some(hard),
    };
    Ok(rustix::process::setrlimit(resource, new)?)
}
