//! Hostile-input drivers: each takes arbitrary bytes, plays the process that
//! wrote them (into a frame, a shared region, a socket), runs the decoder
//! that reads them, and panics only when a contract is broken — a decoder
//! panicked, read outside its buffer (Rust's bounds checks turn that into a
//! panic too), or returned an error that does not say what was wrong.
//!
//! The same code runs twice: as property tests on stable Rust
//! (`integration-tests/tests/it/fuzz_props.rs`, run by CI) and as cargo-fuzz
//! targets (`fuzz/fuzz_targets/*.rs`, whose crate depends on this one).

mod channel;
mod decode;
mod handshake;
mod monitor;
mod pool;
mod queue;
mod vault;

use nodeipc_fdpass::Credentials;

pub use channel::{REQUEST_FIELDS, RESPONSE_FIELDS, channel_headers, channel_slots};
pub use decode::{fd_handle, frame};
pub use handshake::{FakeServer, logon, logon_reply};
pub use monitor::{MonitorFixture, monitor_stream};
pub use pool::pool_region;
pub use queue::queue_region;
pub use vault::{vault, vault_layout};

/// Reads the fuzz input as a stream of small decisions; past its end every
/// read gives zeros, so any input is a complete script.
struct Script<'a> {
    data: &'a [u8],
}

impl<'a> Script<'a> {
    fn new(data: &'a [u8]) -> Script<'a> {
        Script { data }
    }

    /// The next byte.
    fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    /// The next two bytes, little-endian.
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }

    /// The next four bytes, little-endian.
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }

    /// The next eight bytes, little-endian.
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(std::array::from_fn(|_| self.byte()))
    }

    /// The next `n` bytes, fewer where the script ends first.
    fn take(&mut self, n: usize) -> &'a [u8] {
        let (taken, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        taken
    }

    /// Up to `max` bytes, as many as the next byte says.
    fn bytes(&mut self, max: usize) -> &'a [u8] {
        let want = usize::from(self.byte()).min(max);
        self.take(want)
    }

    /// Everything left.
    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }

    /// Whether the script is over.
    fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

/// A name no one else uses, under the prefix the tests' leak check knows.
fn fresh_name(tag: &str) -> String {
    nodeipc_testkit::unique_name(tag)
}

/// This process, as a peer's credentials name it.
fn us() -> Credentials {
    Credentials {
        pid: std::process::id(),
        uid: rustix::process::geteuid().as_raw(),
        gid: rustix::process::getegid().as_raw(),
    }
}

/// This process's start time, as a live rank's table entry holds it.
fn our_start_time() -> u64 {
    nodeipc_fdpass::process_start_time(std::process::id()).expect("our own start time")
}
