//! The host's package-manager configuration as a company machine has it — a global `npmrc` with
//! `cafile` (the system's roots only), `strict-ssl` and a company proxy, a `pip.conf` with
//! `cert` and `proxy`, a `uv.toml` without native TLS — planted where only the suite's agent
//! and its commands see it: a mount namespace of the suite's own, in which the directories that
//! hold those files are overlaid (a tmpfs upper layer over the host's directory). The host's
//! files, and every other process's view of them, are never touched.
//!
//! The namespace is made once, on a thread of its own (unshare, slave propagation, the
//! overlays), and kept as a descriptor; the agent enters it between fork and exec, after its
//! network namespace, and so does everything it starts, its sandbox included (bubblewrap binds
//! `/` recursively, overlays and all).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A company proxy's name: nothing answers there, and no command may depend on it.
pub const COMPANY_PROXY: &str = "http://proxy.quest-runner.invalid:3128/";
/// Where the planted configurations point for trust: the system's roots, without the job's CA.
pub const SYSTEM_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The files planted, with their contents; `token` marks them, so a command can show it reads
/// the planted file and not one the host happens to have.
pub fn files(npm_globalconfig: &Path, token: &str) -> Vec<(PathBuf, String)> {
    let mark = format!("# quest-runner boundary suite {token}: as a company machine has it");
    vec![
        (
            npm_globalconfig.to_path_buf(),
            format!(
                "{mark}\ncafile={SYSTEM_ROOTS}\nstrict-ssl=true\nproxy={COMPANY_PROXY}\nhttps-proxy={COMPANY_PROXY}\n"
            ),
        ),
        (
            PathBuf::from("/etc/pip.conf"),
            format!("{mark}\n[global]\ncert = {SYSTEM_ROOTS}\nproxy = {COMPANY_PROXY}\n"),
        ),
        (
            PathBuf::from("/etc/uv/uv.toml"),
            format!("{mark}\nnative-tls = false\n"),
        ),
    ]
}

/// npm's global config file on this host (`$PREFIX/etc/npmrc`), as npm itself reports it.
pub fn npm_globalconfig() -> Option<PathBuf> {
    let out = std::process::Command::new("npm")
        .args(["config", "get", "globalconfig"])
        .env("npm_config_update_notifier", "false")
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && path.starts_with('/')).then(|| PathBuf::from(path))
}

/// A mount namespace with the files planted.
pub struct Planted {
    mntns: OwnedFd,
    pub files: Vec<(PathBuf, String)>,
    /// The directory bound onto itself as a shared mount (see [`Planted::new`]).
    follows: PathBuf,
}

impl Planted {
    /// Plants `files` in a new mount namespace; `staging` (an empty directory the caller owns)
    /// holds the overlays' upper layers, on a tmpfs that exists only in that namespace.
    /// What the runner mounts under `follows` later (a root runner's checkouts are overlays,
    /// mounted in the host's namespace as each job starts) shows in the namespace too: bound
    /// onto itself and shared here, it is a slave of that mount there.
    pub fn new(
        files: Vec<(PathBuf, String)>,
        staging: &Path,
        follows: &Path,
    ) -> io::Result<Planted> {
        use rustix::mount::{mount_bind, mount_change, MountPropagationFlags};
        mount_bind(follows, follows).map_err(|e| mount_error("(bind)", follows, e))?;
        mount_change(follows, MountPropagationFlags::SHARED)
            .map_err(|e| mount_error("(shared)", follows, e))?;
        let staging = staging.to_path_buf();
        let planted = files.clone();
        let mntns = std::thread::spawn(move || plant_in_new_namespace(&planted, &staging))
            .join()
            .map_err(|_| io::Error::other("the mount namespace thread panicked"))??;
        Ok(Planted {
            mntns,
            files,
            follows: follows.to_path_buf(),
        })
    }

    /// Makes a command enter the namespace between fork and exec (and go back to its working
    /// directory, which entering a mount namespace resets). Use only while `self` lives.
    pub fn enterer(&self) -> impl Fn(&mut std::process::Command) + Send + Sync + 'static {
        let fd = self.mntns.as_raw_fd();
        move |cmd: &mut std::process::Command| {
            use std::os::unix::process::CommandExt;
            let cwd = cmd
                .get_current_dir()
                .and_then(|d| CString::new(d.as_os_str().as_bytes()).ok());
            // SAFETY: setns and chdir are async-signal-safe; the closure touches only a
            // descriptor number (open while `self` lives) and a string made before the fork.
            unsafe {
                cmd.pre_exec(move || {
                    use rustix::thread::{move_into_link_name_space, LinkNameSpaceType};
                    let ns = std::os::fd::BorrowedFd::borrow_raw(fd);
                    move_into_link_name_space(ns, Some(LinkNameSpaceType::Mount))?;
                    if let Some(cwd) = &cwd {
                        rustix::process::chdir(cwd.as_c_str())?;
                    }
                    Ok(())
                });
            }
        }
    }
}

impl Drop for Planted {
    fn drop(&mut self) {
        use rustix::mount::{unmount, UnmountFlags};
        let _ = unmount(&self.follows, UnmountFlags::DETACH);
    }
}

fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(io::Error::other)
}

