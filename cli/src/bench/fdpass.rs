//! Descriptor passing between two processes: nodeipc-fdpass beside the same
//! system calls written the simplest way (libc `sendmsg`/`recvmsg` with a
//! hand-built control message, raw `pidfd_getfd`).

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use nodeipc_fdpass::{ForeignFd, Pidfd};
use nodeipc_shm::Region;

use crate::bench::peer::{self, Peers, read_exact};

/// Which implementation moves the descriptors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Impl {
    /// nodeipc-fdpass.
    Ours,
    /// libc calls written out by hand.
    Bare,
}

impl Impl {
    /// Short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            Impl::Ours => "nodeipc",
            Impl::Bare => "bare",
        }
    }

    fn parse(s: &str) -> io::Result<Impl> {
        match s {
            "nodeipc" => Ok(Impl::Ours),
            "bare" => Ok(Impl::Bare),
            _ => Err(io::Error::other(format!("unknown implementation {s:?}"))),
        }
    }
}

/// `messages` messages of `per_message` descriptors each sent to a peer
/// process over a Unix stream socket; the peer receives them, closes them
/// and acknowledges every message with one byte. Returns the time for all.
///
/// # Errors
/// Set-up failures, or a peer that failed.
pub fn scm_rights(which: Impl, per_message: usize, messages: u64) -> io::Result<Duration> {
    let (ours, theirs) = peer::stream_pair()?;
    let files: Vec<Region> = (0..per_message)
        .map(|_| Region::anonymous(4096))
        .collect::<Result<_, _>>()?;
    let fds: Vec<BorrowedFd<'_>> = files.iter().map(|r| r.as_fd()).collect();
    let mut peers = Peers::default();
    let role = format!(
        "scm-sink {} {per_message} {messages} {}",
        theirs.as_raw_fd(),
        which.name()
    );
    peers.spawn(&role, &[theirs.as_fd()], None)?;
    drop(theirs);
    let mut ack = [0u8; 1];
    let start = Instant::now();
    for _ in 0..messages {
        match which {
            Impl::Ours => {
                nodeipc_fdpass::send_fds(&ours, b"f", &fds)?;
            }
            Impl::Bare => bare_send(ours.as_raw_fd(), &fds)?,
        }
        read_exact(&ours, &mut ack)?;
    }
    let elapsed = start.elapsed();
    peers.finish(Duration::from_secs(10))?;
    Ok(elapsed)
}

/// `count` copies of one descriptor of a peer process taken with
/// `pidfd_getfd`, each closed at once. Returns the time for all.
///
/// # Errors
/// Set-up failures, `pidfd_getfd` refused, or a peer that failed.
pub fn pidfd_getfd(which: Impl, count: u64) -> io::Result<Duration> {
    let region = Region::anonymous(4096)?;
    let (hold_read, hold_write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let mut peers = Peers::default();
    // The peer keeps the region's descriptor under the same number until the pipe closes.
    let target = region.as_fd().as_raw_fd();
    let role = format!("fd-holder {target} {}", hold_read.as_raw_fd());
    peers.spawn(&role, &[region.as_fd(), hold_read.as_fd()], None)?;
    drop(hold_read);
    let pid = peers.pids()[0];
    let pidfd = Pidfd::open(pid)?;
    let start = Instant::now();
    for _ in 0..count {
        match which {
            Impl::Ours => drop(pidfd.get_fd(ForeignFd::new(target))?),
            Impl::Bare => {
                // SAFETY: pidfd_getfd takes (int pidfd, int fd, unsigned flags) and
                // returns a new descriptor or -1.
                let fd = unsafe {
                    libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_fd().as_raw_fd(), target, 0)
                };
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                // SAFETY: `fd` was just returned by the kernel and is ours alone.
                drop(unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
            }
        }
    }
    let elapsed = start.elapsed();
    drop(hold_write);
    peers.finish(Duration::from_secs(10))?;
    Ok(elapsed)
}

/// A peer's side: `scm-sink SOCKET PER_MESSAGE MESSAGES IMPL` or
/// `fd-holder FD PIPE`.
pub(crate) fn peer_main(role: &str, args: &[&str]) -> io::Result<()> {
    match (role, args) {
        ("scm-sink", [socket, per_message, messages, which]) => {
            // SAFETY: the parent passed the socket down for our sole use.
            let socket = unsafe { peer::inherited(socket)? };
            let per_message: usize = per_message.parse().map_err(io::Error::other)?;
            let messages: u64 = messages.parse().map_err(io::Error::other)?;
            let which = Impl::parse(which)?;
            let mut byte = [0u8; 1];
            for _ in 0..messages {
                let count = match which {
                    Impl::Ours => {
                        nodeipc_fdpass::recv_fds_exact(&socket, &mut byte, per_message)?.len()
                    }
                    Impl::Bare => bare_recv(socket.as_raw_fd(), &mut byte, per_message)?,
                };
                if count != per_message {
                    return Err(io::Error::other(format!(
                        "received {count} descriptors, expected {per_message}"
                    )));
                }
                rustix::io::write(&socket, b"k")?;
            }
            Ok(())
        }
        ("fd-holder", [fd, pipe]) => {
            // SAFETY: both were passed down for our sole use.
            let _held = unsafe { peer::inherited(fd)? };
            // SAFETY: as above.
            let pipe = unsafe { peer::inherited(pipe)? };
            let mut byte = [0u8; 1];
            while rustix::io::read(&pipe, &mut byte)? != 0 {}
            Ok(())
        }
        _ => Err(io::Error::other(format!(
            "bad fdpass peer arguments {role} {args:?}"
        ))),
    }
}

/// An `iovec` over one byte.
fn one_byte(byte: &mut [u8; 1]) -> libc::iovec {
    libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    }
}

