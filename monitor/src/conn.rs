//! One non-blocking framed connection of the server, rank or control: what
//! arrived, split into frames and checked against the size limit before
//! decoding; the replies that still have to go out (a descriptor travels
//! with the first byte of its frame); and the two deadlines that keep a
//! peer from holding the server's resources by doing nothing.
//!
//! - **Settling.** A new connection must settle within the first-message
//!   timeout: a control connection by sending a whole first request, the
//!   rank connection by registering (a successful `Init`), a client waiting
//!   for the rank slot by sending anything at all. One that has not is
//!   closed, so an idle connection never holds a slot the real client needs.
//! - **Backpressure.** While a reply waits for room in the socket, nothing
//!   more is read from the peer and its socket is not polled for input, so
//!   a peer that sends without reading cannot make the loop spin; its
//!   pending output is capped at one reply ([`MAX_FRAME`]). A reply that
//!   waits longer than the reply timeout closes the connection.

use std::collections::VecDeque;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use nodeipc_fdpass::Credentials;
use nodeipc_proto::{KnownMessage, LEN_PREFIX, decode_message, frame_len};
use prost::Message;
use rustix::event::PollFlags;
use rustix::io::Errno;
use rustix::net::{RecvFlags, SendFlags};

use crate::refusal::{Refusal, RefusalCode};

pub(crate) use crate::limits::MAX_FRAME;

/// Most bytes buffered from a peer: room for one whole frame and the start
/// of the next.
const INPUT_CAP: usize = 2 * MAX_FRAME;

/// What the next frame in the buffer turned out to be.
pub(crate) enum Incoming<M> {
    /// A well-formed message.
    Message(M),
    /// A frame within the limit whose bytes are not a message: answered with
    /// an error, the connection stays usable.
    Malformed(Refusal),
    /// A prefix announcing a frame above the limit: answered with an error,
    /// then the connection is closed (the stream cannot be resynchronised).
    Oversize(Refusal),
}

/// Why a connection is closed before its peer closes it.
#[derive(Debug)]
pub(crate) enum Overdue {
    /// It did not settle in time (see the module's documentation).
    Unsettled { waited: Duration, limit: Duration },
    /// A reply has waited this long for the peer to read.
    Unread { waited: Duration, limit: Duration },
}

/// The limits every connection lives by, from the configuration.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deadlines {
    /// To send a first request (control), to register (rank), to send
    /// anything (a client waiting for the rank slot).
    pub(crate) first_message: Duration,
    /// For a reply that waits for room to be read.
    pub(crate) reply: Duration,
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
    /// A rank connection's process start time, read when it connected:
    /// Init checks it again, so a pid reused since then is not taken for it.
    /// [`PeerStart::Hidden`] on control connections.
    pub(crate) peer_start: PeerStart,
    /// When it was accepted (a waiting client's place in the queue).
    pub(crate) since: Instant,
    input: Vec<u8>,
    output: VecDeque<Outgoing>,
    /// The peer stopped sending (end of file). It may still read: what it
    /// sent before is answered, every reply delivered.
    eof: bool,
    /// Reading or writing failed: nothing more can be delivered.
    broken: bool,
    /// Close once the pending replies are out.
    closing: bool,
    /// Waiting for the rank slot: nothing is read; only a hang-up is seen.
    parked: bool,
    /// It must settle by then; `None` once it has.
    settle_by: Option<Instant>,
    /// Taking a first whole frame settles it (control connections).
    settles_on_first_frame: bool,
    /// Since when a reply waits for room; `None` while none does.
    blocked_since: Option<Instant>,
    deadlines: Deadlines,
    /// The last time a frame was taken: how long a settled control
    /// connection has been idle, for eviction when the slots are full.
    last_active: Instant,
}

impl Conn {
    fn new(stream: UnixStream, peer: Credentials, deadlines: Deadlines, now: Instant) -> Conn {
        Conn {
            stream,
            peer,
            peer_start: PeerStart::Hidden,
            since: now,
            input: Vec::new(),
            output: VecDeque::new(),
            eof: false,
            broken: false,
            closing: false,
            parked: false,
            settle_by: now.checked_add(deadlines.first_message),
            settles_on_first_frame: false,
            blocked_since: None,
            deadlines,
            last_active: now,
        }
    }

    /// A control connection: settles with its first whole request.
    pub(crate) fn control(
        stream: UnixStream,
        peer: Credentials,
        deadlines: Deadlines,
        now: Instant,
    ) -> Conn {
        Conn {
            settles_on_first_frame: true,
            ..Conn::new(stream, peer, deadlines, now)
        }
    }

