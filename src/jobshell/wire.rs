//! The messages between the agent's shell (the client, on the host) and the executor (inside
//! the job's sandbox), over one Unix stream connection per command.
//!
//! ```text
//! client -> executor   'R' len:u32 workdir NUL command    with stdin, stdout, stderr attached
//!                      'S' signal:u8                      (any number, while it runs)
//! executor -> client   'X' code:i32                       the command exited
//!                      'K' signal:u8                      the command was killed by a signal
//!                      'E' len:u32 message                it could not be run
//!                      'T'                                this sandbox is out of date: the
//!                                                         host is making a new one; ask again
//! ```
//!
//! Integers are little-endian. The client's three standard descriptors travel with the first
//! byte of the request (`SCM_RIGHTS`), so the command writes straight into the agent's pipes
//! and reads its stdin: nothing is copied through either side. The client closing the
//! connection means it is gone (the agent killed it): the executor then kills the command.
//! Nothing here names a file, a policy or a program: the executor runs the text it gets as a
//! command in the sandbox it is in, and no message can change what that sandbox allows.

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

/// The longest request taken (workdir and command): far beyond any command line (the kernel
/// allows 2 MiB of arguments in all), short of letting a client make the executor allocate
/// without bound.
pub const MAX_REQUEST: usize = 8 << 20;
/// The longest error message taken.
const MAX_MESSAGE: usize = 64 << 10;

/// What the client asks for.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    /// The directory the command starts in, as the client's `getcwd` gave it.
    pub workdir: Vec<u8>,
    pub command: Vec<u8>,
}

/// How a command ended, or why it did not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Exited(i32),
    Killed(u8),
    Error(String),
    /// Not run: the sandbox no longer is what srt would make now (see `fingerprint`); the
    /// next connection reaches its replacement.
    Retry,
}

/// What the client sends once the command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    Signal(u8),
}

fn bad(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// Sends `request` with `fds` (the client's stdin, stdout and stderr) attached.
pub fn send_request(
    conn: &UnixStream,
    request: &Request,
    fds: [BorrowedFd<'_>; 3],
) -> io::Result<()> {
    if request.workdir.contains(&0) || request.command.contains(&0) {
        return Err(bad(
            "a NUL byte in the working directory or the command".into()
        ));
    }
    let len = request.workdir.len() + 1 + request.command.len();
    if len > MAX_REQUEST {
        return Err(bad(format!(
            "the command is too long ({len} bytes; at most {MAX_REQUEST})"
        )));
    }
    let mut head = Vec::with_capacity(5 + len);
    head.push(b'R');
    head.extend_from_slice(&(len as u32).to_le_bytes());
    head.extend_from_slice(&request.workdir);
    head.push(0);
    head.extend_from_slice(&request.command);

    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::Error::other("no room for the descriptors"));
    }
    // The descriptors ride on the first byte; the rest of the request follows as a stream.
    let sent = sendmsg(
        conn,
        &[IoSlice::new(&head)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    let mut conn = conn;
    conn.write_all(&head[sent..])
}

/// Reads a request and the three descriptors that came with it.
pub fn recv_request(conn: &UnixStream) -> io::Result<(Request, [OwnedFd; 3])> {
    let mut head = [0u8; 5];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = recvmsg(
        conn,
        &mut [IoSliceMut::new(&mut head)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?
    .bytes;
    let mut fds: Vec<OwnedFd> = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    if got == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the client closed the connection",
        ));
    }
    let mut conn = conn;
    conn.read_exact(&mut head[got..])?;
    if head[0] != b'R' {
        return Err(bad(format!("expected a request, got tag {:#04x}", head[0])));
    }
    let fds: [OwnedFd; 3] = fds.try_into().map_err(|v: Vec<OwnedFd>| {
        bad(format!(
            "{} descriptors came with the request, not 3",
            v.len()
        ))
    })?;
    let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len > MAX_REQUEST {
        return Err(bad(format!(
            "a request of {len} bytes (at most {MAX_REQUEST})"
        )));
    }
    let mut body = vec![0u8; len];
    conn.read_exact(&mut body)?;
    let nul = body
        .iter()
        .position(|b| *b == 0)
        .ok_or_else(|| bad("the request has no working directory".into()))?;
    let command = body.split_off(nul + 1);
    body.truncate(nul);
    Ok((
        Request {
            workdir: body,
            command,
        },
        fds,
    ))
}

pub fn send_control(mut conn: &UnixStream, control: Control) -> io::Result<()> {
    match control {
        Control::Signal(sig) => conn.write_all(&[b'S', sig]),
    }
}

/// The next control message; `None` when the client closed the connection.
pub fn recv_control(mut conn: &UnixStream) -> io::Result<Option<Control>> {
    let mut msg = [0u8; 2];
    match conn.read(&mut msg[..1])? {
        0 => return Ok(None),
        _ => conn.read_exact(&mut msg[1..])?,
    }
    match msg[0] {
        b'S' => Ok(Some(Control::Signal(msg[1]))),
        tag => Err(bad(format!(
            "expected a control message, got tag {tag:#04x}"
        ))),
    }
}

pub fn send_reply(mut conn: &UnixStream, reply: &Reply) -> io::Result<()> {
    let mut out = Vec::new();
    match reply {
        Reply::Exited(code) => {
            out.push(b'X');
            out.extend_from_slice(&code.to_le_bytes());
        }
        Reply::Killed(sig) => out.extend_from_slice(&[b'K', *sig]),
        Reply::Retry => out.push(b'T'),
        Reply::Error(message) => {
            let text = message.as_bytes();
            let text = &text[..text.len().min(MAX_MESSAGE)];
            out.push(b'E');
            out.extend_from_slice(&(text.len() as u32).to_le_bytes());
            out.extend_from_slice(text);
        }
    }
    conn.write_all(&out)
}

pub fn recv_reply(mut conn: &UnixStream) -> io::Result<Reply> {
    let mut tag = [0u8; 1];
    conn.read_exact(&mut tag)?;
    match tag[0] {
        b'X' => {
            let mut code = [0u8; 4];
            conn.read_exact(&mut code)?;
            Ok(Reply::Exited(i32::from_le_bytes(code)))
        }
        b'K' => {
            let mut sig = [0u8; 1];
            conn.read_exact(&mut sig)?;
            Ok(Reply::Killed(sig[0]))
        }
        b'T' => Ok(Reply::Retry),
        b'E' => {
            let mut len = [0u8; 4];
            conn.read_exact(&mut len)?;
            let len = u32::from_le_bytes(len) as usize;
            if len > MAX_MESSAGE {
                return Err(bad(format!("an error message of {len} bytes")));
            }
            let mut text = vec![0u8; len];
            conn.read_exact(&mut text)?;
            Ok(Reply::Error(String::from_utf8_lossy(&text).into_owned()))
        }
        tag => Err(bad(format!("expected a reply, got tag {tag:#04x}"))),
    }
}

/// The client's standard descriptors, to attach to a request.
pub fn standard_fds() -> [BorrowedFd<'static>; 3] {
    // SAFETY: descriptors 0, 1 and 2 stay open for the life of the process; a client whose
    // stdio is closed sends whatever the kernel then has there, and sendmsg fails on a
    // closed one.
    unsafe {
        [
            BorrowedFd::borrow_raw(0),
            BorrowedFd::borrow_raw(1),
            BorrowedFd::borrow_raw(2),
        ]
    }
}

/// Whether `fd` is a listening stream socket: what the executor must have been handed.
pub fn is_listening_socket(fd: impl AsFd) -> bool {
    rustix::net::sockopt::socket_acceptconn(fd).unwrap_or(false)
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
