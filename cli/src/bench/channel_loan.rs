//! A request built where it travels against one built then copied: the
//! coordinator of a `Raw` channel makes each round's payload either in the
//! request frame itself ([`Build::InLoan`]: `send_with`) or in a private
//! buffer that `send` then copies into the frame ([`Build::ThenCopy`]).
//! Both build the same bytes ([`build`]) every round, so the difference is
//! the copy. The worker is `channel`'s in-place worker: it reads the
//! request in the read-only ring and answers its [`digest`], which the
//! coordinator checks.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant};

use nodeipc_channel::{All, Channel, Coordinator, Raw};

use crate::bench::channel::{ChannelImpl, digest};
use crate::bench::machine::Pinned;
use crate::bench::peer::Peers;

const TIMEOUT: Duration = Duration::from_secs(30);

/// How the coordinator makes a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Build {
    /// Written in the request frame (`Coordinator::send_with`).
    InLoan,
    /// Written in a private buffer, then `send` copies it into the frame.
    ThenCopy,
}

impl Build {
    /// Short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            Build::InLoan => "built in the loan (send_with)",
            Build::ThenCopy => "built, then copied (send)",
        }
    }
}

/// The bytes every payload repeats, block after block: 512 words of a
/// fixed pattern. Building a payload streams them out (from L1) as a
/// producer streams its output, at store speed in every build profile.
const TEMPLATE: [u8; 4096] = {
    let mut t = [0u8; 4096];
    let mut j = 0;
    while j < 512 {
        let w = (j as u64 + 1)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .to_le_bytes();
        let mut k = 0;
        while k < 8 {
            t[j * 8 + k] = w[k];
            k += 1;
        }
        j += 1;
    }
    t
};

/// Round `round`'s first bytes: the round in word 0 (so a round's
/// [`digest`] is round 0's XOR the round, see [`Expected`]); a payload
/// shorter than a word gets the round's low byte mixed into each byte.
fn stamp(round: u64, len: usize) -> [u8; 8] {
    if len >= 8 {
        return round.to_le_bytes();
    }
    let mut first = [0; 8];
    for (j, b) in first.iter_mut().enumerate() {
        *b = TEMPLATE[j] ^ round as u8;
    }
    first
}

/// Writes round `round`'s payload into `out`.
pub fn build(round: u64, out: &mut [u8]) {
    for block in out.chunks_mut(TEMPLATE.len()) {
        block.copy_from_slice(&TEMPLATE[..block.len()]);
    }
    let (len, head) = (out.len(), out.len().min(8));
    out[..head].copy_from_slice(&stamp(round, len)[..head]);
}

/// [`build`] into memory not yet initialised (a loaned sample of another
/// library): every byte of `out` is written.
pub fn build_uninit(round: u64, out: &mut [MaybeUninit<u8>]) {
    let len = out.len();
    for block in out.chunks_mut(TEMPLATE.len()) {
        for (b, &v) in block.iter_mut().zip(&TEMPLATE) {
            b.write(v);
        }
    }
    for (b, v) in out.iter_mut().zip(stamp(round, len)) {
        b.write(v);
    }
}

/// The digest a worker must answer for each round's payload of `len`
/// bytes, without reading it again.
#[derive(Clone, Copy, Debug)]
pub struct Expected {
    len: usize,
    /// The digest of round 0's payload.
    base: u64,
}

impl Expected {
    /// For payloads of `len` bytes.
    pub fn new(len: usize) -> Expected {
        let mut zero = vec![0; len];
        build(0, &mut zero);
        Expected {
            len,
            base: digest(&zero),
        }
    }

    /// Round `round`'s digest.
    pub fn of(&self, round: u64) -> u64 {
        if self.len >= 8 {
            // Word 0 is the round: it enters the XOR once.
            self.base ^ round
        } else {
            let mut bytes = vec![0; self.len];
            build(round, &mut bytes);
            digest(&bytes)
        }
    }
}

