//! An HTTPS front for the stand-in registry: `node` terminates TLS on listening sockets the
//! suite binds (`127.0.0.1` and `::1`, one port), with a self-signed certificate for
//! `localhost`, and pipes each connection to the plain registry.
//!
//! A name, not an address: npm's proxy agent (https-proxy-agent) drops the host of a TLS
//! connection through a proxy and lets Node check the certificate against `localhost`, so an
//! HTTPS registry at `127.0.0.1` fails there with `ERR_TLS_CERT_ALTNAME_INVALID` whatever its
//! certificate says. Both loopback addresses, since `localhost` may resolve to either first. Package managers then reach the stand-in as they reach a real registry —
//! over TLS, through the runner's proxy, which verifies this certificate upstream (the suite
//! gives the proxy `NODE_EXTRA_CA_CERTS` naming it) and presents the job CA's to the client.
//!
//! node is there wherever the agents are. It runs in the scripted model's network namespace
//! (`confine`), where the plain registry listens, and ends when its stdin closes: when the
//! front is dropped, or when the suite's process dies however it dies.

use std::io::{self, BufRead};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const SCRIPT: &str = r#"
const tls = require('tls'), net = require('net'), fs = require('fs');
const env = process.env;
const options = {cert: fs.readFileSync(env.QR_CERT), key: fs.readFileSync(env.QR_KEY)};
const forward = c => {
  const u = net.connect(Number(env.QR_PLAIN_PORT), '127.0.0.1');
  const end = () => { c.destroy(); u.destroy(); };
  c.on('error', end); u.on('error', end); c.on('close', end); u.on('close', end);
  c.pipe(u); u.pipe(c);
};
const fds = env.QR_FDS.split(',').map(Number);
let waiting = fds.length;
for (const fd of fds) {
  tls.createServer(options, forward).listen({fd}, () => { if (--waiting === 0) console.log('ready'); });
}
process.stdin.on('end', () => process.exit(0));
process.stdin.on('error', () => process.exit(0));
process.stdin.resume();
"#;

pub struct TlsFront {
    pub port: u16,
    /// The front's certificate (PEM): what a client of it must trust.
    pub cert: PathBuf,
    child: Child,
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl TlsFront {
    /// The node process's id (it lives in the model's network namespace, beside the job).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Serves TLS on `listeners` (one port: `localhost`'s addresses), forwarding to
    /// `127.0.0.1:plain_port`; the certificate and key are written to `dir`. `confine` puts node
    /// where `plain_port` listens.
    pub fn start(
        listeners: Vec<std::net::TcpListener>,
        plain_port: u16,
        dir: &Path,
        confine: impl Fn(&mut Command),
    ) -> io::Result<TlsFront> {
        let port = listeners
            .first()
            .ok_or_else(|| io::Error::other("no listener"))?
            .local_addr()?
            .port();
        let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])
            .map_err(io::Error::other)?;
        let cert = dir.join("stand-in-registry.pem");
        let key = dir.join("stand-in-registry.key");
        std::fs::write(&cert, certified.cert.pem())?;
        std::fs::write(&key, certified.signing_key.serialize_pem())?;
        let node = which::which("node")
            .map_err(|e| io::Error::other(format!("node is not on PATH: {e}")))?;
        let mut cmd = Command::new(node);
        cmd.args(["-e", SCRIPT])
            .env("QR_CERT", &cert)
            .env("QR_KEY", &key)
            .env("QR_PLAIN_PORT", plain_port.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let fds: Vec<i32> = listeners.iter().map(|l| l.as_raw_fd()).collect();
        let list: Vec<String> = fds.iter().map(i32::to_string).collect();
        cmd.env("QR_FDS", list.join(","));
        // The listeners keep their numbers: node is told them.
        quest_runner::util::fd::inherit(&mut cmd, fds);
        confine(&mut cmd);
        let child = cmd.spawn()?;
        drop(listeners);
        let mut front = TlsFront { port, cert, child };
        let stdout = front
            .child
            .stdout
            .take()
            .ok_or_else(|| io::Error::other("no stdout"))?;
        let mut line = String::new();
        io::BufReader::new(stdout).read_line(&mut line)?;
        if line.trim() != "ready" {
            return Err(io::Error::other("the TLS front did not start"));
        }
        Ok(front)
    }
}
