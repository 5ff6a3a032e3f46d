//! Descriptors in `SCM_RIGHTS` control messages over Unix sockets.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::io::Errno;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketAddrUnix,
};

use crate::{Error, Result};

/// The most descriptors one message can carry (`SCM_MAX_FD` in the kernel).
pub const SCM_MAX_FD: usize = 253;

/// Bytes in `sockaddr_un.sun_path` on Linux: the longest path a socket
/// address holds (without a terminating NUL; the kernel accepts that when
/// sending to it). [`Listener::bind`](crate::Listener::bind) keeps one byte for
/// the NUL.
const SUN_PATH_LEN: usize = 108;

/// Room for the largest control message we ever send or accept.
const CONTROL_SPACE: usize = rustix::cmsg_space!(ScmRights(SCM_MAX_FD));

/// What one receive brought: payload bytes and the descriptors that came
/// with them, already close-on-exec.
#[derive(Debug)]
pub struct Received {
    /// Payload bytes written into the buffer (0 on a stream socket: the peer
    /// closed it).
    pub len: usize,
    /// The descriptors, in the order the sender listed them.
    pub fds: Vec<OwnedFd>,
}

/// Sends `payload` with `fds` attached, over a connected Unix socket of any
/// type (stream, datagram, seqpacket).
///
/// Performs `sendmsg(socket, payload, SCM_RIGHTS(fds), MSG_NOSIGNAL)`, retrying
/// `EINTR`. On a stream socket the rest of a long payload follows with
/// `send`; the descriptors travel with its first byte. A peer that closed
/// gives `EPIPE` as an error, never a `SIGPIPE`.
///
/// # Errors
/// [`Error::TooManyFds`] beyond [`SCM_MAX_FD`] and [`Error::EmptyPayload`]
/// (descriptors need at least one byte to travel with), both before anything
/// is sent; [`Error::Io`] from the kernel (`EPIPE`, `EMSGSIZE`, …).
///
/// # Examples
/// ```
/// use std::os::fd::AsFd;
/// use std::os::unix::net::UnixStream;
/// let (a, b) = UnixStream::pair()?;
/// let (file, _) = std::io::pipe()?;
/// nodeipc_fdpass::send_fds(&a, b"pipe", &[file.as_fd()])?;
/// let mut buf = [0u8; 4];
/// let got = nodeipc_fdpass::recv_fds(&b, &mut buf, 1)?;
/// assert_eq!((got.len, got.fds.len()), (4, 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # References
/// - [Linux `unix(7)`, `SCM_RIGHTS`](https://man7.org/linux/man-pages/man7/unix.7.html)
/// - [Linux `sendmsg(2)`](https://man7.org/linux/man-pages/man2/sendmsg.2.html)
#[doc(alias = "sendmsg")]
#[doc(alias = "SCM_RIGHTS")]
pub fn send_fds(socket: impl AsFd, payload: &[u8], fds: &[BorrowedFd<'_>]) -> Result<usize> {
    send_impl(socket.as_fd(), None, payload, fds)
}

/// Like [`send_fds`], on an unconnected datagram socket, to the socket bound
/// at `path`.
///
/// # Errors
/// As [`send_fds`]; [`Error::PathTooLong`] naming `path` if it is longer
/// than a socket address holds (108 bytes), before anything is
/// sent; [`Error::Io`] if it is no valid socket address otherwise (a NUL
/// byte in it).
#[doc(alias = "sendmsg")]
pub fn send_fds_to(
    socket: impl AsFd,
    path: impl AsRef<Path>,
    payload: &[u8],
    fds: &[BorrowedFd<'_>],
) -> Result<usize> {
    let path = path.as_ref();
    let len = path.as_os_str().len();
    let too_long = || Error::PathTooLong {
        path: path.to_owned(),
        len,
        max: SUN_PATH_LEN,
    };
    if len > SUN_PATH_LEN {
        return Err(too_long());
    }
    let address = SocketAddrUnix::new(path).map_err(|e| match e {
        Errno::NAMETOOLONG => too_long(),
        e => Error::io("sockaddr_un", e),
    })?;
    send_impl(socket.as_fd(), Some(&address), payload, fds)
}

fn send_impl(
    socket: BorrowedFd<'_>,
    to: Option<&SocketAddrUnix>,
    payload: &[u8],
    fds: &[BorrowedFd<'_>],
) -> Result<usize> {
    if fds.len() > SCM_MAX_FD {
        return Err(Error::TooManyFds {
            count: fds.len(),
            max: SCM_MAX_FD,
        });
    }
    if payload.is_empty() && !fds.is_empty() {
        return Err(Error::EmptyPayload);
    }
    let mut space = [MaybeUninit::<u8>::uninit(); CONTROL_SPACE];
    let used = if fds.is_empty() {
        0
    } else {
        rustix::cmsg_space!(ScmRights(fds.len()))
    };
    let mut control = SendAncillaryBuffer::new(&mut space[..used]);
    if !fds.is_empty() {
        let pushed = control.push(SendAncillaryMessage::ScmRights(fds));
        debug_assert!(pushed, "the control buffer is sized for the descriptors");
    }
    let iov = [IoSlice::new(payload)];
    let mut sent = loop {
        let result = match to {
            Some(address) => {
                rustix::net::sendmsg_addr(socket, address, &iov, &mut control, SendFlags::NOSIGNAL)
            }
            None => rustix::net::sendmsg(socket, &iov, &mut control, SendFlags::NOSIGNAL),
        };
        match result {
            Err(Errno::INTR) => continue,
            other => break other.map_err(|e| Error::io("sendmsg", e))?,
        }
    };
    // Only a stream socket takes part of a message; the rest carries no descriptors.
    while sent < payload.len() {
        match rustix::net::send(socket, &payload[sent..], SendFlags::NOSIGNAL) {
            Ok(n) => sent += n,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(Error::io("send", e)),
        }
    }
    Ok(sent)
}

/// Receives one message into `buf` and the descriptors that came with it,
/// accepting at most `max_fds` of them (at most [`SCM_MAX_FD`]).
///
/// Performs `recvmsg(socket, buf, MSG_CMSG_CLOEXEC)` with a control buffer
/// sized for `max_fds`, retrying `EINTR`. On a stream socket this returns
/// what is available (see [`recv_fds_exact`] to fill `buf`); a length of 0
/// there means the peer closed.
///
/// # Errors
/// Every one of these closes all descriptors that did arrive, so none leaks:
/// [`Error::ControlTruncated`] when the sender passed more than fit
/// (`MSG_CTRUNC`), [`Error::TooManyFds`] when more than `max_fds` arrived,
/// [`Error::UnexpectedControl`] for a control message other than
/// `SCM_RIGHTS`, [`Error::PayloadTruncated`] when a datagram was longer than
/// `buf` (`MSG_TRUNC`). [`Error::Io`] from the kernel.
///
/// # References
/// - [Linux `recvmsg(2)`](https://man7.org/linux/man-pages/man2/recvmsg.2.html)
#[doc(alias = "recvmsg")]
#[doc(alias = "MSG_CMSG_CLOEXEC")]
pub fn recv_fds(socket: impl AsFd, buf: &mut [u8], max_fds: usize) -> Result<Received> {
    let max_fds = max_fds.min(SCM_MAX_FD);
    let mut space = [MaybeUninit::<u8>::uninit(); CONTROL_SPACE];
    let room = if max_fds == 0 {
        0
    } else {
        rustix::cmsg_space!(ScmRights(max_fds))
    };
    let mut control = RecvAncillaryBuffer::new(&mut space[..room]);
    let socket = socket.as_fd();
    let message = loop {
        let mut iov = [IoSliceMut::new(buf)];
        match rustix::net::recvmsg(socket, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC) {
            Err(Errno::INTR) => continue,
            other => break other.map_err(|e| Error::io("recvmsg", e))?,
        }
    };
    let mut fds = Vec::new();
    let mut unexpected = None;
    for control_message in control.drain() {
        match control_message {
            RecvAncillaryMessage::ScmRights(arrived) => fds.extend(arrived),
            RecvAncillaryMessage::ScmCredentials(_) => unexpected = Some("SCM_CREDENTIALS"),
            _ => unexpected = Some("of an unknown type"),
        }
    }
    // From here on, returning an error drops `fds`, closing every one.
    let closed = fds.len();
    // An unexpected message first: it is the cause when it also crowded out
    // descriptors from the control buffer.
    if let Some(kind) = unexpected {
        return Err(Error::UnexpectedControl { kind, closed });
    }
    if message.flags.contains(ReturnFlags::CTRUNC) {
        return Err(Error::ControlTruncated { max_fds, closed });
    }
    if fds.len() > max_fds {
        return Err(Error::TooManyFds {
            count: fds.len(),
            max: max_fds,
        });
    }
    if message.flags.contains(ReturnFlags::TRUNC) {
        return Err(Error::PayloadTruncated {
            capacity: buf.len(),
            closed,
        });
    }
    Ok(Received {
        len: message.bytes,
        fds,
    })
}

/// Receives exactly `buf.len()` bytes from a stream socket, and at most
/// `max_fds` descriptors in all, however the bytes are split on the way.
///
/// # Errors
/// [`Error::Closed`] when the peer closes before `buf` is full; otherwise as
/// [`recv_fds`]. Descriptors received before an error are closed.
pub fn recv_fds_exact(socket: impl AsFd, buf: &mut [u8], max_fds: usize) -> Result<Vec<OwnedFd>> {
    let socket = socket.as_fd();
    let mut fds = Vec::new();
    let mut got = 0;
    while got < buf.len() {
        let received = recv_fds(socket, &mut buf[got..], max_fds.saturating_sub(fds.len()))?;
        if received.len == 0 {
            return Err(Error::Closed {
                received: got,
                expected: buf.len(),
            });
        }
        got += received.len;
        fds.extend(received.fds);
    }
    Ok(fds)
}
