use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;

use super::*;

fn pipe() -> (std::fs::File, std::fs::File) {
    let (r, w) = rustix::pipe::pipe().unwrap();
    (std::fs::File::from(r), std::fs::File::from(w))
}

#[test]
fn a_request_carries_its_descriptors() {
    let (client, executor) = UnixStream::pair().unwrap();
    let (in_r, mut in_w) = pipe();
    let (mut out_r, out_w) = pipe();
    let (mut err_r, err_w) = pipe();
    let request = Request {
        workdir: b"/work/checkout".to_vec(),
        command: "echo 'h\u{e9}llo' | tr a-z A-Z\nexit 3".as_bytes().to_vec(),
    };
    send_request(
        &client,
        &request,
        [in_r.as_fd(), out_w.as_fd(), err_w.as_fd()],
    )
    .unwrap();
    let (got, [stdin, stdout, stderr]) = recv_request(&executor).unwrap();
    assert_eq!(got, request);
    // The received descriptors are the same pipes.
    in_w.write_all(b"in").unwrap();
    drop(in_w);
    let mut text = String::new();
    std::fs::File::from(stdin)
        .read_to_string(&mut text)
        .unwrap();
    assert_eq!(text, "in");
    std::fs::File::from(stdout).write_all(b"out").unwrap();
    std::fs::File::from(stderr).write_all(b"err").unwrap();
    drop((out_w, err_w));
    let (mut out, mut err) = (String::new(), String::new());
    out_r.read_to_string(&mut out).unwrap();
    err_r.read_to_string(&mut err).unwrap();
    assert_eq!((out.as_str(), err.as_str()), ("out", "err"));
}

#[test]
fn a_long_command_arrives_whole() {
    let (client, executor) = UnixStream::pair().unwrap();
    let command = vec![b'x'; 3 << 20];
    let request = Request {
        workdir: b"/w".to_vec(),
        command: command.clone(),
    };
    let sender = std::thread::spawn(move || {
        send_request(&client, &request, standard_fds()).unwrap();
        client
    });
    let (got, _fds) = recv_request(&executor).unwrap();
    assert_eq!(got.command.len(), command.len());
    drop(sender.join().unwrap());
}

#[test]
fn replies_and_signals_round_trip() {
    let (a, b) = UnixStream::pair().unwrap();
    for reply in [
        Reply::Exited(0),
        Reply::Exited(-1),
        Reply::Exited(255),
        Reply::Killed(9),
        Reply::Error("the sandbox is gone".into()),
        Reply::Retry,
    ] {
        send_reply(&a, &reply).unwrap();
        assert_eq!(recv_reply(&b).unwrap(), reply);
    }
    send_control(&b, Control::Signal(15)).unwrap();
    assert_eq!(recv_control(&a).unwrap(), Some(Control::Signal(15)));
    drop(b);
    assert_eq!(
        recv_control(&a).unwrap(),
        None,
        "a closed client reads as gone"
    );
}

#[test]
fn malformed_requests_are_refused() {
    // No descriptors attached.
    let (a, b) = UnixStream::pair().unwrap();
    (&a).write_all(b"R\x03\x00\x00\x00/w\0").unwrap();
    let err = recv_request(&b).unwrap_err().to_string();
    assert!(err.contains("0 descriptors"), "{err}");
    // A length past the limit: refused before anything is allocated.
    let (a, b) = UnixStream::pair().unwrap();
    let huge = (MAX_REQUEST as u32 + 1).to_le_bytes();
    let mut head = vec![b'R'];
    head.extend_from_slice(&huge);
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds = standard_fds();
    assert!(control.push(SendAncillaryMessage::ScmRights(&fds)));
    sendmsg(&a, &[IoSlice::new(&head)], &mut control, SendFlags::empty()).unwrap();
    let err = recv_request(&b).unwrap_err().to_string();
    assert!(err.contains("at most"), "{err}");
    // A client that connects and leaves.
    let (a, b) = UnixStream::pair().unwrap();
    drop(a);
    let err = recv_request(&b).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
    // NUL bytes cannot be sent.
    let (a, _b) = UnixStream::pair().unwrap();
    let request = Request {
        workdir: b"/w".to_vec(),
        command: b"a\0b".to_vec(),
    };
    assert!(send_request(&a, &request, standard_fds()).is_err());
}

#[test]
fn only_a_listening_socket_passes() {
    let dir = tempfile::tempdir().unwrap();
    let listener = std::os::unix::net::UnixListener::bind(dir.path().join("s")).unwrap();
    assert!(is_listening_socket(&listener));
    let (a, _b) = UnixStream::pair().unwrap();
    assert!(!is_listening_socket(&a));
    let file = std::fs::File::open("/dev/null").unwrap();
    assert!(!is_listening_socket(&file));
}