/// Mounts a `fstype` file system from `source` on `target`, with `data` as its options.
fn mount(source: &str, target: &Path, fstype: &str, data: &str) -> io::Result<()> {
    let c_source = CString::new(source).map_err(io::Error::other)?;
    let c_target = cstr(target)?;
    let fstype = CString::new(fstype).map_err(io::Error::other)?;
    let data = CString::new(data).map_err(io::Error::other)?;
    rustix::mount::mount(
        c_source.as_c_str(),
        c_target.as_c_str(),
        fstype.as_c_str(),
        rustix::mount::MountFlags::empty(),
        data.as_c_str(),
    )
    .map_err(|e| mount_error(source, target, e))
}

/// Makes every mount of this namespace a slave (`mount --make-rslave /`), so what is mounted
/// next stays in it, and what the host mounts under a shared mount still shows here.
/// (`mount("none", "/", NULL, MS_REC | MS_SLAVE, NULL)`: the kernel ignores the source of a
/// propagation change, and rustix passes none.)
fn make_private() -> io::Result<()> {
    use rustix::mount::MountPropagationFlags;
    rustix::mount::mount_change(
        c"/",
        MountPropagationFlags::REC | MountPropagationFlags::DOWNSTREAM,
    )
    .map_err(|e| mount_error("none", Path::new("/"), e))
}

fn mount_error(source: &str, target: &Path, e: rustix::io::Errno) -> io::Error {
    let e = io::Error::from(e);
    io::Error::new(
        e.kind(),
        format!(
            "mounting {source} on {}: {e}",
            target.as_os_str().to_string_lossy()
        ),
    )
}

/// The deepest existing directory above `file`: the one to overlay (the file's own directory
/// may not exist on this host, as `/usr/etc` or `/etc/uv` often do not).
fn overlay_root(file: &Path) -> PathBuf {
    file.ancestors()
        .skip(1)
        .find(|d| d.is_dir())
        .unwrap_or(Path::new("/"))
        .to_path_buf()
}

/// On this (fresh) thread: a new mount namespace, private, with each directory that holds a
/// file overlaid by a tmpfs layer holding it. Returns the namespace's descriptor.
fn plant_in_new_namespace(files: &[(PathBuf, String)], staging: &Path) -> io::Result<OwnedFd> {
    // SAFETY: affects this thread only (a new mount namespace implies its own fs struct); no
    // descriptor table is unshared.
    unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNS) }?;
    make_private()?;
    mount("qr-planted", staging, "tmpfs", "mode=0755")?;
    let mut roots: Vec<PathBuf> = Vec::new();
    for (file, _) in files {
        let root = overlay_root(file);
        if !roots.contains(&root) {
            roots.push(root);
        }
    }
    for (i, root) in roots.iter().enumerate() {
        let upper = staging.join(format!("{i}/upper"));
        let work = staging.join(format!("{i}/work"));
        std::fs::create_dir_all(&upper)?;
        std::fs::create_dir_all(&work)?;
        for (file, text) in files.iter().filter(|(f, _)| overlay_root(f) == *root) {
            let rel = file.strip_prefix(root).map_err(io::Error::other)?;
            let path = upper.join(rel);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&path, text)?;
        }
        let options = format!(
            "lowerdir={},upperdir={},workdir={}",
            root.display(),
            upper.display(),
            work.display()
        );
        mount("overlay", root, "overlay", &options)?;
    }
    let ns = std::fs::File::open("/proc/thread-self/ns/mnt")?;
    // SAFETY: a descriptor just opened, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(std::os::fd::IntoRawFd::into_raw_fd(ns)) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_overlay_root_is_the_deepest_existing_directory() {
        assert_eq!(overlay_root(Path::new("/etc/pip.conf")), Path::new("/etc"));
        assert_eq!(
            overlay_root(Path::new("/etc/qr-no-such-dir/x/uv.toml")),
            Path::new("/etc")
        );
    }

    /// Planted files are seen by a command that enters the namespace, and only by it.
    #[test]
    fn planted_files_are_seen_only_inside() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("needs root (mount namespaces)");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let staging = dir.path().join("staging");
        std::fs::create_dir(&staging).unwrap();
        let token = crate::selftest::boundary::world::token();
        let file = PathBuf::from(format!("/etc/qr-planted-{token}/npmrc"));
        let planted = Planted::new(
            vec![(file.clone(), format!("planted {token}\n"))],
            &staging,
            dir.path(),
        )
        .expect("planted");
        let mut cmd = std::process::Command::new("cat");
        cmd.arg(&file).current_dir(dir.path());
        planted.enterer()(&mut cmd);
        let out = cmd.output().expect("cat runs");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("planted {token}\n")
        );
        assert!(
            !file.exists() && !file.parent().unwrap().exists(),
            "not on the host"
        );
        let mut pwd = std::process::Command::new("pwd");
        pwd.current_dir(dir.path());
        planted.enterer()(&mut pwd);
        let out = pwd.output().expect("pwd runs");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            std::fs::canonicalize(dir.path()).unwrap().to_string_lossy()
        );
        // A mount the host makes under the followed directory afterwards (a job's checkout)
        // shows inside.
        let later = dir.path().join("later");
        std::fs::create_dir(&later).unwrap();
        mount("qr-later", &later, "tmpfs", "mode=0755").unwrap();
        std::fs::write(later.join("seen"), "mounted later\n").unwrap();
        let mut cat = std::process::Command::new("cat");
        cat.arg(later.join("seen")).current_dir(dir.path());
        planted.enterer()(&mut cat);
        let out = cat.output().expect("cat runs");
        let _ = rustix::mount::unmount(&later, rustix::mount::UnmountFlags::DETACH);
        assert_eq!(String::from_utf8_lossy(&out.stdout), "mounted later\n");
    }
}
