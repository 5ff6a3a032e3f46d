//! The execute channel for C (`nodeipc_channel`), over its raw-bytes API:
//! the coordinator, which broadcasts requests and gathers every worker's
//! answer (all, the first, or one chosen by a callback), and serves the
//! handshake workers log on through. The workers are in `channel_worker`.
//!
//! Requests and responses are bytes of any encoding: a C++ worker decodes
//! our `execute.proto` with its own protobuf runtime.

use std::ffi::{c_char, c_void};
use std::os::fd::IntoRawFd;

use nodeipc_channel::{
    AggregatedBy, All, Channel, ChannelServer, Coordinator, First, Gathered, HandshakeOptions, Raw,
};

use super::args::{self, Handle, bytes, bytes_mut, handle, handle_type, millis, out, text};
use super::status::{Failure, NODEIPC_ERR_TOO_LARGE, Outcome, guard, nodeipc_status};

/// A coordinator's end of a channel. One sending thread
/// (`nodeipc_coordinator_send`) and one gathering thread
/// (`nodeipc_coordinator_recv_all`, `_recv_aggregated`, `_recv_first`,
/// `_drain`) may use it at once; a second sender or a second gatherer is
/// refused (`NODEIPC_ERR_INVALID_ARGUMENT`, naming the rule). Or a sending
/// thread and the library's response thread
/// (`nodeipc_coordinator_start_response_thread`; which calls may run
/// beside it is said there). Free it from one thread once no other call
/// runs.
pub struct nodeipc_coordinator {
    magic: u64,
    /// The fork generation it was made in: a forked child may only free it.
    born: nodeipc_fdpass::ForkGeneration,
    /// The request frame lent by `nodeipc_coordinator_loan`, until its
    /// commit or abort. Declared before `coordinator`, so dropped first: it
    /// borrows it (see `channel_loan`).
    pub(crate) loan: super::channel_loan::Lent,
    pub(crate) coordinator: Coordinator<Raw, Raw>,
}

handle_type!(nodeipc_coordinator, 0x4e49_434f_4f52_4421);

/// A handshake server handing a coordinator's regions to workers that log on.
pub struct nodeipc_handshake_server {
    magic: u64,
    /// The fork generation it was made in: a forked child may only free it.
    born: nodeipc_fdpass::ForkGeneration,
    _server: ChannelServer,
}

handle_type!(nodeipc_handshake_server, 0x4e49_4853_5256_5221);

impl From<nodeipc_channel::Error> for Failure {
    fn from(e: nodeipc_channel::Error) -> Failure {
        use super::status::*;
        use nodeipc_channel::{Error as E, HandshakeError as H};
        let status = match &e {
            // Busy: a second thread's call on a handle taken one thread at a time.
            E::InvalidConfig { .. }
            | E::RankOutOfRange { .. }
            | E::NothingOutstanding { .. }
            | E::Busy { .. }
            // A call the response thread rules out while it runs.
            | E::ResponseThread { .. } => NODEIPC_ERR_INVALID_ARGUMENT,
            E::TooLarge { .. } => NODEIPC_ERR_TOO_LARGE,
            E::Corrupt { .. } | E::Decode { .. } | E::Mismatch { .. } => NODEIPC_ERR_CORRUPT,
            E::Timeout { .. } => NODEIPC_ERR_TIMEOUT,
            E::WorkerDied { .. } | E::CoordinatorDied { .. } => NODEIPC_ERR_PEER_DIED,
            E::WorkerLeft { .. } | E::Closed { .. } => NODEIPC_ERR_PEER_LEFT,
            E::RankTaken { .. } => NODEIPC_ERR_ALREADY_EXISTS,
            // The handshake layer's error, whole: by its own variant.
            E::Handshake(H::InvalidConfig { .. }) => NODEIPC_ERR_INVALID_ARGUMENT,
            E::Handshake(H::Timeout { .. }) => NODEIPC_ERR_TIMEOUT,
            E::Handshake(H::Rejected { .. } | H::Handshake { .. }) => NODEIPC_ERR_REFUSED,
            _ => NODEIPC_ERR_IO,
        };
        let rank = e.rank().unwrap_or(super::status::NODEIPC_NO_RANK);
        Failure {
            rank,
            ..Failure::from_error(status, &e)
        }
    }
}

