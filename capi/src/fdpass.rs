//! Descriptors across processes for C: `SCM_RIGHTS`, peer credentials,
//! pidfds, and `FdHandle`s (24 bytes, or a bare `{pid, fd}` pair).

use std::ffi::c_int;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd};

use nodeipc_fdpass::{FdHandle, ForeignFd, Pidfd, Signal};

use super::args::{self, Handle, bytes, bytes_mut, handle, handle_type, millis, out};
use super::status::{Failure, Outcome, guard, nodeipc_status};

/// Bytes of an exported `FdHandle` (`nodeipc_fd_export`).
pub const NODEIPC_FD_HANDLE_SIZE: usize = 24;
const _: () = assert!(NODEIPC_FD_HANDLE_SIZE == FdHandle::SIZE);

/// Who is at the other end of a connected Unix socket (`SO_PEERCRED`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct nodeipc_credentials {
    /// Its pid (0 when it lives in a pid namespace we cannot see).
    pub pid: u32,
    /// Its effective uid.
    pub uid: u32,
    /// Its effective gid.
    pub gid: u32,
}

/// A pid from C: 1..=i32::MAX.
fn pid_arg(pid: u32) -> Outcome<u32> {
    if pid == 0 || pid > i32::MAX as u32 {
        return Err(Failure::invalid(format!("{pid} is not a valid pid")));
    }
    Ok(pid)
}

/// A caller's descriptor, borrowed for the call: a negative one is an
/// invalid argument, one that is not open `NODEIPC_ERR_NOT_FOUND` with
/// errno `EBADF` (before any call that would not notice, as an export).
pub(crate) fn borrow(fd: c_int, what: &str) -> Outcome<BorrowedFd<'static>> {
    if fd < 0 {
        return Err(Failure::invalid(format!("{what} {fd} is negative")));
    }
    // SAFETY: the descriptor is the caller's, used only during the call
    // that got it, which it keeps open (the C API's contract).
    unsafe { nodeipc_fdpass::borrow_open(fd) }
        .map_err(|e| Failure::from_error(super::status::NODEIPC_ERR_NOT_FOUND, &e).context(what))
}

/// Sends `len` bytes of `payload` (at least 1) with `nfds` descriptors over
/// a connected Unix socket (`SCM_RIGHTS`). The descriptors stay the
/// caller's.
///
/// # Safety
/// `payload` points at `len` readable bytes; `fds` at `nfds` ints.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_send_fds(
    socket: c_int,
    payload: *const u8,
    len: usize,
    fds: *const c_int,
    nfds: usize,
) -> nodeipc_status {
    guard("nodeipc_send_fds", || {
        let socket = borrow(socket, "socket")?;
        // SAFETY: the caller's contract above.
        let payload = unsafe { bytes(payload, len, "payload")? };
        let raw = ints(fds, nfds, "fds")?;
        let fds = raw
            .iter()
            .map(|&fd| borrow(fd, "descriptor"))
            .collect::<Outcome<Vec<_>>>()?;
        nodeipc_fdpass::send_fds(socket, payload, &fds)?;
        Ok(())
    })
}

fn ints<'a>(p: *const c_int, n: usize, what: &str) -> Outcome<&'a [c_int]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Failure::invalid(format!("{what} is null with count {n}")));
    }
    if n > nodeipc_fdpass::SCM_MAX_FD {
        return Err(Failure::new(
            super::status::NODEIPC_ERR_TOO_LARGE,
            format!("{n} descriptors; at most {}", nodeipc_fdpass::SCM_MAX_FD),
        ));
    }
    // SAFETY: non-null, and the caller promised `n` readable ints (n is small,
    // checked above).
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// Receives one message into `buf` (`*len` bytes arrive; 0 on a stream
/// whose peer closed) with up to `max_fds` descriptors into `fds` (`*nfds`
/// arrive, close-on-exec, now the caller's to close).
///
/// # Safety
/// `buf` points at `cap` writable bytes, `fds` at `max_fds` writable ints;
/// `len` and `nfds` at writable values.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_recv_fds(
    socket: c_int,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
    fds: *mut c_int,
    max_fds: usize,
    nfds: *mut usize,
) -> nodeipc_status {
    guard("nodeipc_recv_fds", || {
        let socket = borrow(socket, "socket")?;
        // SAFETY: the caller's contract above.
        let (buf, len, nfds) = unsafe {
            (
                bytes_mut(buf, cap, "buf")?,
                out(len, "len")?,
                out(nfds, "nfds")?,
            )
        };
        if max_fds > 0 && fds.is_null() {
            return Err(Failure::invalid(format!(
                "fds is null with max_fds {max_fds}"
            )));
        }
        let max_fds = max_fds.min(nodeipc_fdpass::SCM_MAX_FD);
        let got = nodeipc_fdpass::recv_fds(socket, buf, max_fds)?;
        *len = got.len;
        *nfds = got.fds.len();
        for (i, fd) in got.fds.into_iter().enumerate() {
            // SAFETY: i < max_fds, within the caller's `fds` array.
            unsafe { fds.add(i).write(fd.into_raw_fd()) };
        }
        Ok(())
    })
}

