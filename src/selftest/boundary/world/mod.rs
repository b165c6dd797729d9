//! The world a boundary run attacks: secrets planted where a job must not reach them, a
//! runner state directory and operator home of its own, a decoy host process with a secret in
//! its environment, and the hostile repository.
//!
//! Several runs may share a machine (a `selftest` beside `cargo test`, two test processes):
//! every path a world plants outside its own temp dir carries its token and is created new,
//! and on drop a world removes only what it created — a parent directory (`/run/secrets` on a
//! host without one) only if it made it and nothing else is in it by then.

mod hostile;
mod victims;
pub use hostile::LINK_OUT;
pub(crate) use victims::write_scripted_account;
pub use victims::{victim_text, LOOSE_VICTIM, REPLACE_VICTIM};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::job::AgentKind;

/// Secrets, each a distinct string, so a leak names its source.
#[derive(Debug, Clone)]
pub struct Secrets {
    /// The account's credential (Claude Code API key file, opencode auth.json).
    pub account: String,
    /// What a rotation of the account's credential writes (a new key renamed over the file).
    pub rotated_account: String,
    /// What a rotation of the config file writes (a new generation, the link switched to it).
    pub rotated_config: String,
    pub ssh: String,
    pub root: String,
    pub home: String,
    pub run_user: String,
    pub other_job: String,
    pub proc_env: String,
    /// Planted in the runner's environment under names that must never reach a command.
    pub env: String,
    /// The push credential (an HTTPS token), read by the runner's push alone.
    pub push: String,
}

impl Secrets {
    /// Every secret a job must never read.
    pub fn all(&self) -> [&String; 11] {
        [
            &self.account,
            &self.rotated_account,
            &self.rotated_config,
            &self.ssh,
            &self.root,
            &self.home,
            &self.run_user,
            &self.other_job,
            &self.proc_env,
            &self.env,
            &self.push,
        ]
    }
}

pub struct World {
    pub token: String,
    pub root: tempfile::TempDir,
    pub secrets: Secrets,
    pub state: PathBuf,
    pub operator_home: PathBuf,
    /// The account's credential file, outside every directory the sandbox hides wholesale.
    pub account_file: PathBuf,
    /// The push credential's file, beside the account's: a private file of the push config.
    pub push_credential: PathBuf,
    /// The runner's config file as the runner is told it, outside the state directory, in a
    /// directory that is a link to its current generation (as sops-nix and agenix keep
    /// secrets): `<dir>-config/config.json`, `<dir>-config` → `<dir>-configs/<n>`.
    pub config_file: PathBuf,
    /// Planted paths by name (`root`, `home`, `run_user`, `other_job`); absent when the
    /// process may not create them (not root).
    pub root_secret: Option<PathBuf>,
    pub home_secret: Option<PathBuf>,
    pub run_user_secret: Option<PathBuf>,
    pub other_job_dir: Option<PathBuf>,
    /// Secrets in system places the policy denies wholesale (`/var/lib`, `/run/secrets`).
    pub system_secrets: Vec<(&'static str, PathBuf)>,
    rotation: Rotation,
    planted: Planted,
    decoy: Option<Child>,
    pub repo: PathBuf,
    pub rev: String,
}

impl Drop for World {
    fn drop(&mut self) {
        if let Some(mut decoy) = self.decoy.take() {
            let _ = decoy.kill();
            let _ = decoy.wait();
        }
        self.planted.remove();
    }
}

/// A token no other world on this machine has: this process's id, a count of this process's
/// worlds, and the clock.
pub fn token() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    static WORLDS: AtomicUsize = AtomicUsize::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    format!(
        "{:x}{:x}{:06x}",
        std::process::id(),
        WORLDS.fetch_add(1, Ordering::Relaxed),
        nanos & 0xff_ffff
    )
}

/// What a world created outside its own temp dir.
#[derive(Default)]
struct Planted {
    /// Paths named with the world's token, created new: removed whole.
    own: Vec<PathBuf>,
    /// Directories above them that did not exist (`/run/secrets`): removed only if empty.
    parents: Vec<PathBuf>,
}

