//! Who is at the other end of a Unix socket.

use std::os::fd::AsFd;

use crate::{Error, Result};

/// The process at the other end of a connected Unix socket, as the kernel
/// recorded it when the connection was made (`SO_PEERCRED`): it cannot lie
/// about these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Credentials {
    /// Its pid (in our pid namespace; 0 if it lives in one we cannot see).
    pub pid: u32,
    /// Its effective uid.
    pub uid: u32,
    /// Its effective gid.
    pub gid: u32,
}

/// The credentials of the peer of a connected Unix socket.
///
/// Performs `getsockopt(socket, SOL_SOCKET, SO_PEERCRED)`.
///
/// # Errors
/// [`Error::Io`], e.g. `ENOTCONN` on an unconnected socket.
///
/// # References
/// - [Linux `unix(7)`, `SO_PEERCRED`](https://man7.org/linux/man-pages/man7/unix.7.html)
#[doc(alias = "SO_PEERCRED")]
pub fn peer_credentials(socket: impl AsFd) -> Result<Credentials> {
    let cred = rustix::net::sockopt::socket_peercred(socket)
        .map_err(|e| Error::io("getsockopt(SO_PEERCRED)", e))?;
    Ok(Credentials {
        pid: cred.pid.as_raw_nonzero().get() as u32,
        uid: cred.uid.as_raw(),
        gid: cred.gid.as_raw(),
    })
}

/// The peer's credentials if it runs as our effective uid or as one of
/// `also_allowed`; a refusal naming its pid and uid otherwise.
///
/// # Errors
/// [`Error::PeerRefused`]; [`Error::Io`] as [`peer_credentials`].
///
/// # Examples
/// ```
/// let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
/// let peer = nodeipc_fdpass::require_peer_uid(&ours, &[])?;
/// assert_eq!(peer.pid, std::process::id());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn require_peer_uid(socket: impl AsFd, also_allowed: &[u32]) -> Result<Credentials> {
    let peer = peer_credentials(socket)?;
    let ours = rustix::process::geteuid().as_raw();
    if peer.uid == ours || also_allowed.contains(&peer.uid) {
        Ok(peer)
    } else {
        Err(Error::PeerRefused {
            pid: peer.pid,
            uid: peer.uid,
            expected_uid: ours,
        })
    }
}
