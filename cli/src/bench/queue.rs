//! The queue between two processes (pinned one per core where there are
//! two), every word of every message written by its sender and checked by
//! its receiver:
//!
//! - a 64-byte round trip: this process pushes a message and waits for the
//!   reply with `pop_timeout`; the peer pops it the same way and pushes it
//!   back with every word changed;
//! - a one-way stream of 64-byte messages in batches of 64 (reserve, fill,
//!   publish once; popped 64 at a time), the time per message.
//!
//! The baseline for both is the same messages over a Unix stream socket
//! (what two processes use without shared memory): one 64-byte write per
//! message, or one write of a whole batch.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use nodeipc_queue::{Consumer, Producer, Queue};

use crate::bench::machine::{self, Pinned};
use crate::bench::peer::{self, Peers, read_exact, write_all};

/// A 64-byte message: eight words, every one written and checked.
pub type Msg = [u64; 8];
const MSG_BYTES: usize = size_of::<Msg>();
const SCHEMA: u64 = 0x6265_6e63_6871; // "benchq"
const CAPACITY: u32 = 1024;
/// Messages a batch of the stream carries.
pub const BATCH: usize = 64;
/// How long any one message may take before the benchmark is declared hung.
const WAIT: Duration = Duration::from_secs(10);

/// What carries the messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// nodeipc-queue (ours).
    Queue,
    /// A Unix stream socket pair.
    UnixSocket,
}

impl Transport {
    /// A short name, as printed in tables and passed to peers.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Queue => "nodeipc queue",
            Transport::UnixSocket => "unix-socket",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Transport::Queue => "queue",
            Transport::UnixSocket => "socket",
        }
    }
}

/// Message `i`: cheap to make and to check, different in every word.
#[inline]
pub fn msg(i: u64) -> Msg {
    std::array::from_fn(|k| i.wrapping_add(k as u64))
}

/// The reply to `m`: every word read and changed.
#[inline]
pub fn reply(m: &Msg) -> Msg {
    std::array::from_fn(|k| !m[k])
}

/// `got` is `want`, or an error that shows both.
///
/// # Errors
/// The message arrived corrupted.
#[inline]
pub fn check(got: &Msg, want: &Msg) -> io::Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "message corrupted: got {got:?}, expected {want:?}"
        )))
    }
}

fn err(e: nodeipc_queue::Error) -> io::Error {
    io::Error::other(e)
}

/// Both directions' carriers, this side's ends, and the peer's as it
/// inherits them.
enum Link {
    Queue(Queue<Msg>, Queue<Msg>),
    Socket(OwnedFd, OwnedFd),
}

impl Link {
    fn new(which: Transport) -> io::Result<Link> {
        Ok(match which {
            Transport::Queue => Link::Queue(
                Queue::anonymous(CAPACITY, SCHEMA).map_err(err)?,
                Queue::anonymous(CAPACITY, SCHEMA).map_err(err)?,
            ),
            Transport::UnixSocket => {
                let (ours, theirs) = peer::stream_pair()?;
                Link::Socket(ours, theirs)
            }
        })
    }

    /// Spawns the peer playing `part` over this link for `total` messages.
    fn spawn(&self, which: Transport, part: &str, total: u64) -> io::Result<(Peers, bool)> {
        let pin = machine::cores() >= 2;
        let mut peers = Peers::default();
        let (a, b) = match self {
            Link::Queue(ping, pong) => (ping.as_fd(), pong.as_fd()),
            Link::Socket(_, theirs) => (theirs.as_fd(), theirs.as_fd()),
        };
        let role = format!(
            "queue {part} {} {} {} {total}",
            which.tag(),
            a.as_raw_fd(),
            b.as_raw_fd()
        );
        peers.spawn(&role, &[a, b], pin.then_some(1))?;
        Ok((peers, pin))
    }
}

/// `n` round trips of a 64-byte message to a peer process, after a
/// warm-up of a quarter as many. Returns the time of the `n`.
///
/// # Errors
/// Set-up failures, a corrupted message, or a peer that failed.
pub fn round_trip(which: Transport, n: u64) -> io::Result<Duration> {
    let warm_up = (n / 4).max(20);
    let total = warm_up + n;
    let link = Link::new(which)?;
    let (peers, pin) = link.spawn(which, "echo", total)?;
    let _pinned = if pin { Some(Pinned::to(0)?) } else { None };
    let mut start = Instant::now();
    match link {
        Link::Queue(ping, pong) => {
            let mut tx = ping.producer().map_err(err)?;
            let mut rx = pong.consumer().map_err(err)?;
            for i in 0..total {
                if i == warm_up {
                    start = Instant::now();
                }
                let m = msg(i);
                tx.push_timeout(&m, WAIT).map_err(err)?;
                check(&rx.pop_timeout(WAIT).map_err(err)?, &reply(&m))?;
            }
        }
        Link::Socket(ours, theirs) => {
            drop(theirs);
            let mut buf = [0u8; MSG_BYTES];
            for i in 0..total {
                if i == warm_up {
                    start = Instant::now();
                }
                let m = msg(i);
                write_all(&ours, &to_bytes(&m))?;
                read_exact(&ours, &mut buf)?;
                check(&from_bytes(&buf), &reply(&m))?;
            }
        }
    }
    let elapsed = start.elapsed();
    peers.finish(WAIT)?;
    Ok(elapsed)
}