/// Creates a channel of `workers` workers over anonymous regions (sealed
/// memfds, handed to workers by `nodeipc_coordinator_serve` or
/// `nodeipc_coordinator_fds`). `name` labels errors (and names the channel
/// for workers); `request_capacity` and `response_slot_size` are the
/// largest request and response in bytes (each plus 4 for its length);
/// `depth` (1..=64) how many requests may be in flight; `timeout_ms` bounds
/// every call that takes no timeout of its own (negative: forever).
///
/// # Safety
/// `name` is a NUL-terminated string; `out_coordinator` points at a
/// writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_coordinator_create(
    name: *const c_char,
    workers: u32,
    request_capacity: usize,
    response_slot_size: usize,
    depth: u32,
    timeout_ms: i64,
    out_coordinator: *mut *mut nodeipc_coordinator,
) -> nodeipc_status {
    guard("nodeipc_coordinator_create", || {
        // SAFETY: the caller's contract above.
        let (name, slot) = unsafe {
            (
                text(name, "name")?,
                out(out_coordinator, "out_coordinator")?,
            )
        };
        let coordinator = Channel::anonymous(name)
            .workers(workers)
            .request_capacity(frame_size(request_capacity, "request_capacity")?)
            .response_slot_size(frame_size(response_slot_size, "response_slot_size")?)
            .depth(depth)
            .timeout(millis(timeout_ms))
            .raw()
            .create()?;
        args::publish(
            nodeipc_coordinator {
                magic: nodeipc_coordinator::MAGIC,
                born: nodeipc_fdpass::ForkGeneration::current(),
                loan: Default::default(),
                coordinator,
            },
            slot,
        );
        Ok(())
    })
}

/// A payload size as the frame size the channel's configuration counts
/// (the 4-byte length included), refused when it overflows.
fn frame_size(payload: usize, what: &str) -> Outcome<usize> {
    payload
        .checked_add(nodeipc_proto::LEN_PREFIX)
        .ok_or_else(|| Failure::invalid(format!("{what} {payload} is too large")))
}

/// Serves the channel's logon handshake at `socket_path` (its directory must
/// exist and be ours, mode 0700): each worker that logs on with
/// `nodeipc_worker_connect` gets the regions, the request ring read-only.
/// Free the server once every worker is in (or keep it for reconnects).
///
/// # Safety
/// `coordinator` is a live coordinator handle; `socket_path` a
/// NUL-terminated string; `out_server` points at a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_coordinator_serve(
    coordinator: *const nodeipc_coordinator,
    socket_path: *const c_char,
    out_server: *mut *mut nodeipc_handshake_server,
) -> nodeipc_status {
    guard("nodeipc_coordinator_serve", || {
        // SAFETY: the caller's contract above.
        let (c, path, slot) = unsafe {
            (
                handle(coordinator)?,
                text(socket_path, "socket_path")?,
                out(out_server, "out_server")?,
            )
        };
        let offer = c.coordinator.offer()?;
        let server = ChannelServer::bind(path, HandshakeOptions::default(), offer)?;
        args::publish(
            nodeipc_handshake_server {
                magic: nodeipc_handshake_server::MAGIC,
                born: nodeipc_fdpass::ForkGeneration::current(),
                _server: server,
            },
            slot,
        );
        Ok(())
    })
}

/// Stops a handshake server and removes its socket. NULL is a no-op.
///
/// # Safety
/// `server` is NULL or a live server handle, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_handshake_server_free(
    server: *mut nodeipc_handshake_server,
) -> nodeipc_status {
    // SAFETY: the caller's contract above.
    guard("nodeipc_handshake_server_free", || unsafe {
        args::free(server)
    })
}

