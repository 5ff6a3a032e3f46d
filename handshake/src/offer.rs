//! [`Offer`]: what a server hands one accepted client.

use std::os::fd::OwnedFd;

use nodeipc_proto::handshake::{Accept, FdKind, PROTOCOL_VERSION, PassedFd, Reject, RejectCode};

/// What the server hands an accepted client: the descriptors, described one
/// by one in `Accept.fds`, in the same order.
///
/// Build one with [`Offer::new`] and [`Offer::fd`], or fill the fields
/// yourself (the server refuses to send an offer whose counts differ).
#[derive(Debug, Default)]
pub struct Offer {
    /// The `Accept` message; its `fds` must describe `descriptors` in order.
    pub accept: Accept,
    /// The descriptors sent with it.
    pub descriptors: Vec<OwnedFd>,
}

impl Offer {
    /// An empty accept of this protocol version.
    pub fn new() -> Offer {
        Offer {
            accept: Accept {
                protocol_version: PROTOCOL_VERSION,
                ..Accept::default()
            },
            descriptors: Vec::new(),
        }
    }

    /// Adds `fd` under `role`; `size` is what the client may map (0 for a
    /// descriptor that is not a region: nothing to check).
    #[must_use]
    pub fn fd(mut self, kind: FdKind, role: impl Into<String>, size: u64, fd: OwnedFd) -> Offer {
        self.accept.fds.push(PassedFd {
            kind: kind as i32,
            size,
            role: role.into(),
        });
        self.descriptors.push(fd);
        self
    }

    /// Sets the answer in the server's own schema (raw bytes).
    #[must_use]
    pub fn payload(mut self, payload: impl Into<Vec<u8>>) -> Offer {
        self.accept.payload = payload.into();
        self
    }
}

/// The server's answer to one logon.
pub type Decision = std::result::Result<Offer, Reject>;

/// A rejection with `code` and a reason for people.
pub fn reject(code: RejectCode, reason: impl Into<String>) -> Reject {
    Reject {
        code: code as i32,
        reason: reason.into(),
    }
}