/// `n` 64-byte messages (rounded up to whole batches of [`BATCH`]) streamed
/// from a peer process to this one, after a warm-up of a quarter as many.
/// Returns the time of the `n`.
///
/// # Errors
/// Set-up failures, a corrupted message, or a peer that failed.
pub fn stream(which: Transport, n: u64) -> io::Result<Duration> {
    let batches = n.div_ceil(BATCH as u64).max(1);
    let warm_up = (batches / 4).max(4);
    let total = (warm_up + batches) * BATCH as u64;
    let link = Link::new(which)?;
    let (peers, pin) = link.spawn(which, "send", total)?;
    let _pinned = if pin { Some(Pinned::to(0)?) } else { None };
    let mut out = [[0u64; 8]; BATCH];
    let mut next = 0u64;
    let mut start = Instant::now();
    match link {
        Link::Queue(ping, _) => {
            let mut rx = ping.consumer().map_err(err)?;
            while next < total {
                if next == warm_up * BATCH as u64 {
                    start = Instant::now();
                }
                let got = rx.pop_into_timeout(&mut out, WAIT).map_err(err)?;
                for m in &out[..got] {
                    check(m, &msg(next))?;
                    next += 1;
                }
            }
        }
        Link::Socket(ours, theirs) => {
            drop(theirs);
            let mut bytes = [0u8; BATCH * MSG_BYTES];
            while next < total {
                if next == warm_up * BATCH as u64 {
                    start = Instant::now();
                }
                read_exact(&ours, &mut bytes)?;
                for chunk in bytes.chunks_exact(MSG_BYTES) {
                    check(&from_bytes(chunk), &msg(next))?;
                    next += 1;
                }
            }
        }
    }
    let elapsed = start.elapsed();
    peers.finish(WAIT)?;
    // Time per message is taken over the `n` asked for, so the batches'
    // rounding up must not count: scale to whole batches measured.
    Ok(elapsed.mul_f64(n as f64 / (batches * BATCH as u64) as f64))
}

/// A peer's part: `echo` or `send`, over `queue` or `socket`, with the two
/// inherited descriptors and the message count.
pub(crate) fn peer_main(args: &[&str]) -> io::Result<()> {
    let [part, tag, a, b, total] = args else {
        return Err(io::Error::other(format!(
            "bad queue peer arguments {args:?}"
        )));
    };
    let total: u64 = total
        .parse()
        .map_err(|_| io::Error::other(format!("bad message count {total:?}")))?;
    // SAFETY: the parent passed these descriptors down for this peer's sole
    // use (one socket is passed twice under one number: taken once).
    let a = unsafe { peer::inherited(a)? };
    match (*part, *tag) {
        ("echo", "queue") => {
            // SAFETY: as above; the second queue's descriptor.
            let b = unsafe { peer::inherited(b)? };
            let mut rx = Consumer::<Msg>::from_fd(a, SCHEMA).map_err(err)?;
            let mut tx = Producer::<Msg>::from_fd(b, SCHEMA).map_err(err)?;
            for i in 0..total {
                let m = rx.pop_timeout(WAIT).map_err(err)?;
                check(&m, &msg(i))?;
                tx.push_timeout(&reply(&m), WAIT).map_err(err)?;
            }
            Ok(())
        }
        ("echo", "socket") => {
            let mut buf = [0u8; MSG_BYTES];
            for i in 0..total {
                read_exact(&a, &mut buf)?;
                let m = from_bytes(&buf);
                check(&m, &msg(i))?;
                write_all(&a, &to_bytes(&reply(&m)))?;
            }
            Ok(())
        }
        ("send", "queue") => {
            let mut tx = Producer::<Msg>::from_fd(a, SCHEMA).map_err(err)?;
            let mut i = 0u64;
            while i < total {
                let deadline = Instant::now() + WAIT;
                let mut spins = 0u32;
                let mut batch = loop {
                    if let Some(batch) = tx.reserve(BATCH).map_err(err)? {
                        break batch;
                    }
                    // Full: spin a little (the consumer is on the other
                    // core), then let it have ours if it shares it.
                    spins += 1;
                    if spins.is_multiple_of(1024) {
                        if Instant::now() > deadline {
                            return Err(io::Error::other("the consumer stopped taking messages"));
                        }
                        std::thread::yield_now();
                    }
                    std::hint::spin_loop();
                };
                while i < total && batch.push(&msg(i)) {
                    i += 1;
                }
                batch.publish();
            }
            Ok(())
        }
        ("send", "socket") => {
            let mut bytes = [0u8; BATCH * MSG_BYTES];
            let mut i = 0u64;
            while i < total {
                for chunk in bytes.chunks_exact_mut(MSG_BYTES) {
                    chunk.copy_from_slice(&to_bytes(&msg(i)));
                    i += 1;
                }
                write_all(&a, &bytes)?;
            }
            Ok(())
        }
        _ => Err(io::Error::other(format!(
            "unknown queue peer part {part} {tag}"
        ))),
    }
}

fn to_bytes(m: &Msg) -> [u8; MSG_BYTES] {
    let mut bytes = [0u8; MSG_BYTES];
    for (chunk, word) in bytes.chunks_exact_mut(8).zip(m) {
        chunk.copy_from_slice(&word.to_ne_bytes());
    }
    bytes
}

fn from_bytes(bytes: &[u8]) -> Msg {
    std::array::from_fn(|k| {
        let mut word = [0u8; 8];
        word.copy_from_slice(&bytes[8 * k..8 * k + 8]);
        u64::from_ne_bytes(word)
    })
}
