//! The channel's gather grid for C: one gather for every mode
//! (`nodeipc_coordinator_recv` within a timeout, `_try_recv` never
//! waiting), the answers handed to a visitor where they lie (no copy);
//! drain in the same two forms; the channel's aggregation rule; a worker's
//! init answer. Each calls the one Rust grid call of its form.

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};

use nodeipc_channel::{Answers, Gathered};

use super::args::{bytes, handle, handle_mut, millis, out};
use super::channel::{nodeipc_aggregate_fn, nodeipc_coordinator, status_from_callback};
use super::channel_thread::{gather_mode, nodeipc_gather_mode};
use super::channel_worker::nodeipc_worker;
use super::status::{Failure, NODEIPC_NO_RANK, Outcome, guard, nodeipc_status};

/// Sees one gather's answers where they lie: `count` answers at `data[i]`,
/// `lengths[i]` bytes each — every worker's in rank order (`rank` is then
/// `NODEIPC_NO_RANK`) for `NODEIPC_GATHER_ALL` and `_INIT`, one otherwise
/// (`rank` is its worker's). Valid during the call only. Returns 0, or a
/// negative `nodeipc_status` that the gather then returns (its answers are
/// taken either way).
pub type nodeipc_answers_fn = Option<
    unsafe extern "C" fn(
        user: *mut c_void,
        rank: u32,
        count: u32,
        data: *const *const u8,
        lengths: *const usize,
    ) -> i32,
>;

/// Hands `answers` to `visit`; its negative return is the call's failure.
fn visit(
    answers: &Answers<'_>,
    visit: unsafe extern "C" fn(*mut c_void, u32, u32, *const *const u8, *const usize) -> i32,
    user: *mut c_void,
) -> Outcome<()> {
    let (rank, data, lengths): (u32, Vec<*const u8>, Vec<usize>) = match answers {
        Answers::All(all) => {
            let (data, lengths) = all.iter().map(|(_, a)| (a.as_ptr(), a.len())).unzip();
            (NODEIPC_NO_RANK, data, lengths)
        }
        Answers::One(one) => (
            one.rank(),
            vec![one.bytes().as_ptr()],
            vec![one.bytes().len()],
        ),
    };
    // Never more answers than the channel has workers (at most MAX_WORKERS).
    let count = data.len() as u32;
    // SAFETY: the pointers describe the gathered answers, in the
    // coordinator's own buffers until `answers` drops after this call; the
    // visitor's contract is the caller's.
    let said = unsafe { visit(user, rank, count, data.as_ptr(), lengths.as_ptr()) };
    match said {
        0.. => Ok(()),
        code => Err(Failure::new(
            status_from_callback(code),
            format!("the visitor failed the gather ({code})"),
        )),
    }
}

/// Gathers the answers to the oldest request not yet gathered in `mode`
/// (`NODEIPC_GATHER_*`), within `timeout_ms` (negative: forever), and hands
/// them to `visitor` where they lie. A timeout keeps what was gathered: the
/// next gather resumes there. `NODEIPC_GATHER_AGGREGATED` needs the rule of
/// `nodeipc_coordinator_set_aggregate`; `NODEIPC_GATHER_FIRST` leaves the
/// slower answers to the next gather or a drain.
///
/// # Safety
/// `coordinator` is a live coordinator handle; `visitor` reads what it is
/// given during the call only.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_coordinator_recv(
    coordinator: *const nodeipc_coordinator,
    mode: nodeipc_gather_mode,
    timeout_ms: i64,
    visitor: nodeipc_answers_fn,
    user: *mut c_void,
) -> nodeipc_status {
    guard("nodeipc_coordinator_recv", || {
        // SAFETY: the caller's contract above.
        let c = unsafe { handle(coordinator)? };
        let mode = gather_mode(mode)?;
        let f = visitor.ok_or_else(|| Failure::invalid("visitor is null"))?;
        let answers = c.coordinator.recv_timeout(mode, millis(timeout_ms))?;
        visit(&answers, f, user)
    })
}

/// `nodeipc_coordinator_recv` without waiting: `*out_gathered` is false
/// (and `visitor` not called) while an answer it needs is not there; the
/// answers it could take are kept for the next gather.
///
/// # Safety
/// As `nodeipc_coordinator_recv`; `out_gathered` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_coordinator_try_recv(
    coordinator: *const nodeipc_coordinator,
    mode: nodeipc_gather_mode,
    visitor: nodeipc_answers_fn,
    user: *mut c_void,
    out_gathered: *mut bool,
) -> nodeipc_status {
    guard("nodeipc_coordinator_try_recv", || {
        // SAFETY: the caller's contract above.
        let (c, gathered) = unsafe { (handle(coordinator)?, out(out_gathered, "out_gathered")?) };
        let mode = gather_mode(mode)?;
        let f = visitor.ok_or_else(|| Failure::invalid("visitor is null"))?;
        *gathered = false;
        let Some(answers) = c.coordinator.try_recv(mode)? else {
            return Ok(());
        };
        *gathered = true;
        visit(&answers, f, user)
    })
}