/// New descriptors of the channel's regions, for a worker that takes them
/// some other way than the handshake (`nodeipc_worker_from_fds`): the
/// request region read-only, the response region read-write. The caller
/// owns (and closes) both.
///
/// # Safety
/// `coordinator` is a live coordinator handle; both pointers are writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_coordinator_fds(
    coordinator: *const nodeipc_coordinator,
    out_request_fd: *mut i32,
    out_response_fd: *mut i32,
) -> nodeipc_status {
    guard("nodeipc_coordinator_fds", || {
        // SAFETY: the caller's contract above.
        let (c, request_slot, response_slot) = unsafe {
            (
                handle(coordinator)?,
                out(out_request_fd, "out_request_fd")?,
                out(out_response_fd, "out_response_fd")?,
            )
        };
        let request = c.coordinator.request_fd_read_only()?;
        let response = c
            .coordinator
            .response_fd()
            .try_clone_to_owned()
            .map_err(|e| Failure::from_error(super::status::NODEIPC_ERR_IO, &e))?;
        *request_slot = request.into_raw_fd();
        *response_slot = response.into_raw_fd();
        Ok(())
    })
}

/// Waits until every worker has joined (then no name of the channel is left
/// anywhere), up to `timeout_ms` (negative: forever).
///
/// # Safety
/// `coordinator` is a live coordinator handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_coordinator_wait_for_workers(
    coordinator: *const nodeipc_coordinator,
    timeout_ms: i64,
) -> nodeipc_status {
    guard("nodeipc_coordinator_wait_for_workers", || {
        // SAFETY: the caller's contract above.
        let c = unsafe { handle(coordinator)? };
        Ok(c.coordinator.wait_for_workers(millis(timeout_ms))?)
    })
}

/// Broadcasts `len` bytes at `data` to every worker; `*out_index` (if not
/// NULL) gets the request's index. Waits up to `timeout_ms` (negative:
/// forever) for every worker to have a free frame; a timeout sends nothing.
///
/// # Safety
/// `coordinator` is a live coordinator handle; `data` points at `len`
/// readable bytes (NULL with 0); `out_index` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_coordinator_send(
    coordinator: *mut nodeipc_coordinator,
    data: *const u8,
    len: usize,
    timeout_ms: i64,
    out_index: *mut u64,
) -> nodeipc_status {
    guard("nodeipc_coordinator_send", || {
        // SAFETY: the caller's contract above.
        let (c, data) = unsafe { (handle(coordinator)?, bytes(data, len, "data")?) };
        let index = c.coordinator.send_timeout(data, millis(timeout_ms))?;
        // SAFETY: NULL or writable, per the contract above.
        if let Some(slot) = unsafe { out_index.as_mut() } {
            *slot = index;
        }
        Ok(())
    })
}

/// Copies every gathered response into the caller's buffers: worker `i`'s at
/// `buffer + i * stride`, its length in `lengths[i]`. A response longer than
/// `stride` is `NODEIPC_ERR_TOO_LARGE` naming the worker (every response is
/// still taken, so the channel stays in step; the lengths are all filled).
fn copy_gathered(
    gathered: &Gathered<'_>,
    buffer: &mut [u8],
    stride: usize,
    lengths: &mut [usize],
) -> Outcome<()> {
    let mut too_large = None;
    for (rank, response) in gathered.iter() {
        let r = rank as usize;
        lengths[r] = response.len();
        if response.len() > stride {
            too_large.get_or_insert(rank);
            continue;
        }
        let at = r * stride;
        buffer[at..at + response.len()].copy_from_slice(response);
    }
    match too_large {
        None => Ok(()),
        Some(rank) => Err(Failure::new(
            NODEIPC_ERR_TOO_LARGE,
            format!(
                "worker {rank}'s response is {} bytes, past the {stride}-byte stride",
                lengths[rank as usize]
            ),
        )),
    }
}

/// Checks the `(buffer, stride, lengths)` of a gather for `workers` workers:
/// `stride * workers` bytes at `buffer`, `workers` lengths.
///
/// # Safety
/// As the gathers' contracts.
unsafe fn gather_buffers<'a>(
    workers: u32,
    buffer: *mut u8,
    stride: usize,
    lengths: *mut usize,
) -> Outcome<(&'a mut [u8], &'a mut [usize])> {
    let total = stride.checked_mul(workers as usize).ok_or_else(|| {
        Failure::invalid(format!("stride {stride} times {workers} workers overflows"))
    })?;
    if lengths.is_null() {
        return Err(Failure::invalid("lengths is null"));
    }
    // SAFETY: per the caller's contract, `buffer` holds `stride * workers`
    // writable bytes and `lengths` `workers` writable lengths of ours.
    unsafe {
        Ok((
            bytes_mut(buffer, total, "buffer")?,
            std::slice::from_raw_parts_mut(lengths, workers as usize),
        ))
    }
}