    /// A rank connection, given the start time of the process that
    /// connected (read at accept). It holds the rank slot (`parked` false)
    /// and settles when it registers, or waits for the slot (`parked`) and
    /// settles by sending anything.
    pub(crate) fn rank(
        stream: UnixStream,
        peer: Credentials,
        peer_start: PeerStart,
        parked: bool,
        deadlines: Deadlines,
        now: Instant,
    ) -> Conn {
        Conn {
            peer_start,
            parked,
            ..Conn::new(stream, peer, deadlines, now)
        }
    }

    /// A connection turned away: one `Error` frame if the socket takes it
    /// at once (never a wait), then closed.
    pub(crate) fn refuse(stream: UnixStream, refusal: Refusal) {
        let unknown = Credentials {
            pid: 0,
            uid: u32::MAX,
            gid: u32::MAX,
        };
        let deadlines = Deadlines {
            first_message: Duration::ZERO,
            reply: Duration::ZERO,
        };
        Conn::new(stream, unknown, deadlines, Instant::now()).close_with(refusal);
    }

    /// Closes with one `Error` frame if the socket takes it at once.
    pub(crate) fn close_with(mut self, refusal: Refusal) {
        self.send(&refusal.to_message(), None);
    }

    /// A waiting client gets the rank slot: its frames are read from now on
    /// and it must register within the first-message timeout.
    pub(crate) fn unpark(&mut self, now: Instant) {
        self.parked = false;
        self.settle_by = now.checked_add(self.deadlines.first_message);
    }

    /// It proved itself (registered): no first-message deadline any more.
    pub(crate) fn settle(&mut self) {
        self.settle_by = None;
    }

    /// Whether reading from it is allowed now: never while parked, closing,
    /// or while a reply waits for room (backpressure), nor with a full buffer.
    fn wants_input(&self) -> bool {
        !self.parked
            && !self.eof
            && !self.broken
            && !self.closing
            && self.output.is_empty()
            && self.input.len() < INPUT_CAP
    }