/// The credentials of a connected Unix socket's peer.
///
/// # Safety
/// `creds` points at a writable `nodeipc_credentials`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_peer_credentials(
    socket: c_int,
    creds: *mut nodeipc_credentials,
) -> nodeipc_status {
    guard("nodeipc_peer_credentials", || {
        // SAFETY: the caller's contract above.
        let creds = unsafe { out(creds, "creds")? };
        let c = nodeipc_fdpass::peer_credentials(borrow(socket, "socket")?)?;
        *creds = nodeipc_credentials {
            pid: c.pid,
            uid: c.uid,
            gid: c.gid,
        };
        Ok(())
    })
}

/// Exports one of this process's descriptors as the 24 bytes of an
/// `FdHandle` (pid, fd, start time): any channel can carry them. Keep `fd`
/// open until every importer is done.
///
/// # Safety
/// `handle_out` points at `NODEIPC_FD_HANDLE_SIZE` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_fd_export(fd: c_int, handle_out: *mut u8) -> nodeipc_status {
    guard("nodeipc_fd_export", || {
        // SAFETY: the caller's contract above.
        let dst = unsafe { bytes_mut(handle_out, NODEIPC_FD_HANDLE_SIZE, "handle_out")? };
        dst.copy_from_slice(&FdHandle::export(&borrow(fd, "fd")?)?.to_bytes());
        Ok(())
    })
}

/// Imports an exported `FdHandle` (`len` must be `NODEIPC_FD_HANDLE_SIZE`):
/// refuses a process whose start time changed (a recycled pid), then copies
/// its descriptor (`pidfd_getfd`) into `*fd`, close-on-exec, the caller's.
///
/// # Safety
/// `handle_bytes` points at `len` readable bytes; `fd` at a writable int.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_fd_import(
    handle_bytes: *const u8,
    len: usize,
    fd: *mut c_int,
) -> nodeipc_status {
    guard("nodeipc_fd_import", || {
        // SAFETY: the caller's contract above.
        let (raw, fd) = unsafe { (bytes(handle_bytes, len, "handle")?, out(fd, "fd")?) };
        *fd = FdHandle::from_bytes(raw)?.import()?.into_raw_fd();
        Ok(())
    })
}

/// Imports a bare `{pid, fd}` pair (what Level Zero programs exchange):
/// `pidfd_open(pid)` then `pidfd_getfd`. Without a start time, a pid that
/// was recycled before the open is not detected: prefer
/// `nodeipc_fd_import` when the exporter can send 24 bytes.
///
/// # Safety
/// `fd` points at a writable int.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_fd_import_pid_fd(
    pid: u32,
    remote_fd: c_int,
    fd: *mut c_int,
) -> nodeipc_status {
    guard("nodeipc_fd_import_pid_fd", || {
        // SAFETY: the caller's contract above.
        let fd = unsafe { out(fd, "fd")? };
        if remote_fd < 0 {
            return Err(Failure::invalid(format!(
                "remote descriptor {remote_fd} is negative"
            )));
        }
        *fd = Pidfd::open(pid_arg(pid)?)?
            .get_fd(ForeignFd::new(remote_fd))?
            .into_raw_fd();
        Ok(())
    })
}

