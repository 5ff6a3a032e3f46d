//! The second process of a sample: this executable again, told its part by
//! [`PEER_ENV`], inheriting the regions' descriptors, pinned to core 1 —
//! spawned, watched and reaped by the benchmarks' own [`Peers`].

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::time::Duration;

use nodeipc_cli::bench::{PEER_ENV, Peers};

/// The part this process plays, if it is a peer.
pub(crate) fn role() -> Option<String> {
    std::env::var(PEER_ENV).ok()
}

/// A peer, killed and reaped if the sample ends early.
pub(crate) struct Peer(Peers);

impl Peer {
    /// Spawns the peer playing `spec`, inheriting `fds` under their numbers.
    pub(crate) fn spawn(spec: &str, fds: &[BorrowedFd<'_>], pin: bool) -> io::Result<Peer> {
        let mut peers = Peers::default();
        peers.spawn(spec, fds, pin.then_some(1))?;
        Ok(Peer(peers))
    }

    /// Waits (bounded) for the peer to exit successfully.
    pub(crate) fn finish(self) -> io::Result<()> {
        self.0.finish(Duration::from_secs(60))
    }
}

/// Takes a descriptor inherited under `number`.
pub(crate) fn inherited(number: &str) -> io::Result<OwnedFd> {
    // SAFETY: the parent passed `number` down for this peer's sole use (it
    // is named in the peer's spec and nowhere else), and nothing else in
    // this process owns it.
    unsafe { nodeipc_cli::bench::inherited(number) }
}