/// Gathers every worker's response to the oldest request not yet gathered
/// into the caller's buffers: worker `i`'s at `buffer + i * stride`, its
/// length in `lengths[i]`. Within `timeout_ms` (negative: forever); a
/// timeout keeps what was gathered, and the next call resumes there.
///
/// # Safety
/// `coordinator` is a live coordinator handle; `buffer` points at `stride *
/// workers` writable bytes and `lengths` at `workers` writable `size_t`s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_coordinator_recv_all(
    coordinator: *mut nodeipc_coordinator,
    timeout_ms: i64,
    buffer: *mut u8,
    stride: usize,
    lengths: *mut usize,
) -> nodeipc_status {
    guard("nodeipc_coordinator_recv_all", || {
        // SAFETY: the caller's contract above.
        let c = unsafe { handle(coordinator)? };
        let workers = c.coordinator.config().workers;
        // SAFETY: the caller's contract above.
        let (buffer, lengths) = unsafe { gather_buffers(workers, buffer, stride, lengths)? };
        let gathered = c.coordinator.recv_timeout(All, millis(timeout_ms))?;
        copy_gathered(&gathered, buffer, stride, lengths)
    })
}

/// Chooses one response of a gather: called with every worker's response
/// (`count` of them, in rank order), returns the index of the one to keep,
/// or a negative `nodeipc_status` to fail the gather with.
pub type nodeipc_aggregate_fn = Option<
    unsafe extern "C" fn(
        user: *mut c_void,
        count: u32,
        responses: *const *const u8,
        lengths: *const usize,
    ) -> i32,
>;

/// Gathers every worker's response and copies the one `aggregate` chooses
/// into `buffer` (`capacity` bytes), its length in `*length` and its rank in
/// `*rank`. A chosen response longer than `capacity` is
/// `NODEIPC_ERR_TOO_LARGE` with `*length` set to what it needs.
///
/// # Safety
/// `coordinator` is a live coordinator handle; `aggregate` a function that
/// reads `count` responses and lengths and does not keep the pointers;
/// `buffer` points at `capacity` writable bytes; `length` and `rank` are
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_coordinator_recv_aggregated(
    coordinator: *mut nodeipc_coordinator,
    timeout_ms: i64,
    aggregate: nodeipc_aggregate_fn,
    user: *mut c_void,
    buffer: *mut u8,
    capacity: usize,
    length: *mut usize,
    rank: *mut u32,
) -> nodeipc_status {
    guard("nodeipc_coordinator_recv_aggregated", || {
        // SAFETY: the caller's contract above.
        let (c, buffer, length, rank) = unsafe {
            (
                handle(coordinator)?,
                bytes_mut(buffer, capacity, "buffer")?,
                out(length, "length")?,
                out(rank, "rank")?,
            )
        };
        let aggregate = aggregate.ok_or_else(|| Failure::invalid("aggregate is null"))?;
        // The callback's own failure, kept whole: the gather fails with
        // whatever error stands for it, which this replaces.
        let mut failed = None;
        let mut pick = |gathered: &Gathered<'_>| {
            let (pointers, lengths): (Vec<*const u8>, Vec<usize>) = gathered
                .iter()
                .map(|(_, response)| (response.as_ptr(), response.len()))
                .unzip();
            let count = pointers.len() as u32;
            // SAFETY: the pointers and lengths describe the gathered
            // responses, which live (in the coordinator's own buffers) until
            // `gathered` drops after this call; the callback's contract is
            // the caller's.
            let chosen = unsafe { aggregate(user, count, pointers.as_ptr(), lengths.as_ptr()) };
            u32::try_from(chosen).map_err(|_| {
                let failure = Failure::new(
                    status_from_callback(chosen),
                    format!("the aggregate callback failed the gather ({chosen})"),
                );
                failed = Some(failure);
                nodeipc_channel::Error::Io {
                    context: format!("channel {}", c.coordinator.config().name),
                    op: "the aggregate callback",
                    source: std::io::Error::other(format!("it returned {chosen}")),
                }
            })
        };
        let picked = c
            .coordinator
            .recv_timeout(AggregatedBy(&mut pick), millis(timeout_ms));
        let picked = match (picked, failed) {
            (_, Some(failure)) => return Err(failure),
            (picked, None) => picked?,
        };
        let response = picked.bytes();
        *length = response.len();
        *rank = picked.rank();
        let into = buffer.get_mut(..response.len()).ok_or_else(|| {
            Failure::new(
                NODEIPC_ERR_TOO_LARGE,
                format!(
                    "the chosen response is {} bytes, past the {capacity}-byte buffer",
                    response.len()
                ),
            )
        })?;
        into.copy_from_slice(response);
        Ok(())
    })
}

