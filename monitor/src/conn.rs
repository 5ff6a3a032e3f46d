//! One non-blocking framed connection of the server: what arrived, split into
//! frames and checked against the size limit before decoding, and the
//! replies that still have to go out (a descriptor travels with the first
//! byte of its frame).

use std::collections::VecDeque;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use nodeipc_fdpass::Credentials;
use nodeipc_proto::{LEN_PREFIX, frame_len};
use prost::Message;
use rustix::net::SendFlags;

/// The largest frame either side accepts, length prefix included.
pub const MAX_FRAME: usize = 64 * 1024;

/// Most bytes buffered from a peer: room for one whole frame and the start
/// of the next.
const INPUT_CAP: usize = 2 * MAX_FRAME;

/// What the next frame in the buffer turned out to be.
pub(crate) enum Incoming<M> {
    /// A well-formed message.
    Message(M),
    /// A frame within the limit whose bytes are not a message: answered with
    /// an error, the connection stays usable.
    Malformed(String),
    /// A prefix announcing a frame above the limit: answered with an error,
    /// then the connection is closed (the stream cannot be resynchronised).
    Oversize(String),
}

struct Outgoing {
    bytes: Vec<u8>,
    sent: usize,
    fd: Option<OwnedFd>,
}

/// A connected peer.
pub(crate) struct Conn {
    stream: UnixStream,
    /// Who the kernel says connected.
    pub(crate) peer: Credentials,
    /// A rank connection's process start time, read when it connected
    /// ([`Conn::rank`]): Init checks it again, so a pid reused since then is
    /// not taken for it. [`PeerStart::Hidden`] on control connections.
    pub(crate) peer_start: PeerStart,
    input: Vec<u8>,
    output: VecDeque<Outgoing>,
    /// The peer stopped sending (end of file). It may still read: what it
    /// sent before is answered, every reply delivered.
    eof: bool,
    /// Reading or writing failed: nothing more can be delivered.
    broken: bool,
    /// Close once the pending replies are out.
    pub(crate) closing: bool,
}

impl Conn {
    pub(crate) fn new(stream: UnixStream, peer: Credentials) -> Conn {
        Conn {
            stream,
            peer,
            peer_start: PeerStart::Hidden,
            input: Vec::new(),
            output: VecDeque::new(),
            eof: false,
            broken: false,
            closing: false,
        }
    }

    /// A rank connection: as [`new`](Conn::new), with the start time of the
    /// process that connected, read when it connected ([`start_time_of`]).
    pub(crate) fn rank(stream: UnixStream, peer: Credentials, peer_start: PeerStart) -> Conn {
        Conn {
            peer_start,
            ..Conn::new(stream, peer)
        }
    }

    /// Reads what is available, up to the buffer's limit.
    pub(crate) fn fill(&mut self) {
        let mut chunk = [0u8; 8192];
        while !self.eof && !self.broken && self.input.len() < INPUT_CAP {
            let room = (INPUT_CAP - self.input.len()).min(chunk.len());
            match self.stream.read(&mut chunk[..room]) {
                Ok(0) => self.eof = true,
                Ok(n) => self.input.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => self.broken = true,
            }
        }
    }

    /// The next complete frame in the buffer, if any. Nothing is taken while
    /// replies are still waiting to go out (a peer that does not read its
    /// replies is not served more).
    pub(crate) fn next<M: Message + Default>(&mut self) -> Option<Incoming<M>> {
        if self.closing || !self.output.is_empty() {
            return None;
        }
        match frame_len(&self.input, MAX_FRAME) {
            Ok(size) => {
                let decoded = M::decode(&self.input[LEN_PREFIX..size]);
                self.input.drain(..size);
                Some(match decoded {
                    Ok(msg) => Incoming::Message(msg),
                    Err(e) => Incoming::Malformed(format!(
                        "frame of {size} bytes holds no valid message: {e}"
                    )),
                })
            }
            Err(nodeipc_proto::Error::TooLarge { size, max }) => {
                self.input.clear();
                self.closing = true;
                Some(Incoming::Oversize(format!(
                    "frame of {size} bytes exceeds the limit of {max} bytes; closing the connection"
                )))
            }
            Err(_) => None,
        }
    }

