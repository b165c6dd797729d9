//! A real PostgreSQL server for the tests and benchmarks of the PostgreSQL queue: `initdb` in
//! a temporary directory as an unprivileged user (PostgreSQL refuses to run as root; as
//! root the tests use the `postgres` account Debian's package makes, else `nobody`), the
//! server on a loopback port and a socket directory of its own, bounded in time, stopped and
//! its directories removed when dropped, on every path.
//!
//! The binaries: `QUEST_RUNNER_PG_BINDIR`, else the directory of `initdb` on `PATH`, else the
//! newest `/usr/lib/postgresql/<version>/bin` (where Debian's `postgresql` puts them, off
//! `PATH`). Installed by `scripts/setup`.
//!
//! Logins: the superuser `quest`; over the socket without a password (trust), over TCP with
//! the password in [`Postgres::password_file`] (SCRAM).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const PASSWORD: &str = "quest-test-password-7";

pub struct Postgres {
    /// Data directory, log and password file.
    dir: tempfile::TempDir,
    /// The socket directory: under /run when root (outside /tmp, which jobs' sandboxes hide
    /// anyway, so that a test of what a job can reach is not vacuous).
    socket_dir: tempfile::TempDir,
    pub port: u16,
    bin: PathBuf,
    owner: Option<(u32, u32)>,
    child: Option<Child>,
}

fn bindir() -> PathBuf {
    if let Some(dir) = std::env::var_os("QUEST_RUNNER_PG_BINDIR") {
        return PathBuf::from(dir);
    }
    if let Ok(initdb) = which::which("initdb") {
        let real = std::fs::canonicalize(&initdb).unwrap_or(initdb);
        return real.parent().unwrap().to_path_buf();
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    let v: u32 = e.file_name().to_str()?.parse().ok()?;
                    let bin = e.path().join("bin");
                    bin.join("initdb").exists().then_some((v, bin))
                })
                .collect()
        })
        .unwrap_or_default();
    versions.sort();
    versions.pop().map(|(_, b)| b).expect(
        "PostgreSQL's initdb: apt-get install postgresql (scripts/setup), or set QUEST_RUNNER_PG_BINDIR",
    )
}

/// The unprivileged account the server runs as when the tests run as root.
fn owner() -> Option<(u32, u32)> {
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    for name in ["postgres", "nobody"] {
        let cname = std::ffi::CString::new(name).unwrap();
        let pw = unsafe { libc::getpwnam(cname.as_ptr()) };
        if !pw.is_null() {
            return Some(unsafe { ((*pw).pw_uid, (*pw).pw_gid) });
        }
    }
    panic!("no unprivileged account (postgres, nobody) to run PostgreSQL as");
}

fn chown(path: &Path, owner: Option<(u32, u32)>) {
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Postgres {
    /// `initdb`, then the server. Panics (with the server's log) if it is not ready within
    /// 60 s.
    pub fn start() -> Postgres {
        let bin = bindir();
        let owner = owner();
        let dir = tempfile::Builder::new().prefix("qr-pg-").tempdir().unwrap();
        let socket_parent = if owner.is_some() {
            PathBuf::from("/run")
        } else {
            std::env::temp_dir()
        };
        let socket_dir = tempfile::Builder::new()
            .prefix("qr-pgsock-")
            .tempdir_in(socket_parent)
            .unwrap();
        chown(dir.path(), owner);
        chown(socket_dir.path(), owner);
        let pwfile = dir.path().join("pwfile");
        std::fs::write(&pwfile, format!("{PASSWORD}\n")).unwrap();
        chown(&pwfile, owner);
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(dir.path().join("data"))
            .args([
                "-U",
                "quest",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ])
            .arg(format!("--pwfile={}", pwfile.display()))
            .env("LC_ALL", "C")
            .current_dir(dir.path());
        if let Some((uid, gid)) = owner {
            // std drops root's supplementary groups with the uid.
            initdb.uid(uid).gid(gid);
        }
        let out = initdb.output().expect("initdb runs");
        assert!(
            out.status.success(),
            "initdb: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut pg = Postgres {
            dir,
            socket_dir,
            port: free_port(),
            bin,
            owner,
            child: None,
        };
        pg.start_again();
        pg.sql("CREATE DATABASE quest");
        pg
    }

    /// Starts the server on the existing data directory (after [`Self::stop`]).
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "already running");
        let log = self.dir.path().join("server.log");
        let before = std::fs::read_to_string(&log).map_or(0, |t| t.len());
        let logfile = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        chown(&log, self.owner);
        let mut cmd = Command::new(self.bin.join("postgres"));
        cmd.arg("-D")
            .arg(self.dir.path().join("data"))
            .arg("-k")
            .arg(self.socket_dir.path())
            .args(["-p", &self.port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off", "-c", "max_connections=100"])
            .args(["-c", "shared_buffers=16MB"])
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(logfile)
            .current_dir(self.dir.path())
            .process_group(0);
        if let Some((uid, gid)) = self.owner {
            cmd.uid(uid).gid(gid);
        }
        self.child = Some(cmd.spawn().expect("postgres starts"));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text[before.min(text.len())..].contains("ready to accept connections") {
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                self.child = None;
                panic!("postgres exited ({status}):\n{text}");
            }
            assert!(
                Instant::now() < deadline,
                "postgres not ready within 60 s:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the server (fast shutdown: connections are closed), waiting for it to exit.
    pub fn stop(&mut self) {
        self.signal_and_wait(libc::SIGINT, Duration::from_secs(30));
    }

    fn signal_and_wait(&mut self, sig: i32, within: Duration) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        unsafe { libc::kill(child.id() as i32, sig) };
        let deadline = Instant::now() + within;
        loop {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            if Instant::now() > deadline {
                // Its whole group: the postmaster's children too.
                unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The server's socket file.
    pub fn socket(&self) -> PathBuf {
        self.socket_dir
            .path()
            .join(format!(".s.PGSQL.{}", self.port))
    }

    /// A connection string over the socket (no password needed).
    pub fn conninfo(&self) -> String {
        format!(
            "host={} port={} user=quest dbname=quest",
            self.socket_dir.path().display(),
            self.port
        )
    }

    /// A connection string over TCP (the password is [`PASSWORD`], from a file).
    pub fn tcp_conninfo(&self) -> String {
        format!("host=127.0.0.1 port={} user=quest dbname=quest", self.port)
    }

    /// Runs `sql` with psql over the socket (database `quest`, or `postgres` before it
    /// exists); returns its output (unaligned, tuples only). Panics on failure.
    pub fn sql(&self, sql: &str) -> String {
        let out = self.try_sql(sql);
        match out {
            Ok(text) => text,
            Err(e) => panic!("psql {sql:?}: {e}"),
        }
    }

    pub fn try_sql(&self, sql: &str) -> Result<String, String> {
        let db = if sql.starts_with("CREATE DATABASE") {
            "postgres"
        } else {
            "quest"
        };
        let psql = if self.bin.join("psql").exists() {
            self.bin.join("psql")
        } else {
            PathBuf::from("psql")
        };
        let out = Command::new(psql)
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .arg("-h")
            .arg(self.socket_dir.path())
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "quest",
                "-d",
                db,
                "-c",
                sql,
            ])
            .env("LC_ALL", "C")
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.signal_and_wait(libc::SIGQUIT, Duration::from_secs(10));
    }
}
