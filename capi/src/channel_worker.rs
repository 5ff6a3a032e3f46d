//! The execute channel's worker for C (`nodeipc_channel::Worker`): log on
//! through the coordinator's handshake (or take the regions as descriptors),
//! read each request into a buffer of the caller's or in place, answer.

use std::ffi::c_char;
use std::os::fd::{FromRawFd, OwnedFd};
use std::ptr::NonNull;

use nodeipc_channel::{InPlace, Raw, Worker, connect, worker_logon};

use super::args::{self, Handle, bytes, bytes_mut, handle_mut, handle_type, millis, out, text};
use super::status::{Failure, NODEIPC_ERR_TOO_LARGE, Outcome, guard, nodeipc_status};

/// A worker's end of a channel. One thread at a time.
pub struct nodeipc_worker {
    magic: u64,
    /// The fork generation it was made in: a forked child may only free it.
    born: nodeipc_fdpass::ForkGeneration,
    /// The request this worker holds in place, if any; it borrows `*worker`,
    /// so it is always dropped first.
    held: Option<InPlace<'static, Raw, Raw>>,
    /// The worker, boxed and never moved while `held` borrows it; freed in `Drop`.
    worker: NonNull<Worker<Raw, Raw>>,
}

handle_type!(nodeipc_worker, 0x4e49_574f_524b_5221);

impl Drop for nodeipc_worker {
    fn drop(&mut self) {
        // The guard borrows the worker: it goes first (releasing its frame).
        self.held = None;
        // SAFETY: `worker` came from `Box::into_raw` in `publish_worker` and
        // nothing borrows it any more (`held` was dropped just above).
        drop(unsafe { Box::from_raw(self.worker.as_ptr()) });
    }
}

// SAFETY: the worker and its guard are used by one thread at a time (the
// handle's documented contract); `Worker` itself is `Send`.
unsafe impl Send for nodeipc_worker {}

impl nodeipc_worker {
    fn worker(&mut self) -> Outcome<&mut Worker<Raw, Raw>> {
        if self.held.is_some() {
            return Err(Failure::invalid(
                "this worker holds a request in place: respond or release it first",
            ));
        }
        // SAFETY: the box is live until drop and nothing borrows it while
        // `held` is `None`; `&mut self` makes this the only access.
        Ok(unsafe { self.worker.as_mut() })
    }
}

fn publish_worker(worker: Worker<Raw, Raw>, slot: &mut *mut nodeipc_worker) {
    args::publish(
        nodeipc_worker {
            magic: nodeipc_worker::MAGIC,
            born: nodeipc_fdpass::ForkGeneration::current(),
            held: None,
            worker: NonNull::from(Box::leak(Box::new(worker))),
        },
        slot,
    );
}

/// Logs on to the coordinator's handshake server at `socket_path` as worker
/// `rank` and joins the channel with the regions it hands over (the request
/// ring read-only). `timeout_ms` (negative: forever) bounds the logon and
/// every later call that takes no timeout of its own.
///
/// # Safety
/// `socket_path` is a NUL-terminated string; `out_worker` points at a
/// writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_worker_connect(
    socket_path: *const c_char,
    rank: u32,
    timeout_ms: i64,
    out_worker: *mut *mut nodeipc_worker,
) -> nodeipc_status {
    guard("nodeipc_worker_connect", || {
        // SAFETY: the caller's contract above.
        let (path, slot) = unsafe {
            (
                text(socket_path, "socket_path")?,
                out(out_worker, "out_worker")?,
            )
        };
        let timeout = millis(timeout_ms);
        let worker = connect(path, &worker_logon(rank), timeout)?.into_worker(rank, timeout)?;
        publish_worker(worker, slot);
        Ok(())
    })
}

/// Joins as worker `rank` over region descriptors (from
/// `nodeipc_coordinator_fds`, passed over a socket or inherited), which it
/// takes over (closing them on failure too). `name` labels errors;
/// `timeout_ms` (negative: forever) bounds every later call that takes no
/// timeout of its own.
///
/// # Safety
/// `name` is a NUL-terminated string; the descriptors are open and owned by
/// the caller, who does not use them afterwards; `out_worker` points at a
/// writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_worker_from_fds(
    name: *const c_char,
    rank: u32,
    request_fd: i32,
    response_fd: i32,
    timeout_ms: i64,
    out_worker: *mut *mut nodeipc_worker,
) -> nodeipc_status {
    guard("nodeipc_worker_from_fds", || {
        if request_fd < 0 || response_fd < 0 || request_fd == response_fd {
            return Err(Failure::invalid(format!(
                "request_fd {request_fd} and response_fd {response_fd} must be two open descriptors"
            )));
        }
        // SAFETY: the caller hands both descriptors over (contract above).
        let (request, response) = unsafe {
            (
                OwnedFd::from_raw_fd(request_fd),
                OwnedFd::from_raw_fd(response_fd),
            )
        };
        // SAFETY: the caller's contract above.
        let (name, slot) = unsafe { (text(name, "name")?, out(out_worker, "out_worker")?) };
        let worker = Worker::from_fds(name, rank, request, response, millis(timeout_ms))?;
        publish_worker(worker, slot);
        Ok(())
    })
}

