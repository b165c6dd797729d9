use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::*;

fn config(devshell: Option<&str>) -> Config {
    Config {
        apply_seccomp: "/usr/bin/env".into(),
        checkout: "/work/check'out".into(),
        cwd_alias: "/state/jobs/j/opencode/cwd".into(),
        prelude: String::new(),
        devshell: devshell.map(PathBuf::from),
        watch: Vec::new(),
        gvisor: None,
    }
}

#[test]
fn the_script_enters_the_workdir_and_sources_the_devshell() {
    let request = Request {
        workdir: b"/work/check'out/sub dir".to_vec(),
        command: b"make test".to_vec(),
    };
    let text = script(&config(Some("/state/jobs/j/runner/devshell.sh")), &request);
    assert_eq!(
        String::from_utf8(text).unwrap(),
        "cd -- '/work/check'\\''out/sub dir' || exit 1\n. '/state/jobs/j/runner/devshell.sh'\nmake test"
    );
    // opencode's own directory stands for the checkout; no devShell, no line for it.
    let request = Request {
        workdir: b"/state/jobs/j/opencode/cwd".to_vec(),
        command: b"ls".to_vec(),
    };
    let text = script(&config(None), &request);
    assert_eq!(
        String::from_utf8(text).unwrap(),
        "cd -- '/work/check'\\''out' || exit 1\nls"
    );
    // The policy's prelude, literal, before the devShell: its variables are expanded by the
    // command's shell, inside the sandbox.
    let mut with_prelude = config(Some("/d.sh"));
    with_prelude.prelude =
        "[ -z \"${HTTPS_PROXY:-}\" ] || export npm_config_proxy=\"$HTTPS_PROXY\"\n".into();
    let text = String::from_utf8(script(&with_prelude, &request)).unwrap();
    assert_eq!(
        text,
        "cd -- '/work/check'\\''out' || exit 1\n[ -z \"${HTTPS_PROXY:-}\" ] || export npm_config_proxy=\"$HTTPS_PROXY\"\n. '/d.sh'\nls"
    );
}

/// `serve` with `env` standing in for srt's seccomp helper (it runs `<shell> -c <script>`
/// the same way), so the protocol's side of the executor runs without a sandbox.
struct Served {
    client: UnixStream,
    out: std::fs::File,
    server: std::thread::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

fn shared(dir: &Path) -> (Shared, OwnedFd) {
    let (wake_r, wake_w) = rustix::pipe::pipe().unwrap();
    let shared = Shared {
        config: Config {
            apply_seccomp: "/usr/bin/env".into(),
            checkout: dir.to_path_buf(),
            cwd_alias: "/nonexistent-alias".into(),
            prelude: String::new(),
            devshell: None,
            watch: Vec::new(),
            gvisor: None,
        },
        shell: "/bin/bash".into(),
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        baseline: Fingerprint::take(dir, &[]),
        stale: AtomicBool::new(false),
        wake: wake_w,
        serving: AtomicUsize::new(0),
    };
    (shared, wake_r)
}

fn served(command: &str) -> Served {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let (shared, _wake) = shared(&dir);
    let (client, executor) = UnixStream::pair().unwrap();
    let (out_r, out_w) = rustix::pipe::pipe().unwrap();
    let null = std::fs::File::open("/dev/null").unwrap();
    let request = Request {
        workdir: dir.as_os_str().as_bytes().to_vec(),
        command: command.as_bytes().to_vec(),
    };
    wire::send_request(
        &client,
        &request,
        [null.as_fd(), out_w.as_fd(), out_w.as_fd()],
    )
    .unwrap();
    drop(out_w);
    let server = std::thread::spawn(move || serve(executor, &shared));
    Served {
        client,
        out: std::fs::File::from(out_r),
        server,
        _dir: tmp,
    }
}

#[test]
fn exit_status_and_output_come_back() {
    let Served {
        client,
        mut out,
        server,
        _dir,
    } = served("echo \"in $PWD\"; echo oops >&2; exit 7");
    assert_eq!(wire::recv_reply(&client).unwrap(), Reply::Exited(7));
    server.join().unwrap();
    let mut text = String::new();
    out.read_to_string(&mut text).unwrap();
    assert!(
        text.starts_with("in /") && text.ends_with("oops\n"),
        "{text}"
    );
}

#[test]
fn a_signal_from_the_client_reaches_the_command() {
    let Served {
        client,
        mut out,
        server,
        _dir,
    } = served("trap 'kill $p 2>/dev/null; echo got-term; exit 3' TERM; sleep 30 & p=$!; echo started; wait");
    let mut first = [0u8; 8];
    out.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"started\n");
    wire::send_control(&client, Control::Signal(libc::SIGTERM as u8)).unwrap();
    assert_eq!(wire::recv_reply(&client).unwrap(), Reply::Exited(3));
    server.join().unwrap();
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert!(rest.contains("got-term\n"), "{rest}");
}

#[test]
fn a_command_whose_client_is_gone_is_killed() {
    let marker = format!("qr-executor-test-{}", std::process::id());
    let Served {
        client,
        mut out,
        server,
        _dir,
    } = served(&format!("echo started; exec -a {marker} sleep 60"));
    let mut first = [0u8; 8];
    out.read_exact(&mut first).unwrap();
    let started = Instant::now();
    drop(client);
    server.join().unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    let left: Vec<u32> = crate::procfs::pids()
        .into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.starts_with(marker.as_bytes()))
        })
        .collect();
    assert!(left.is_empty(), "the command survived: {left:?}");
}

#[test]
fn an_out_of_date_sandbox_sends_the_command_to_the_next() {
    let tmp = tempfile::tempdir().unwrap();
    let (shared, wake) = shared(tmp.path());
    // A command made a nested repository: the next command must not run in a sandbox made
    // before its hooks existed.
    std::fs::create_dir_all(tmp.path().join("sub/.git/hooks")).unwrap();
    let (client, executor) = UnixStream::pair().unwrap();
    let request = Request {
        workdir: tmp.path().as_os_str().as_bytes().to_vec(),
        command: b"touch ran".to_vec(),
    };
    wire::send_request(&client, &request, wire::standard_fds()).unwrap();
    serve(executor, &shared);
    assert_eq!(wire::recv_reply(&client).unwrap(), Reply::Retry);
    assert!(!tmp.path().join("ran").exists(), "not run here");
    assert!(shared.stale.load(Ordering::SeqCst));
    let mut byte = [0u8; 1];
    assert_eq!(
        rustix::io::read(&wake, &mut byte).unwrap(),
        1,
        "the accept loop is woken"
    );
}
