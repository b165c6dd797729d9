//! What only another kernel holds (`gvisor` isolation): each attempt reaches for a part of
//! the kernel's surface a command should never get from the host's kernel, and prints
//! `HOST-KERNEL` when the answer is not gVisor's. Its control runs it on the host, where the
//! host's kernel answers (so the marker shows: the attempt cannot pass vacuously); in the job,
//! gVisor's Sentry must be the one answering. Made only when the suite's isolation is
//! `gvisor`: under `namespace` the host's kernel answering is the design.

use super::{shell, Attempt, Detect, Rule, Targets};
use quest_runner::sandbox::gvisor::Isolation;

/// The marker an answer of the host's kernel prints.
const HOST: &str = "HOST-KERNEL";

/// A raw system call by number from Python's ctypes (whatever libc wraps), and the errno
/// gVisor answers it with: any other answer is the host's.
fn syscall(id: &'static str, what: &str, call: &str, gvisors: &str) -> Attempt {
    let command = format!(
        "python3 -c 'import ctypes, errno\nlibc = ctypes.CDLL(None, use_errno=True)\nbuf = ctypes.create_string_buffer(256)\nr = libc.syscall({call})\ne = \"ok\" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), \"?\")\nprint(\"answer=\" + e)\nif e != \"{gvisors}\": print(\"{HOST}\")'"
    );
    shell(
        id,
        format!("{what}, answered by the host's kernel"),
        Rule::Kernel,
        command,
        Detect::OutputHas(HOST.into()),
    )
}

pub fn kernel_attempts(t: &Targets) -> Vec<Attempt> {
    if t.isolation != Isolation::Gvisor {
        return Vec::new();
    }
    let host = std::fs::read_to_string("/proc/version").unwrap_or_default();
    let host = host
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    vec![
        shell(
            "kernel-version",
            "see the host's kernel (/proc/version)".into(),
            Rule::Kernel,
            "cat /proc/version".into(),
            Detect::OutputHas(host),
        ),
        syscall(
            "kernel-io-uring",
            "set up an io_uring",
            "425, 8, buf",
            "ENOSYS",
        ),
        syscall(
            "kernel-userfaultfd",
            "open a userfaultfd",
            "323, 0",
            "ENOSYS",
        ),
        syscall(
            "kernel-perf-event",
            "open a perf event",
            "298, buf, 0, -1, -1, 0",
            "ENODEV",
        ),
    ]
}