/// A `Raw` coordinator and one in-place worker process (pinned to core 1,
/// this thread to core 0, where there are two cores).
pub struct LoanSession {
    build: Build,
    coordinator: Coordinator<Raw, Raw>,
    staged: Vec<u8>,
    expected: Expected,
    round: u64,
    peers: Peers,
    _pinned: Option<Pinned>,
}

impl LoanSession {
    /// Starts a session for `rounds` round trips of `payload`-byte requests
    /// made by `build`; with `poll`, both sides busy-poll before they sleep
    /// (as `ChannelImpl::NodeipcInPlacePoll`).
    ///
    /// # Errors
    /// The channel or the worker failing to start.
    pub fn start(build: Build, payload: usize, poll: bool, rounds: u64) -> io::Result<LoanSession> {
        let which = if poll {
            ChannelImpl::NodeipcInPlacePoll
        } else {
            ChannelImpl::NodeipcInPlace
        };
        let tag = format!(
            "/nodeipc-bench-loan-{}-{:x}",
            std::process::id(),
            crate::bench::nonce()
        );
        let pin = crate::bench::machine::cores() >= 2;
        let coordinator = Channel::anonymous(&tag)
            .workers(1)
            .request_capacity(payload + 64)
            .response_slot_size(256)
            .poll(which.poll())
            .timeout(TIMEOUT)
            .raw()
            .create()?;
        let mut peers = Peers::default();
        let request = coordinator.request_fd_read_only()?;
        let response = coordinator.response_fd();
        let role = format!(
            "chan-worker {} {tag} 0 {rounds} {} {}",
            which.name(),
            request.as_raw_fd(),
            response.as_raw_fd()
        );
        peers.spawn(&role, &[request.as_fd(), response], pin.then_some(1))?;
        drop(request);
        coordinator.wait_for_workers(TIMEOUT)?;
        Ok(LoanSession {
            build,
            coordinator,
            staged: vec![0; payload],
            expected: Expected::new(payload),
            round: 0,
            peers,
            _pinned: if pin { Some(Pinned::to(0)?) } else { None },
        })
    }

    /// `rounds` round trips; the time they took.
    ///
    /// # Errors
    /// The channel failing, or a worker answering a wrong digest.
    pub fn run(&mut self, rounds: u64) -> io::Result<Duration> {
        let start = Instant::now();
        for _ in 0..rounds {
            let round = self.round;
            match self.build {
                Build::InLoan => {
                    let len = self.staged.len();
                    self.coordinator
                        .send_with(len, |frame| build(round, frame))?;
                }
                Build::ThenCopy => {
                    build(round, &mut self.staged);
                    self.coordinator.send(&self.staged)?;
                }
            }
            let expected = self.expected.of(round).to_le_bytes();
            for (rank, answer) in self.coordinator.recv(All)?.iter() {
                if answer != expected {
                    return Err(io::Error::other(format!(
                        "worker {rank} answered a wrong digest in round {round}"
                    )));
                }
            }
            self.round += 1;
        }
        Ok(start.elapsed())
    }

    /// Waits for the worker to finish its rounds.
    ///
    /// # Errors
    /// The worker failed.
    pub fn finish(self) -> io::Result<()> {
        let LoanSession {
            peers, coordinator, ..
        } = self;
        let result = peers.finish(TIMEOUT);
        drop(coordinator);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_expected_digest_is_the_payloads_for_every_length() {
        for len in [0, 1, 7, 8, 9, 64, 1000, 4096 + 3] {
            let expected = Expected::new(len);
            for round in [0, 1, 2, 77, u64::MAX] {
                let mut bytes = vec![0; len];
                build(round, &mut bytes);
                assert_eq!(
                    expected.of(round),
                    digest(&bytes),
                    "len {len} round {round}"
                );
            }
        }
    }
}
