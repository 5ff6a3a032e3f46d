//! Who is at the other end of a Unix socket: its credentials
//! (`SO_PEERCRED`) and a pidfd of it (`SO_PEERPIDFD`).

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use crate::{Error, Pidfd, Result};

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

/// `SO_PEERPIDFD`'s option number (Linux 6.5, `<asm-generic/socket.h>`):
/// 77 on the architectures whose socket options are the generic ones; the
/// libc crate does not export it. Elsewhere (mips, sparc, ...) unknown here,
/// and the call answers as an older kernel would.
const SO_PEERPIDFD: Option<libc::c_int> = if cfg!(any(
    target_arch = "x86_64",
    target_arch = "x86",
    target_arch = "aarch64",
    target_arch = "arm",
    target_arch = "riscv64",
    target_arch = "loongarch64",
    target_arch = "s390x"
)) {
    Some(77)
} else {
    None
};

/// A pidfd of the peer of a connected Unix socket: the very process that
/// connected (or listened), which no later process can take the place of,
/// unlike its pid.
///
/// Performs `getsockopt(socket, SOL_SOCKET, SO_PEERPIDFD)` (Linux 6.5); the
/// returned [`Pidfd`]'s [`pid`](Pidfd::pid) is the peer's `SO_PEERCRED` pid
/// (0 for a peer in a pid namespace we cannot see). On an older kernel, a
/// caller that wants a pidfd all the same opens one from that pid
/// ([`Pidfd::open`]) and keeps the socket's end of file as the authority,
/// since the pid may have been reused by then.
///
/// # Errors
/// [`Error::Io`] keeping the errno: `ENOPROTOOPT` before Linux 6.5 (or on an
/// architecture whose option number this crate does not know), `ENOTCONN`
/// on an unconnected socket; as [`peer_credentials`] for the pid.
///
/// # Examples
/// ```
/// let (ours, _theirs) = std::os::unix::net::UnixStream::pair()?;
/// match nodeipc_fdpass::peer_pidfd(&ours) {
///     Ok(peer) => assert!(peer.is_alive()), // our own process, here
///     Err(e) => println!("no SO_PEERPIDFD here: {e}"),
/// }
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// # References
/// - [Linux `unix(7)`, `SO_PEERPIDFD`](https://man7.org/linux/man-pages/man7/unix.7.html)
/// - [Linux `pidfd_open(2)`](https://man7.org/linux/man-pages/man2/pidfd_open.2.html)
#[doc(alias = "SO_PEERPIDFD")]
pub fn peer_pidfd(socket: impl AsFd) -> Result<Pidfd> {
    const CALL: &str = "getsockopt(SO_PEERPIDFD)";
    let socket = socket.as_fd();
    let Some(option) = SO_PEERPIDFD else {
        return Err(Error::io(
            CALL,
            std::io::Error::from_raw_os_error(libc::ENOPROTOOPT),
        ));
    };
    let mut fd: libc::c_int = -1;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt(2) writes at most `len` bytes into `fd`, a local
    // of this thread that no other thread or process can reach; the socket
    // is borrowed for the duration of the call.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (&raw mut fd).cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(Error::io(CALL, std::io::Error::last_os_error()));
    }
    if fd < 0 || len as usize != size_of::<libc::c_int>() {
        return Err(Error::io(
            CALL,
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{len} bytes, descriptor {fd}"),
            ),
        ));
    }
    // SAFETY: the kernel just created `fd` for us (a new pidfd); nothing
    // else in this process knows it, so it is owned here alone.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let pid = peer_credentials(socket)?.pid;
    Ok(Pidfd::from_owned(fd, pid))
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