/// A `msghdr` for the one `iov` and `len` bytes of control buffer at
/// `control`; both must outlive its use.
fn header(iov: &mut libc::iovec, control: *mut libc::c_void, len: usize) -> libc::msghdr {
    // SAFETY: msghdr is plain data; all-zeros is a valid empty header.
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    header.msg_iov = iov;
    header.msg_iovlen = 1;
    header.msg_control = control;
    header.msg_controllen = len;
    header
}

/// `sendmsg` with one byte and an `SCM_RIGHTS` control message, by hand.
fn bare_send(socket: RawFd, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let payload_len = size_of_val(fds);
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(payload_len as u32) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut byte = *b"f";
    let mut iov = one_byte(&mut byte);
    let header = header(&mut iov, control.as_mut_ptr().cast(), space);
    // SAFETY: the header points at a control buffer of CMSG_SPACE bytes, so
    // CMSG_FIRSTHDR yields a writable cmsghdr with room for the descriptors.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&header);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(payload_len as u32) as usize;
        let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
        for (i, fd) in fds.iter().enumerate() {
            data.add(i).write_unaligned(fd.as_raw_fd());
        }
    }
    // SAFETY: `header` and everything it points at live across the call.
    if unsafe { libc::sendmsg(socket, &header, libc::MSG_NOSIGNAL) } != 1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `recvmsg` of one byte and up to `max` descriptors, by hand; closes them
/// and returns how many arrived.
fn bare_recv(socket: RawFd, byte: &mut [u8; 1], max: usize) -> io::Result<usize> {
    let mut control = [MaybeUninit::<u64>::uninit(); 160];
    let mut iov = one_byte(byte);
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE((max * size_of::<RawFd>()) as u32) } as usize;
    let mut header = header(&mut iov, control.as_mut_ptr().cast(), space);
    // SAFETY: `header` points at live buffers of the sizes it states.
    if unsafe { libc::recvmsg(socket, &mut header, libc::MSG_CMSG_CLOEXEC) } != 1 {
        return Err(io::Error::last_os_error());
    }
    let mut count = 0;
    // SAFETY: the kernel filled the control buffer; CMSG_FIRSTHDR/NXTHDR walk
    // it within msg_controllen and CMSG_DATA points at each message's data.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&header);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let n = ((*cmsg).cmsg_len - libc::CMSG_LEN(0) as usize) / size_of::<RawFd>();
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                for i in 0..n {
                    drop(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
                count += n;
            }
            cmsg = libc::CMSG_NXTHDR(&header, cmsg);
        }
    }
    Ok(count)
}
