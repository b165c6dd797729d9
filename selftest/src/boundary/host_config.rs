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

/// The files to plant, and where their overlays' upper layers go.
pub struct Planted {
    pub files: Vec<(PathBuf, String)>,
    /// An empty directory the caller owns: a tmpfs holding the upper layers is mounted on it
    /// in each namespace planted, and only there.
    staging: PathBuf,
}

impl Planted {
    pub fn new(files: Vec<(PathBuf, String)>, staging: &Path) -> Planted {
        Planted {
            files,
            staging: staging.to_path_buf(),
        }
    }

    /// What plants the files in the job's namespace as the runner makes it (the seam
    /// `RunHooks::agent_mounts`): the agent and everything it starts see them there, and
    /// nothing else does.
    pub fn hook(&self) -> quest_runner::workspace::namespace::PlantHook {
        let (files, staging) = (self.files.clone(), self.staging.clone());
        std::sync::Arc::new(move || plant_here(&files, &staging))
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

/// In this thread's (private) mount namespace: each directory that holds a file overlaid by
/// a tmpfs layer holding it.
fn plant_here(files: &[(PathBuf, String)], staging: &Path) -> io::Result<()> {
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
    Ok(())
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
        let token = crate::boundary::fixture::token();
        let file = PathBuf::from(format!("/etc/qr-planted-{token}/npmrc"));
        let planted = Planted::new(vec![(file.clone(), format!("planted {token}\n"))], &staging);
        let ns = quest_runner::workspace::namespace::JobNamespace::new(None, Some(planted.hook()))
            .expect("the namespace is made");
        let mut cmd = std::process::Command::new("cat");
        cmd.arg(&file).current_dir(dir.path());
        ns.enter(&mut cmd);
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
        ns.enter(&mut pwd);
        let out = pwd.output().expect("pwd runs");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            std::fs::canonicalize(dir.path()).unwrap().to_string_lossy()
        );
    }
}