/// A process named by a descriptor (pidfd): never confused with a later
/// process that got its pid. One thread at a time, or several for
/// `nodeipc_pidfd_send_signal`/`_is_alive`/`_fd` only.
pub struct nodeipc_pidfd {
    magic: u64,
    /// The fork generation it was made in: a forked child may only free it.
    born: nodeipc_fdpass::ForkGeneration,
    pidfd: Pidfd,
}

handle_type!(nodeipc_pidfd, 0x4e49_5049_4446_4421);

/// Opens a pidfd for `pid`.
///
/// # Safety
/// `out_pidfd` points at a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_pidfd_open(
    pid: u32,
    out_pidfd: *mut *mut nodeipc_pidfd,
) -> nodeipc_status {
    guard("nodeipc_pidfd_open", || {
        // SAFETY: the caller's contract above.
        let slot = unsafe { out(out_pidfd, "out_pidfd")? };
        let pidfd = Pidfd::open(pid_arg(pid)?)?;
        args::publish(
            nodeipc_pidfd {
                magic: nodeipc_pidfd::MAGIC,
                born: nodeipc_fdpass::ForkGeneration::current(),
                pidfd,
            },
            slot,
        );
        Ok(())
    })
}

/// Sends signal `signal` (`SIGTERM`, …) to the process.
///
/// # Safety
/// `pidfd` is a live pidfd handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_pidfd_send_signal(
    pidfd: *const nodeipc_pidfd,
    signal: c_int,
) -> nodeipc_status {
    guard("nodeipc_pidfd_send_signal", || {
        // SAFETY: the caller's contract above.
        let p = unsafe { handle(pidfd)? };
        let sig = Signal::from_named_raw(signal)
            .ok_or_else(|| Failure::invalid(format!("{signal} is not a signal number")))?;
        p.pidfd.send_signal(sig)?;
        Ok(())
    })
}

/// Copies descriptor `target_fd` of the process into `*fd` (`pidfd_getfd`:
/// needs ptrace rights over it).
///
/// # Safety
/// `pidfd` is a live pidfd handle; `fd` points at a writable int.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_pidfd_get_fd(
    pidfd: *const nodeipc_pidfd,
    target_fd: c_int,
    fd: *mut c_int,
) -> nodeipc_status {
    guard("nodeipc_pidfd_get_fd", || {
        // SAFETY: the caller's contract above.
        let (p, fd) = unsafe { (handle(pidfd)?, out(fd, "fd")?) };
        if target_fd < 0 {
            return Err(Failure::invalid(format!(
                "target descriptor {target_fd} is negative"
            )));
        }
        *fd = p.pidfd.get_fd(ForeignFd::new(target_fd))?.into_raw_fd();
        Ok(())
    })
}

/// Waits up to `timeout_ms` (negative: forever) for the process to exit;
/// `*exited` says whether it did.
///
/// # Safety
/// `pidfd` is a live pidfd handle; `exited` points at a writable bool.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_pidfd_wait_exit(
    pidfd: *const nodeipc_pidfd,
    timeout_ms: i64,
    exited: *mut bool,
) -> nodeipc_status {
    guard("nodeipc_pidfd_wait_exit", || {
        // SAFETY: the caller's contract above.
        let (p, exited) = unsafe { (handle(pidfd)?, out(exited, "exited")?) };
        *exited = p.pidfd.wait_exit(millis(timeout_ms))?;
        Ok(())
    })
}

/// The pidfd itself, still owned by the handle (for `poll`).
///
/// # Safety
/// `pidfd` is a live pidfd handle; `fd` points at a writable int.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_pidfd_fd(
    pidfd: *const nodeipc_pidfd,
    fd: *mut c_int,
) -> nodeipc_status {
    guard("nodeipc_pidfd_fd", || {
        // SAFETY: the caller's contract above.
        let (p, fd) = unsafe { (handle(pidfd)?, out(fd, "fd")?) };
        *fd = p.pidfd.as_fd().as_raw_fd();
        Ok(())
    })
}

/// Closes the pidfd. NULL is a no-op.
///
/// # Safety
/// `pidfd` is NULL or a live pidfd handle, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_pidfd_free(pidfd: *mut nodeipc_pidfd) -> nodeipc_status {
    // SAFETY: the caller's contract above.
    guard("nodeipc_pidfd_free", || unsafe { args::free(pidfd) })
}