/// Takes (and drops) the answers a `NODEIPC_GATHER_FIRST` gather left,
/// within `timeout_ms` (negative: forever); `*out_count` (if not NULL)
/// gets how many.
///
/// # Safety
/// `coordinator` is a live coordinator handle; `out_count` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_coordinator_drain_timeout(
    coordinator: *const nodeipc_coordinator,
    timeout_ms: i64,
    out_count: *mut u64,
) -> nodeipc_status {
    guard("nodeipc_coordinator_drain_timeout", || {
        // SAFETY: the caller's contract above.
        let c = unsafe { handle(coordinator)? };
        let drained = c.coordinator.drain_timeout(millis(timeout_ms))?;
        // SAFETY: NULL or writable, per the contract above.
        if let Some(slot) = unsafe { out_count.as_mut() } {
            *slot = drained;
        }
        Ok(())
    })
}

/// `nodeipc_coordinator_drain_timeout` without waiting: `*out_done` says
/// whether every leftover answer was there (those that were are taken).
///
/// # Safety
/// `coordinator` is a live coordinator handle; `out_done` writable,
/// `out_count` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_coordinator_try_drain(
    coordinator: *const nodeipc_coordinator,
    out_done: *mut bool,
    out_count: *mut u64,
) -> nodeipc_status {
    guard("nodeipc_coordinator_try_drain", || {
        // SAFETY: the caller's contract above.
        let (c, done) = unsafe { (handle(coordinator)?, out(out_done, "out_done")?) };
        let drained = c.coordinator.try_drain()?;
        *done = drained.is_some();
        // SAFETY: NULL or writable, per the contract above.
        if let (Some(n), Some(slot)) = (drained, unsafe { out_count.as_mut() }) {
            *slot = n;
        }
        Ok(())
    })
}

/// The callback and its user data, kept by the channel as its rule.
struct Rule {
    function: unsafe extern "C" fn(*mut c_void, u32, *const *const u8, *const usize) -> i32,
    user: *mut c_void,
}

// SAFETY: the caller of nodeipc_coordinator_set_aggregate promises that the
// callback and `user` may be used from the gathering thread (the response
// thread included).
unsafe impl Send for Rule {}

impl Rule {
    fn pick(&mut self, channel: &str, gathered: &Gathered<'_>) -> nodeipc_channel::Result<u32> {
        let (pointers, lengths): (Vec<*const u8>, Vec<usize>) =
            gathered.iter().map(|(_, a)| (a.as_ptr(), a.len())).unzip();
        // At most MAX_WORKERS answers.
        let count = pointers.len() as u32;
        // SAFETY: the pointers describe the gathered answers, alive until
        // the gather's view drops after this call; the callback's contract
        // is its registrant's.
        let chosen = catch_unwind(AssertUnwindSafe(|| unsafe {
            (self.function)(self.user, count, pointers.as_ptr(), lengths.as_ptr())
        }))
        .unwrap_or(-1);
        u32::try_from(chosen).map_err(|_| nodeipc_channel::Error::Io {
            context: format!("channel {channel}"),
            op: "the aggregate callback",
            source: std::io::Error::other(format!("it returned {chosen}")),
        })
    }
}

/// Sets the channel's aggregation rule: `NODEIPC_GATHER_AGGREGATED` gathers
/// (the caller's and the response thread's) call `aggregate` with every
/// worker's answer and keep the one whose index it returns (a negative
/// return fails that gather). Replaces an earlier rule.
///
/// # Safety
/// `coordinator` is a live coordinator handle no other thread uses during
/// this call (and no response thread runs); `aggregate` and `user` may be
/// used from the gathering thread until the coordinator is freed or the
/// rule replaced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_coordinator_set_aggregate(
    coordinator: *mut nodeipc_coordinator,
    aggregate: nodeipc_aggregate_fn,
    user: *mut c_void,
) -> nodeipc_status {
    guard("nodeipc_coordinator_set_aggregate", || {
        // SAFETY: the caller's contract above.
        let c = unsafe { handle_mut(coordinator)? };
        let function = aggregate.ok_or_else(|| Failure::invalid("aggregate is null"))?;
        if c.coordinator.response_thread_running() {
            return Err(Failure::invalid(
                "the response thread is running: it holds the rule (stop it first)",
            ));
        }
        let channel = c.coordinator.config().name.clone();
        let mut rule = Rule { function, user };
        c.coordinator
            .set_aggregate(move |gathered: &Gathered<'_>| rule.pick(&channel, gathered));
        Ok(())
    })
}

/// Answers into the worker's init slot (what `NODEIPC_GATHER_INIT` gathers
/// read), `len` bytes at `data`. Refused while a request is held in place.
///
/// # Safety
/// `worker` is a live worker handle; `data` points at `len` readable bytes
/// (NULL with 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_worker_respond_init(
    worker: *mut nodeipc_worker,
    data: *const u8,
    len: usize,
) -> nodeipc_status {
    guard("nodeipc_worker_respond_init", || {
        // SAFETY: the caller's contract above.
        let (w, data) = unsafe { (handle_mut(worker)?, bytes(data, len, "data")?) };
        Ok(w.worker()?.respond_init(data)?)
    })
}