/// A callback's negative return as a status (an unknown code is corrupt).
pub(crate) fn status_from_callback(code: i32) -> nodeipc_status {
    use super::status::*;
    [
        NODEIPC_ERR_INVALID_ARGUMENT,
        NODEIPC_ERR_TIMEOUT,
        NODEIPC_ERR_PEER_DIED,
        NODEIPC_ERR_PEER_LEFT,
        NODEIPC_ERR_POISONED,
        NODEIPC_ERR_NOT_PERMITTED,
        NODEIPC_ERR_REFUSED,
        NODEIPC_ERR_NOT_FOUND,
        NODEIPC_ERR_ALREADY_EXISTS,
        NODEIPC_ERR_TOO_LARGE,
        NODEIPC_ERR_CORRUPT,
    ]
    .into_iter()
    .find(|s| *s as i32 == code)
    .unwrap_or(NODEIPC_ERR_CORRUPT)
}

/// The first response to arrive for the oldest request not yet gathered,
/// copied into `buffer`, with its worker's rank; the slower workers' answers
/// are taken by the next gather (or `nodeipc_coordinator_drain`).
///
/// # Safety
/// `coordinator` is a live coordinator handle; `buffer` points at
/// `capacity` writable bytes; `length` and `rank` are writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_coordinator_recv_first(
    coordinator: *mut nodeipc_coordinator,
    buffer: *mut u8,
    capacity: usize,
    length: *mut usize,
    rank: *mut u32,
) -> nodeipc_status {
    guard("nodeipc_coordinator_recv_first", || {
        // SAFETY: the caller's contract above.
        let (c, buffer, length, rank) = unsafe {
            (
                handle(coordinator)?,
                bytes_mut(buffer, capacity, "buffer")?,
                out(length, "length")?,
                out(rank, "rank")?,
            )
        };
        let first = c.coordinator.recv(First)?;
        *rank = first.rank();
        *length = first.bytes().len();
        let into = buffer.get_mut(..first.bytes().len()).ok_or_else(|| {
            Failure::new(
                NODEIPC_ERR_TOO_LARGE,
                format!(
                    "worker {}'s response is {} bytes, past the {capacity}-byte buffer",
                    first.rank(),
                    first.bytes().len()
                ),
            )
        })?;
        into.copy_from_slice(first.bytes());
        Ok(())
    })
}

/// Takes (and drops) the answers `nodeipc_coordinator_recv_first` left;
/// `*out_count` (if not NULL) gets how many.
///
/// # Safety
/// `coordinator` is a live coordinator handle; `out_count` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_coordinator_drain(
    coordinator: *mut nodeipc_coordinator,
    out_count: *mut u64,
) -> nodeipc_status {
    guard("nodeipc_coordinator_drain", || {
        // SAFETY: the caller's contract above.
        let c = unsafe { handle(coordinator)? };
        let drained = c.coordinator.drain()?;
        // SAFETY: NULL or writable, per the contract above.
        if let Some(slot) = unsafe { out_count.as_mut() } {
            *slot = drained;
        }
        Ok(())
    })
}

/// Closes the channel (workers see it closed once they have every request
/// sent before) and frees the coordinator. NULL is a no-op.
///
/// # Safety
/// `coordinator` is NULL or a live coordinator handle, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_coordinator_free(
    coordinator: *mut nodeipc_coordinator,
) -> nodeipc_status {
    // SAFETY: the caller's contract above.
    guard("nodeipc_coordinator_free", || unsafe {
        args::free(coordinator)
    })
}