    /// Reads what is available, as far as [`wants_input`](Conn::wants_input) allows.
    pub(crate) fn fill(&mut self) {
        let mut chunk = [0u8; 8192];
        while self.wants_input() {
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
    /// a reply is still waiting to go out: a peer that does not read its
    /// replies is not served more, and its output never exceeds one reply.
    pub(crate) fn next<M: KnownMessage>(&mut self, now: Instant) -> Option<Incoming<M>> {
        if self.closing || self.parked || !self.output.is_empty() {
            return None;
        }
        match frame_len(&self.input, MAX_FRAME) {
            Ok(size) => {
                // Not prost's `decode`: it takes a map field on any wire
                // type and reads an entry the peer never wrote.
                let decoded = decode_message::<M>(&self.input[LEN_PREFIX..size]);
                self.input.drain(..size);
                self.last_active = now;
                if self.settles_on_first_frame {
                    self.settle_by = None;
                }
                Some(match decoded {
                    Ok(msg) => Incoming::Message(msg),
                    Err(e) => Incoming::Malformed(Refusal::new(
                        RefusalCode::Malformed,
                        format!(
                            "frame of {size} bytes holds no valid message: {}",
                            decode_cause(&e)
                        ),
                    )),
                })
            }
            Err(nodeipc_proto::Error::TooLarge { size, max }) => {
                self.input.clear();
                self.closing = true;
                Some(Incoming::Oversize(Refusal::new(
                    RefusalCode::FrameTooLarge,
                    format!(
                        "frame of {size} bytes exceeds the limit of {max} bytes; closing the connection"
                    ),
                )))
            }
            Err(_) => None,
        }
    }

    /// Queues `msg` as one frame, with `fd` attached to its first byte, and
    /// tries to send it at once.
    pub(crate) fn send<M: Message>(&mut self, msg: &M, fd: Option<OwnedFd>) {
        match nodeipc_proto::encode_frame_to_vec(msg) {
            Ok(bytes) if bytes.len() <= MAX_FRAME => {
                self.output.push_back(Outgoing { bytes, sent: 0, fd })
            }
            // The field caps keep every reply under the limit (`limits.rs`
            // proves it); were one above it, the peer would refuse it, so
            // it learns why instead.
            Ok(bytes) => {
                let refusal = Refusal::new(
                    RefusalCode::Internal,
                    format!(
                        "the reply of {} bytes exceeds the frame limit of {MAX_FRAME} bytes",
                        bytes.len()
                    ),
                );
                if let Ok(bytes) = nodeipc_proto::encode_frame_to_vec(&refusal.to_message()) {
                    self.output.push_back(Outgoing {
                        bytes,
                        sent: 0,
                        fd: None,
                    });
                }
            }
            Err(_) => self.broken = true,
        }
        self.flush();
    }

    /// Sends what the socket takes; a failure marks the connection broken.
    pub(crate) fn flush(&mut self) {
        let result = self.flush_inner();
        if result.is_err() {
            self.output.clear();
            self.broken = true;
        }
        if self.output.is_empty() {
            self.blocked_since = None;
        } else if self.blocked_since.is_none() {
            self.blocked_since = Some(Instant::now());
        }
    }

    fn flush_inner(&mut self) -> Result<(), ()> {
        while let Some(front) = self.output.front_mut() {
            let sent = match front.fd.take() {
                // A frame this small goes in one piece or not at all on a
                // Unix stream socket, so `WouldBlock` means nothing was sent.
                Some(fd) => {
                    match nodeipc_fdpass::send_fds(&self.stream, &front.bytes, &[fd.as_fd()]) {
                        Ok(n) => n,
                        Err(nodeipc_fdpass::Error::Io { source, .. })
                            if source.kind() == io::ErrorKind::WouldBlock =>
                        {
                            // Nothing went: keep the descriptor for the next try.
                            front.fd = Some(fd);
                            return Ok(());
                        }
                        Err(_) => return Err(()),
                    }
                }
                None => loop {
                    match rustix::net::send(
                        &self.stream,
                        &front.bytes[front.sent..],
                        SendFlags::NOSIGNAL | SendFlags::DONTWAIT,
                    ) {
                        Ok(n) => break front.sent + n,
                        Err(Errno::INTR) => continue,
                        Err(Errno::AGAIN) => return Ok(()),
                        Err(_) => return Err(()),
                    }
                },
            };
            if sent >= front.bytes.len() {
                self.output.pop_front();
            } else {
                front.sent = sent;
            }
        }
        Ok(())
    }

    /// What to wait for: input while [`wants_input`](Conn::wants_input)
    /// (after end of file the socket stays readable, and asking would spin),
    /// room while a reply waits. A parked client is asked for nothing: poll
    /// still reports its hang-up.
    pub(crate) fn poll_flags(&self) -> PollFlags {
        let mut flags = PollFlags::empty();
        if self.wants_input() {
            flags |= PollFlags::IN;
        }
        if !self.parked && !self.output.is_empty() {
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

    /// The next moment one of its deadlines passes, if one runs.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        let unread = self
            .blocked_since
            .and_then(|t| t.checked_add(self.deadlines.reply));
        match (self.settle_by, unread) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether a deadline has passed at `now`. A waiting client whose
    /// settling time is up is looked at first: one that has sent anything
    /// is settled (its frames are read once it gets the slot).
    pub(crate) fn overdue(&mut self, now: Instant) -> Option<Overdue> {
        if let Some(since) = self.blocked_since
            && now.saturating_duration_since(since) >= self.deadlines.reply
        {
            return Some(Overdue::Unread {
                waited: now.saturating_duration_since(since),
                limit: self.deadlines.reply,
            });
        }
        let settle_by = self.settle_by?;
        if now < settle_by {
            return None;
        }
        if self.parked && self.has_sent_something() {
            self.settle_by = None;
            return None;
        }
        Some(Overdue::Unsettled {
            waited: now.saturating_duration_since(self.since),
            limit: self.deadlines.first_message,
        })
    }

    /// Whether bytes (or the end of file) wait unread in the socket.
    fn has_sent_something(&self) -> bool {
        let mut byte = [0u8; 1];
        loop {
            match rustix::net::recv(
                &self.stream,
                &mut byte[..],
                RecvFlags::PEEK | RecvFlags::DONTWAIT,
            ) {
                Ok(_) => return true,
                Err(Errno::INTR) => continue,
                Err(_) => return false,
            }
        }
    }

    /// How long a settled control connection has had nothing to do, `None`
    /// while it is busy or not yet settled (those are never evicted).
    pub(crate) fn idle_for(&self, now: Instant) -> Option<Duration> {
        let busy = !self.output.is_empty()
            || self.settle_by.is_some()
            || frame_len(&self.input, MAX_FRAME).is_ok();
        (!busy).then(|| now.saturating_duration_since(self.last_active))
    }
}

impl AsFd for Conn {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }
}

/// prost's own words for what was wrong with a frame's message (the path of
/// `Message.field` steps, then the fault), as the refusal quotes them.
fn decode_cause(error: &nodeipc_proto::Error) -> String {
    match error {
        nodeipc_proto::Error::Decode(e) => e.to_string(),
        other => other.to_string(),
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