    /// Queues `msg` as one frame, with `fd` attached to its first byte, and
    /// tries to send it at once.
    pub(crate) fn send<M: Message>(&mut self, msg: &M, fd: Option<OwnedFd>) {
        match nodeipc_proto::encode_frame_to_vec(msg) {
            Ok(bytes) => self.output.push_back(Outgoing { bytes, sent: 0, fd }),
            Err(_) => self.broken = true,
        }
        self.flush();
    }

    /// Sends what the socket takes; a failure marks the connection closed.
    pub(crate) fn flush(&mut self) {
        while let Some(front) = self.output.front_mut() {
            let result = match front.fd.take() {
                // A frame this small goes in one piece or not at all on a
                // Unix stream socket, so `WouldBlock` means nothing was sent.
                Some(fd) => {
                    match nodeipc_fdpass::send_fds(&self.stream, &front.bytes, &[fd.as_fd()]) {
                        Ok(n) => Ok(n),
                        Err(nodeipc_fdpass::Error::Io { source, .. })
                            if source.kind() == io::ErrorKind::WouldBlock =>
                        {
                            // Nothing went: keep the descriptor for the next try.
                            front.fd = Some(fd);
                            return;
                        }
                        Err(_) => Err(()),
                    }
                }
                None => loop {
                    match rustix::net::send(
                        &self.stream,
                        &front.bytes[front.sent..],
                        SendFlags::NOSIGNAL | SendFlags::DONTWAIT,
                    ) {
                        Ok(n) => break Ok(front.sent + n),
                        Err(rustix::io::Errno::INTR) => continue,
                        Err(rustix::io::Errno::AGAIN) => return,
                        Err(_) => break Err(()),
                    }
                },
            };
            match result {
                Ok(sent) if sent >= front.bytes.len() => {
                    self.output.pop_front();
                }
                Ok(sent) => front.sent = sent,
                Err(()) => {
                    self.output.clear();
                    self.broken = true;
                    return;
                }
            }
        }
    }

    /// Whether replies wait for the socket to take them.
    pub(crate) fn wants_write(&self) -> bool {
        !self.output.is_empty()
    }

    /// What to wait for: input until the peer's end of file (after it the
    /// socket stays readable, and asking would spin), room while replies wait.
    pub(crate) fn poll_flags(&self) -> rustix::event::PollFlags {
        use rustix::event::PollFlags;
        let mut flags = PollFlags::empty();
        if !self.eof {
            flags |= PollFlags::IN;
        }
        if self.wants_write() {
            flags |= PollFlags::OUT;
        }
        flags
    }

    /// Whether the connection is done: broken; or closed by the peer with
    /// every frame it sent answered and every reply out; or closing with
    /// every reply out. A peer that only shut down its sending side still
    /// gets all its answers.
    pub(crate) fn finished(&self) -> bool {
        if self.broken {
            return true;
        }
        if self.closing {
            return self.output.is_empty();
        }
        self.eof && self.output.is_empty() && frame_len(&self.input, MAX_FRAME).is_err()
    }
}

impl AsFd for Conn {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }
}

/// What reading a connecting process's start time at accept found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum PeerStart {
    /// Its start time, in clock ticks since boot.
    Known(u64),
    /// Its pid is 0 to us (another pid namespace), or not a rank connection.
    Hidden,
    /// The kernel had no such process any more (`ENOENT`, `ESRCH`).
    Gone,
    /// Reading failed for a reason of ours (`EMFILE`, say): the error, which
    /// names the pid, the file and the errno. Says nothing of the process.
    Unreadable(String),
}

/// The start time of the process that connected: read at accept, for
/// [`Conn::rank`].
pub(crate) fn start_time_of(peer: &Credentials) -> PeerStart {
    if peer.pid == 0 {
        return PeerStart::Hidden;
    }
    match nodeipc_fdpass::process_start_time(peer.pid) {
        Ok(start) => PeerStart::Known(start),
        Err(nodeipc_fdpass::Error::ProcessGone { .. }) => PeerStart::Gone,
        Err(e) => PeerStart::Unreadable(e.to_string()),
    }
}