/// This worker's rank.
///
/// # Safety
/// `worker` is a live worker handle; `out_rank` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_worker_rank(
    worker: *mut nodeipc_worker,
    out_rank: *mut u32,
) -> nodeipc_status {
    guard("nodeipc_worker_rank", || {
        // SAFETY: the caller's contract above.
        let (w, slot) = unsafe { (handle_mut(worker)?, out(out_rank, "out_rank")?) };
        // SAFETY: the box is live; a shared look at its rank, whatever is held.
        *slot = unsafe { w.worker.as_ref() }.rank();
        Ok(())
    })
}

/// Takes the next request (waiting up to `timeout_ms`, negative: forever)
/// and holds it in
/// place: `*data` points at its bytes in the read-only ring, `*length` is
/// their count, valid until `nodeipc_worker_respond` or
/// `nodeipc_worker_release`. No copy. While a request is held the
/// coordinator cannot reuse its frame: its sends wait, then time out naming
/// this worker.
///
/// # Safety
/// `worker` is a live worker handle; `data` and `length` are writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_worker_recv_in_place(
    worker: *mut nodeipc_worker,
    timeout_ms: i64,
    data: *mut *const u8,
    length: *mut usize,
) -> nodeipc_status {
    guard("nodeipc_worker_recv_in_place", || {
        // SAFETY: the caller's contract above.
        let (w, data, length) = unsafe {
            (
                handle_mut(worker)?,
                out(data, "data")?,
                out(length, "length")?,
            )
        };
        hold(w, timeout_ms)?;
        let held = w.held.as_ref().expect("just held");
        *data = held.bytes().as_ptr();
        *length = held.bytes().len();
        Ok(())
    })
}

/// Takes the next request into `w.held` (unless one is held already, which
/// is the one a failed `nodeipc_worker_recv` left).
fn hold(w: &mut nodeipc_worker, timeout_ms: i64) -> Outcome<()> {
    if w.held.is_some() {
        return Ok(());
    }
    let worker: *mut Worker<Raw, Raw> = w.worker()?;
    // SAFETY: the worker lives in its box until the handle drops, which
    // drops `held` first; while `held` is `Some` nothing else borrows the
    // worker (`nodeipc_worker::worker` refuses), so extending the guard's
    // borrow to the handle's lifetime is sound.
    let guard = unsafe { &mut *worker }.recv_in_place_timeout(millis(timeout_ms))?;
    w.held = Some(guard);
    Ok(())
}

/// Takes the next request (waiting up to `timeout_ms`, negative: forever)
/// and copies it into
/// `buffer` (`capacity` bytes), its length in `*length`, releasing its frame.
/// A request longer than `capacity` is `NODEIPC_ERR_TOO_LARGE` with
/// `*length` set to what it needs, and stays held: call again with a larger
/// buffer (or `nodeipc_worker_release` to drop it).
///
/// # Safety
/// `worker` is a live worker handle; `buffer` points at `capacity` writable
/// bytes; `length` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_worker_recv(
    worker: *mut nodeipc_worker,
    timeout_ms: i64,
    buffer: *mut u8,
    capacity: usize,
    length: *mut usize,
) -> nodeipc_status {
    guard("nodeipc_worker_recv", || {
        // SAFETY: the caller's contract above.
        let (w, buffer, length) = unsafe {
            (
                handle_mut(worker)?,
                bytes_mut(buffer, capacity, "buffer")?,
                out(length, "length")?,
            )
        };
        hold(w, timeout_ms)?;
        let held = w.held.as_ref().expect("just held");
        let request = held.bytes();
        *length = request.len();
        let Some(into) = buffer.get_mut(..request.len()) else {
            return Err(Failure::new(
                NODEIPC_ERR_TOO_LARGE,
                format!(
                    "the request is {} bytes, past the {capacity}-byte buffer (it stays held)",
                    request.len()
                ),
            ));
        };
        into.copy_from_slice(request);
        w.held.take().expect("held").release()?;
        Ok(())
    })
}

/// Gives the held request's frame back without answering (the answer may
/// come later with `nodeipc_worker_respond`). Nothing held: a no-op.
///
/// # Safety
/// `worker` is a live worker handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_worker_release(worker: *mut nodeipc_worker) -> nodeipc_status {
    guard("nodeipc_worker_release", || {
        // SAFETY: the caller's contract above.
        let w = unsafe { handle_mut(worker)? };
        match w.held.take() {
            Some(held) => Ok(held.release()?),
            None => Ok(()),
        }
    })
}

/// Answers the oldest request not yet answered with `len` bytes at `data`
/// (written straight into this worker's response slot), and releases the
/// held request, if any.
///
/// # Safety
/// `worker` is a live worker handle; `data` points at `len` readable bytes
/// (NULL with 0) — the held request's own bytes too: they are copied
/// before its frame is released.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_worker_respond(
    worker: *mut nodeipc_worker,
    data: *const u8,
    len: usize,
) -> nodeipc_status {
    guard("nodeipc_worker_respond", || {
        // SAFETY: the caller's contract above.
        let (w, data) = unsafe { (handle_mut(worker)?, bytes(data, len, "data")?) };
        match w.held.take() {
            Some(held) => Ok(held.respond(data)?),
            None => Ok(w.worker()?.respond(data)?),
        }
    })
}

/// Leaves the channel (the rank may be taken again) and frees the worker,
/// releasing a held request. NULL is a no-op.
///
/// # Safety
/// `worker` is NULL or a live worker handle, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_worker_free(worker: *mut nodeipc_worker) -> nodeipc_status {
    // SAFETY: the caller's contract above.
    guard("nodeipc_worker_free", || unsafe { args::free(worker) })
}