/// A plant the process may not make (not root) is skipped; any other failure (a name that
/// already exists: another world's) fails the run.
fn permitted(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
    )
}

impl Planted {
    /// Creates `own` (a directory when `text` is `None`, else a file holding it), new, after
    /// the missing directories above it. Another world may remove a parent it made between
    /// the two steps: then both are tried again.
    fn create(&mut self, own: &Path, text: Option<&str>) -> std::io::Result<()> {
        let mut tries = 0;
        loop {
            tries += 1;
            let made = self.make_parents(own).and_then(|()| match text {
                None => std::fs::create_dir(own),
                Some(text) => {
                    use std::io::Write;
                    let mut f = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(own)?;
                    f.write_all(text.as_bytes())
                }
            });
            match made {
                Ok(()) => {
                    self.own.push(own.to_path_buf());
                    return Ok(());
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && tries < 5 => continue,
                Err(e) => return Err(e),
            }
        }
    }

    fn make_parents(&mut self, path: &Path) -> std::io::Result<()> {
        let missing: Vec<PathBuf> = path
            .ancestors()
            .skip(1)
            .take_while(|a| a.symlink_metadata().is_err())
            .map(Path::to_path_buf)
            .collect();
        for dir in missing.into_iter().rev() {
            match std::fs::create_dir(&dir) {
                Ok(()) => self.parents.push(dir),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// `create`, for a plant the process may be refused.
    fn plant(&mut self, own: &Path, text: Option<&str>) -> Result<bool, String> {
        match self.create(own, text) {
            Ok(()) => Ok(true),
            Err(e) if permitted(&e) => {
                tracing::info!(path = %own.display(), "not planted: {e}");
                Ok(false)
            }
            Err(e) => Err(format!("planting {}: {e}", own.display())),
        }
    }

    fn remove(&mut self) {
        for p in self.own.drain(..).rev() {
            let is_dir = p.symlink_metadata().is_ok_and(|m| m.is_dir());
            let _ = if is_dir {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
        }
        for dir in self.parents.drain(..).rev() {
            // Fails while another world's plant is in it: then that world's run still needs it.
            let _ = std::fs::remove_dir(&dir);
        }
    }
}

/// How the world's private files are replaced while a job runs, as an operator's key rotation
/// and a secret manager's generation switch do.
#[derive(Clone)]
struct Rotation {
    agent: AgentKind,
    account_file: PathBuf,
    /// The link naming the config's current generation, and the generations' directory.
    config_link: PathBuf,
    config_generations: PathBuf,
    rotated_account: String,
    rotated_config: String,
}

impl Rotation {
    /// Writes a new account file beside the old one and renames it over; writes the config's
    /// next generation (the current one with an account named after the rotated secret) and
    /// renames a new link over the current one.
    fn rotate(&self, n: usize) -> std::io::Result<()> {
        let dir = self.account_file.parent().unwrap_or(Path::new("/"));
        let fresh = dir.join(format!(".rotating-{n}"));
        write_scripted_account(self.agent, &fresh, &format!("{}-{n}", self.rotated_account))?;
        std::fs::rename(&fresh, &self.account_file)?;

        let current: serde_json::Value =
            serde_json::from_slice(&std::fs::read(self.config_link.join("config.json"))?)
                .map_err(std::io::Error::other)?;
        let mut next = current.clone();
        let main = current["accounts"]["main"].clone();
        next["accounts"][format!("{}-{n}", self.rotated_config)] = main;
        let generation = format!("r{n}");
        let gen_dir = self.config_generations.join(&generation);
        std::fs::create_dir(&gen_dir)?;
        std::fs::write(gen_dir.join("config.json"), next.to_string())?;
        let name = self
            .config_generations
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let link = self.config_link.with_extension(format!("next-{n}"));
        std::os::unix::fs::symlink(format!("{name}/{generation}"), &link)?;
        std::fs::rename(&link, &self.config_link)
    }
}

/// The file a command creates in its working directory to ask for a rotation, and the one the
/// rotator answers with once it is done.
pub const ROTATE_REQUEST: &str = "qr-rotate-request";
pub const ROTATE_DONE: &str = "qr-rotate-done";

/// Where a rotation was asked for, and whether it worked.
pub type Rotated = (PathBuf, Result<(), String>);

/// Replaces the world's private files whenever a command asks (a [`ROTATE_REQUEST`] in one of
/// the watched directories), as an operator would while a job runs. Stopped on drop.
pub struct Rotator {
    stop: Arc<AtomicBool>,
    answered: Arc<Mutex<Vec<Rotated>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Rotator {
    pub fn start(world: &World, watch: Vec<PathBuf>) -> Rotator {
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(Mutex::new(Vec::new()));
        let rotation = world.rotation.clone();
        let thread = {
            let (stop, answered) = (stop.clone(), answered.clone());
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    for dir in &watch {
                        if std::fs::remove_file(dir.join(ROTATE_REQUEST)).is_ok() {
                            n += 1;
                            let done = rotation.rotate(n).map_err(|e| e.to_string());
                            if done.is_ok() {
                                let _ = std::fs::write(dir.join(ROTATE_DONE), "rotated\n");
                            }
                            answered
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .push((dir.clone(), done));
                        }
                    }
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
            })
        };
        Rotator {
            stop,
            answered,
            thread: Some(thread),
        }
    }

    /// The rotations done so far: where the request came from, and whether it worked.
    pub fn answered(&self) -> Vec<Rotated> {
        self.answered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for Rotator {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn write(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, text)
}

impl Secrets {
    /// Every secret of a world, each named by its source and carrying the world's token.
    fn new(token: &str) -> Secrets {
        let secret = |what: &str| format!("SECRET-{what}-{token}");
        Secrets {
            account: secret("ACCOUNT"),
            rotated_account: secret("ROTATED-ACCOUNT"),
            rotated_config: secret("ROTATED-CONFIG"),
            ssh: secret("SSH"),
            root: secret("ROOT"),
            home: secret("HOME"),
            run_user: secret("RUNUSER"),
            other_job: secret("OTHERJOB"),
            proc_env: secret("PROCENV"),
            env: secret("ENV"),
            push: secret("PUSH"),
        }
    }
}

/// The account's credential and the runner's config, planted where only the policy's rule for
/// private files protects them, and how the host replaces them mid-job.
struct PrivateFiles {
    account_file: PathBuf,
    push_credential: PathBuf,
    config_file: PathBuf,
    rotation: Rotation,
}

/// The secrets planted in host places a process may create only as root; `None` (or left
/// out) where it may not.
struct HostPlants {
    root_secret: Option<PathBuf>,
    home_secret: Option<PathBuf>,
    run_user_secret: Option<PathBuf>,
    other_job_dir: Option<PathBuf>,
    system_secrets: Vec<(&'static str, PathBuf)>,
}

impl World {
    /// Plants a world for `agent`: the runner's state and the operator's home in a temp dir,
    /// the private files, the host's secrets, a decoy process, then the hostile repository.
    pub fn new(agent: AgentKind) -> Result<World, String> {
        let token = token();
        let root = tempfile::Builder::new()
            .prefix("qr-boundary-")
            .tempdir()
            .map_err(|e| format!("creating the suite's directory: {e}"))?;
        let canonical = std::fs::canonicalize(root.path()).map_err(|e| e.to_string())?;
        let secrets = Secrets::new(&token);
        let state = canonical.join("state");
        let operator_home = canonical.join("operator-home");
        let io = |e: std::io::Error| e.to_string();
        std::fs::create_dir_all(&state).map_err(io)?;
        write(&operator_home.join(".ssh/id_ed25519"), &secrets.ssh).map_err(io)?;
        write(&operator_home.join(".bashrc"), "# operator's shell\n").map_err(io)?;

        let mut planted = Planted::default();
        let private = plant_private_files(agent, &token, &canonical, &secrets, &mut planted)?;
        let host = plant_host_secrets(&token, &secrets, &mut planted)?;
        let decoy = spawn_decoy(&secrets);

        let mut world = World {
            token,
            root,
            secrets,
            state,
            operator_home,
            account_file: private.account_file,
            push_credential: private.push_credential,
            config_file: private.config_file,
            root_secret: host.root_secret,
            home_secret: host.home_secret,
            run_user_secret: host.run_user_secret,
            other_job_dir: host.other_job_dir,
            system_secrets: host.system_secrets,
            rotation: private.rotation,
            planted,
            decoy,
            repo: canonical.join("repo"),
            rev: String::new(),
        };
        world.rev = hostile::make_repo(&world, &canonical)?;
        Ok(world)
    }

    /// Puts the account's original key back, renamed over whatever a rotation left.
    pub fn restore_account(&self) -> std::io::Result<()> {
        let r = &self.rotation;
        let dir = r.account_file.parent().unwrap_or(Path::new("/"));
        let fresh = dir.join(".restoring");
        write_scripted_account(r.agent, &fresh, &self.secrets.account)?;
        std::fs::rename(&fresh, &r.account_file)
    }

    pub fn path(&self) -> PathBuf {
        std::fs::canonicalize(self.root.path()).unwrap_or_else(|_| self.root.path().to_path_buf())
    }

    /// Markers that must never appear on the host: hooks and plugins of the checkout that
    /// would run outside the sandbox.
    pub fn marker(&self, name: &str) -> PathBuf {
        self.path().join("escapes").join(name)
    }

    /// The environment variables planted in the runner's environment.
    pub fn planted_env(&self) -> Vec<(String, String)> {
        let s = &self.secrets.env;
        [
            ("ANTHROPIC_API_KEY", format!("{s}-anthropic")),
            ("OPENAI_API_KEY", format!("{s}-openai")),
            ("AWS_SECRET_ACCESS_KEY", format!("{s}-aws")),
            ("GH_TOKEN", format!("{s}-gh")),
            ("GITHUB_TOKEN", format!("{s}-github")),
            ("SSH_AUTH_SOCK", format!("/run/user/0/{s}-ssh-agent")),
            ("OPENCODE_API_KEY", format!("{s}-opencode")),
            ("XDG_DATA_HOME", format!("/{s}-xdg-data")),
            ("KIX_TOKEN", format!("{s}-kix")),
        ]
        .map(|(k, v)| (k.to_string(), v))
        .to_vec()
    }
}

/// The account's secret and the config outside every directory the sandbox hides wholesale,
/// where only the policy's rule for private files protects them (as in /opt or
/// /etc/quest-runner). Without the rights to create them there, inside the suite's own
/// directory (`canonical`).
fn plant_private_files(
    agent: AgentKind,
    token: &str,
    canonical: &Path,
    secrets: &Secrets,
    planted: &mut Planted,
) -> Result<PrivateFiles, String> {
    let io = |e: std::io::Error| e.to_string();
    let opt = PathBuf::from(format!("/opt/qr-boundary-{token}"));
    let secrets_dir = if planted.plant(&opt, None)? {
        opt
    } else {
        let dir = canonical.join("secrets");
        std::fs::create_dir(&dir).map_err(io)?;
        dir
    };
    // Beside it: the generations, and the link to the current one (whose directory, /opt,
    // no job is denied), as sops-nix keeps /run/secrets -> /run/secrets.d/<n>.
    let outside = secrets_dir.parent().unwrap_or(canonical).to_path_buf();
    let config_generations = outside.join(format!("qr-boundary-{token}-configs"));
    let config_link = outside.join(format!("qr-boundary-{token}-config"));
    planted.create(&config_generations, None).map_err(io)?;
    std::fs::create_dir(config_generations.join("r0")).map_err(io)?;
    std::os::unix::fs::symlink(format!("qr-boundary-{token}-configs/r0"), &config_link)
        .map_err(io)?;
    planted.own.push(config_link.clone());
    let config_file = config_link.join("config.json");

    let account_file = match agent {
        AgentKind::Claude => secrets_dir.join("anthropic-key"),
        AgentKind::Opencode => secrets_dir.join("auth.json"),
    };
    write_scripted_account(agent, &account_file, &secrets.account).map_err(io)?;
    let push_credential = secrets_dir.join("push-token");
    std::fs::write(&push_credential, format!("{}\n", secrets.push)).map_err(io)?;
    let rotation = Rotation {
        agent,
        account_file: account_file.clone(),
        config_link,
        config_generations,
        rotated_account: secrets.rotated_account.clone(),
        rotated_config: secrets.rotated_config.clone(),
    };
    Ok(PrivateFiles {
        account_file,
        push_credential,
        config_file,
        rotation,
    })
}

/// Secrets in `/root`, `/home`, `/run/user`, another job's temp dir, `/var/lib` and
/// `/run/secrets`, each where the process may create it.
fn plant_host_secrets(
    token: &str,
    secrets: &Secrets,
    planted: &mut Planted,
) -> Result<HostPlants, String> {
    let root_path = PathBuf::from(format!("/root/.qr-boundary-{token}"));
    let root_secret = planted
        .plant(&root_path, Some(&secrets.root))?
        .then(|| root_path.clone());
    let home_dir = PathBuf::from(format!("/home/qr-boundary-{token}"));
    // Beside the secret, what the file-tool attempts through `<link>/..` aim at: a directory
    // the checkout links to, and a file for them to edit (see `link_escapes`).
    let home_secret = (planted.plant(&home_dir, None)?
        && planted.plant(&home_dir.join("secret"), Some(&secrets.home))?
        && planted.plant(&home_dir.join("sub"), None)?
        && planted.plant(&home_victim(&home_dir, token), Some(VICTIM_TEXT))?)
    .then(|| home_dir.join("secret"));
    let run_user = PathBuf::from(format!("/run/user/qr-boundary-{token}"));
    let run_user_secret = planted
        .plant(&run_user, Some(&secrets.run_user))?
        .then(|| run_user.clone());
    let other = PathBuf::from(format!("/tmp/quest-job-zz{token}"));
    let other_job_dir = (planted.plant(&other, None)?
        && planted.plant(&other.join("secret"), Some(&secrets.other_job))?)
    .then(|| other.clone());

    let mut system_secrets = Vec::new();
    for (id, dir) in [
        ("read-var-lib", format!("/var/lib/qr-boundary-{token}")),
        (
            "read-run-secrets",
            format!("/run/secrets/qr-boundary-{token}"),
        ),
    ] {
        let dir = PathBuf::from(dir);
        let file = dir.join("secret");
        if planted.plant(&dir, None)? && planted.plant(&file, Some(&secrets.root))? {
            system_secrets.push((id, file));
        }
    }
    Ok(HostPlants {
        root_secret,
        home_secret,
        run_user_secret,
        other_job_dir,
        system_secrets,
    })
}

/// What the host file the file-tool attempts edit through a link holds before them.
pub const VICTIM_TEXT: &str = "victim-original";

/// The host file beside the planted home secret that the file-tool attempts edit through a
/// committed link, and whose name a listing through it would show.
pub fn home_victim(home_dir: &Path, token: &str) -> PathBuf {
    home_dir.join(format!("victim-{token}"))
}

/// A host process whose environment holds a secret: /proc/<pid>/environ.
fn spawn_decoy(secrets: &Secrets) -> Option<Child> {
    Command::new("/bin/sh")
        .args(["-c", "exec sleep 600"])
        .env("QR_PROC_SECRET", &secrets.proc_env)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
}

#[cfg(test)]
#[path = "world_tests.rs"]
mod tests;
