//! Who is at the other end of a Unix socket.

use std::os::fd::{AsFd, AsRawFd};

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
/// Performs `getsockopt(socket, SOL_SOCKET, SO_PEERCRED)`. A peer in a pid
/// namespace we cannot see (another container, say) has pid 0 here; its uid
/// and gid are still the kernel's word.
///
/// # Errors
/// [`Error::Io`], e.g. `ENOTCONN` on an unconnected socket.
///
/// # References
/// - [Linux `unix(7)`, `SO_PEERCRED`](https://man7.org/linux/man-pages/man7/unix.7.html)
#[doc(alias = "SO_PEERCRED")]
pub fn peer_credentials(socket: impl AsFd) -> Result<Credentials> {
    // Not `rustix::net::sockopt::socket_peercred`: its `UCred` holds the pid
    // as a non-zero `Pid`, so the kernel's pid 0 for a peer in another pid
    // namespace is no valid value there (it came back as an error with
    // errno 0, which stopped a monitor serving).
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt(2) writes at most `len` bytes (the size of `cred`, a
    // struct of plain integers, any bit pattern valid) and updates `len`;
    // the descriptor is borrowed for the duration of the call.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_fd().as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(Error::io(
            "getsockopt(SO_PEERCRED)",
            std::io::Error::last_os_error(),
        ));
    }
    if len as usize != size_of::<libc::ucred>() {
        return Err(Error::io(
            "getsockopt(SO_PEERCRED)",
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{len} bytes of credentials"),
            ),
        ));
    }
    Ok(Credentials {
        pid: u32::try_from(cred.pid).unwrap_or(0),
        uid: cred.uid,
        gid: cred.gid,
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
