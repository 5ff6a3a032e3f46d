//! The coordinator's response thread for C: a callback called with each
//! request's answers in send order, on a thread of the library's, while
//! another thread sends (`nodeipc-channel`'s raw response thread; this
//! file only carries its replies across).
//!
//! Which calls may run at the same time on one coordinator:
//! - one sending thread (`nodeipc_coordinator_send`, `_try_send`,
//!   `_set_response_mode`, `_set_gather_ahead`) beside the response thread:
//!   always;
//! - inside the callback: `nodeipc_coordinator_try_send` only (a waiting
//!   send, a gather, a drain, or stopping the thread is refused with
//!   `NODEIPC_ERR_INVALID_ARGUMENT` naming why); a try_send there while the
//!   sending thread sends gets `NODEIPC_ERR_INVALID_ARGUMENT` (one sender);
//! - gathers and drains while the thread runs: refused by name;
//! - `_start_response_thread`, `_stop_response_thread` and `_free`: with no
//!   other call on the coordinator running (as `_free` always was).

use std::ffi::{CString, c_char, c_void};
use std::ops::ControlFlow;
use std::panic::{AssertUnwindSafe, catch_unwind};

use nodeipc_channel::{Answers, GatherAhead, Mode, Reply, ThreadPolicy};

use super::args::{bytes, handle, handle_mut, out};
use super::channel::nodeipc_coordinator;
use super::status::{Failure, NODEIPC_NO_RANK, Outcome, guard, nodeipc_status};

/// A gather mode, as `nodeipc_coordinator_set_response_mode` and the grid's
/// gathers take it: one of the `NODEIPC_GATHER_*` numbers.
pub type nodeipc_gather_mode = u32;
/// Every worker's answer, in rank order.
pub const NODEIPC_GATHER_ALL: nodeipc_gather_mode = 0;
/// The first answer to arrive (the others are drained).
pub const NODEIPC_GATHER_FIRST: nodeipc_gather_mode = 1;
/// The answer the channel's rule picks.
pub const NODEIPC_GATHER_AGGREGATED: nodeipc_gather_mode = 2;
/// Every answer awaited, rank 0's handed out.
pub const NODEIPC_GATHER_RANK0_AFTER_ALL: nodeipc_gather_mode = 3;
/// Every worker's init answer, in rank order.
pub const NODEIPC_GATHER_INIT: nodeipc_gather_mode = 4;

// The C numbers are the channel's own.
const _: () = {
    assert!(NODEIPC_GATHER_ALL == Mode::All as u32);
    assert!(NODEIPC_GATHER_FIRST == Mode::First as u32);
    assert!(NODEIPC_GATHER_AGGREGATED == Mode::Aggregated as u32);
    assert!(NODEIPC_GATHER_RANK0_AFTER_ALL == Mode::Rank0AfterAll as u32);
    assert!(NODEIPC_GATHER_INIT == Mode::Init as u32);
};

/// What a response thread does after an error that breaks a gather (a dead
/// worker, a timeout): one of the `NODEIPC_THREAD_*` numbers. The callback
/// hears of the error either way.
pub type nodeipc_thread_policy = u32;
/// End the thread (start it again once the cause is dealt with).
pub const NODEIPC_THREAD_STOP_ON_ERROR: nodeipc_thread_policy = 0;
/// Go on after a short pause (the library's `log` facade, when a Rust
/// logger is installed, records the error too).
pub const NODEIPC_THREAD_LOG_AND_CONTINUE: nodeipc_thread_policy = 1;

/// When a send that finds no free request frame takes the answers that are
/// there out of the slots itself and queues them for the response thread
/// (which hands them to the callback exactly as it would have): one of the
/// `NODEIPC_GATHER_AHEAD_*` numbers.
pub type nodeipc_gather_ahead = u32;
/// While the sender, the response thread and the workers outnumber the
/// cores (the default): the thread shares the sender's core, and each wait
/// for a frame would cost two thread switches.
pub const NODEIPC_GATHER_AHEAD_WHEN_CROWDED: nodeipc_gather_ahead = 0;
/// Whenever the response thread runs.
pub const NODEIPC_GATHER_AHEAD_ALWAYS: nodeipc_gather_ahead = 1;
/// Never: only the response thread takes answers out.
pub const NODEIPC_GATHER_AHEAD_NEVER: nodeipc_gather_ahead = 2;

// The C numbers are the channel's own.
const _: () = {
    assert!(NODEIPC_GATHER_AHEAD_WHEN_CROWDED == GatherAhead::WhenCrowded as u32);
    assert!(NODEIPC_GATHER_AHEAD_ALWAYS == GatherAhead::Always as u32);
    assert!(NODEIPC_GATHER_AHEAD_NEVER == GatherAhead::Never as u32);
};

/// Called by a coordinator's response thread with each request's answers,
/// in send order, one call at a time. `id` is the request's index (as its
/// send gave it). With `status` `NODEIPC_OK`, `count` answers: `data[i]`
/// and `lengths[i]`, in rank order for `NODEIPC_GATHER_ALL` and `_INIT`
/// (`rank` is then `NODEIPC_NO_RANK`), one answer otherwise (`rank` is the
/// worker's). Otherwise `count` is 0, `rank` the worker the error names
/// (`NODEIPC_NO_RANK` if none) and `message` says what failed (it is ""
/// with `NODEIPC_OK`). Every pointer is valid during the call only; the
/// thread-local `nodeipc_last_error` is not used. Return 0 to go on, any
/// other value to end the thread after this call.
pub type nodeipc_response_fn = Option<
    unsafe extern "C" fn(
        user: *mut c_void,
        id: u64,
        status: nodeipc_status,
        rank: u32,
        message: *const c_char,
        count: u32,
        data: *const *const u8,
        lengths: *const usize,
    ) -> i32,
>;

/// A mode number from C, or a failure naming it.
pub(crate) fn gather_mode(mode: nodeipc_gather_mode) -> Outcome<Mode> {
    Mode::from_number(mode).ok_or_else(|| {
        Failure::invalid(format!(
            "gather mode {mode} is none of NODEIPC_GATHER_ALL (0) .. NODEIPC_GATHER_INIT (4)"
        ))
    })
}

/// The callback and its user data, moved to the response thread.
struct Callback {
    function: unsafe extern "C" fn(
        *mut c_void,
        u64,
        nodeipc_status,
        u32,
        *const c_char,
        u32,
        *const *const u8,
        *const usize,
    ) -> i32,
    user: *mut c_void,
    /// The answers' pointers and lengths, reused from one call to the next.
    data: Vec<*const u8>,
    lengths: Vec<usize>,
}

// SAFETY: the caller of nodeipc_coordinator_start_response_thread promises
// that the callback and `user` may be used from the response thread; the
// pointer vectors only ever hold pointers set and read within one call.
unsafe impl Send for Callback {}

impl Callback {
    /// Hands `reply` to the C callback: whether the thread goes on.
    fn call(&mut self, reply: Reply<'_>) -> ControlFlow<()> {
        self.data.clear();
        self.lengths.clear();
        let Reply { id, answers, .. } = reply;
        // The answers stay borrowed (`_answers`) until after the call.
        let (status, rank, message, _answers) = match answers {
            Ok(answers) => {
                let rank = match &answers {
                    Answers::All(all) => {
                        for (_, answer) in all.iter() {
                            self.data.push(answer.as_ptr());
                            self.lengths.push(answer.len());
                        }
                        NODEIPC_NO_RANK
                    }
                    Answers::One(one) => {
                        self.data.push(one.bytes().as_ptr());
                        self.lengths.push(one.bytes().len());
                        one.rank()
                    }
                };
                (
                    super::status::NODEIPC_OK,
                    rank,
                    CString::default(),
                    Some(answers),
                )
            }
            Err(e) => {
                let failure = Failure::from(e);
                let rank = failure.rank;
                let message = CString::new(failure.message.replace('\0', " ")).unwrap_or_default();
                (failure.status, rank, message, None)
            }
        };
        // A vector never holds more answers than the channel has workers.
        let count = self.data.len() as u32;
        // SAFETY: the callback's contract is its registrant's; every pointer
        // passed lives until `reply` drops, after the call.
        let go_on = unsafe {
            (self.function)(
                self.user,
                id,
                status,
                rank,
                message.as_ptr(),
                count,
                self.data.as_ptr(),
                self.lengths.as_ptr(),
            )
        };
        match go_on {
            0 => ControlFlow::Continue(()),
            _ => ControlFlow::Break(()),
        }
    }
}

/// Starts the coordinator's response thread with `callback` (see
/// `nodeipc_response_fn`) and `user` passed to it: from now on each request
/// sent is gathered on that thread in the mode recorded at its send
/// (`nodeipc_coordinator_set_response_mode`; `NODEIPC_GATHER_AGGREGATED`
/// needs the rule of `nodeipc_coordinator_set_aggregate`, else that
/// request's reply is an error), and the
/// callback called with its answers. A `NODEIPC_GATHER_FIRST` request's
/// slower answers are drained on the thread. After an error that breaks a
/// gather (a dead worker: `NODEIPC_ERR_PEER_DIED` naming its rank, within a
/// second; a timeout) the thread ends; see `_start_response_thread_with`.
///
/// # Safety
/// `coordinator` is a live coordinator handle no other thread uses during
/// this call; `callback` and `user` may be used from another thread until
/// the thread is stopped or the coordinator freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_coordinator_start_response_thread(
    coordinator: *mut nodeipc_coordinator,
    callback: nodeipc_response_fn,
    user: *mut c_void,
) -> nodeipc_status {
    // SAFETY: the caller's contract above.
    unsafe {
        nodeipc_coordinator_start_response_thread_with(
            coordinator,
            callback,
            user,
            NODEIPC_THREAD_STOP_ON_ERROR,
        )
    }
}

/// `nodeipc_coordinator_start_response_thread` with a policy for errors
/// that break a gather: `NODEIPC_THREAD_STOP_ON_ERROR` or
/// `NODEIPC_THREAD_LOG_AND_CONTINUE`.
///
/// # Safety
/// As `nodeipc_coordinator_start_response_thread`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_coordinator_start_response_thread_with(
    coordinator: *mut nodeipc_coordinator,
    callback: nodeipc_response_fn,
    user: *mut c_void,
    policy: nodeipc_thread_policy,
) -> nodeipc_status {
    guard("nodeipc_coordinator_start_response_thread", || {
        // SAFETY: the caller's contract above.
        let c = unsafe { handle_mut(coordinator)? };
        let function = callback.ok_or_else(|| Failure::invalid("callback is null"))?;
        let policy = match policy {
            NODEIPC_THREAD_STOP_ON_ERROR => ThreadPolicy::StopOnError,
            NODEIPC_THREAD_LOG_AND_CONTINUE => ThreadPolicy::LogAndContinue,
            other => {
                return Err(Failure::invalid(format!(
                    "thread policy {other} is neither NODEIPC_THREAD_STOP_ON_ERROR (0) \
                     nor NODEIPC_THREAD_LOG_AND_CONTINUE (1)"
                )));
            }
        };
        if c.coordinator.response_thread_running() {
            return Err(Failure::invalid("the response thread is running already"));
        }
        // A thread that ended by itself (an error, or the callback's
        // non-zero return) is joined first: its callback is replaced.
        let _ = c.coordinator.stop_response_thread();
        c.coordinator.remove_response_handler()?;
        let workers = c.coordinator.config().workers as usize;
        let mut callback = Callback {
            function,
            user,
            data: Vec::with_capacity(workers),
            lengths: Vec::with_capacity(workers),
        };
        c.coordinator.on_response(move |reply: Reply<'_>| {
            // No panic leaves the thread: one ends it.
            catch_unwind(AssertUnwindSafe(|| callback.call(reply)))
                .unwrap_or(ControlFlow::Break(()))
        })?;
        c.coordinator.start_response_thread_with(policy)?;
        Ok(())
    })
}

/// Stops the response thread and waits for it (within a fraction of a
/// second). Refused from inside the callback (return non-zero there).
///
/// # Safety
/// `coordinator` is a live coordinator handle no other thread uses during
/// this call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_coordinator_stop_response_thread(
    coordinator: *mut nodeipc_coordinator,
) -> nodeipc_status {
    guard("nodeipc_coordinator_stop_response_thread", || {
        // SAFETY: the caller's contract above.
        let c = unsafe { handle_mut(coordinator)? };
        c.coordinator.stop_response_thread()?;
        Ok(())
    })
}

/// Whether the response thread runs (`*out_running`): it ends by itself
/// after an error under `NODEIPC_THREAD_STOP_ON_ERROR`, or when the
/// callback returns non-zero.
///
/// # Safety
/// `coordinator` is a live coordinator handle; `out_running` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_coordinator_response_thread_running(
    coordinator: *const nodeipc_coordinator,
    out_running: *mut bool,
) -> nodeipc_status {
    guard("nodeipc_coordinator_response_thread_running", || {
        // SAFETY: the caller's contract above.
        let (c, slot) = unsafe { (handle(coordinator)?, out(out_running, "out_running")?) };
        *slot = c.coordinator.response_thread_running();
        Ok(())
    })
}

/// The mode the response thread gathers requests sent from now on in
/// (`NODEIPC_GATHER_*`; each request keeps the mode it was sent with).
/// Called by the sending thread.
///
/// # Safety
/// `coordinator` is a live coordinator handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_coordinator_set_response_mode(
    coordinator: *const nodeipc_coordinator,
    mode: nodeipc_gather_mode,
) -> nodeipc_status {
    guard("nodeipc_coordinator_set_response_mode", || {
        // SAFETY: the caller's contract above.
        let c = unsafe { handle(coordinator)? };
        c.coordinator.set_response_mode(gather_mode(mode)?);
        Ok(())
    })
}

/// When sends gather answers ahead for the response thread
/// (`NODEIPC_GATHER_AHEAD_*`; `NODEIPC_GATHER_AHEAD_WHEN_CROWDED` until
/// set). Takes effect at the thread's next start; requests are handed to
/// the callback the same way under each.
///
/// # Safety
/// `coordinator` is a live coordinator handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_coordinator_set_gather_ahead(
    coordinator: *const nodeipc_coordinator,
    when: nodeipc_gather_ahead,
) -> nodeipc_status {
    guard("nodeipc_coordinator_set_gather_ahead", || {
        let when = match when {
            NODEIPC_GATHER_AHEAD_WHEN_CROWDED => GatherAhead::WhenCrowded,
            NODEIPC_GATHER_AHEAD_ALWAYS => GatherAhead::Always,
            NODEIPC_GATHER_AHEAD_NEVER => GatherAhead::Never,
            other => {
                return Err(Failure::invalid(format!(
                    "gather-ahead setting {other} is none of \
                     NODEIPC_GATHER_AHEAD_WHEN_CROWDED (0) .. NODEIPC_GATHER_AHEAD_NEVER (2)"
                )));
            }
        };
        // SAFETY: the caller's contract above.
        let c = unsafe { handle(coordinator)? };
        c.coordinator.set_gather_ahead(when);
        Ok(())
    })
}

/// `nodeipc_coordinator_send` without waiting: `*out_sent` says whether it
/// was sent (false while a worker has no free frame: nothing is sent), and
/// `*out_index` (if not NULL) gets its index. The one send allowed inside a
/// response callback.
///
/// # Safety
/// `coordinator` is a live coordinator handle; `data` points at `len`
/// readable bytes (NULL with 0); `out_sent` is writable, `out_index` NULL
/// or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_coordinator_try_send(
    coordinator: *const nodeipc_coordinator,
    data: *const u8,
    len: usize,
    out_sent: *mut bool,
    out_index: *mut u64,
) -> nodeipc_status {
    guard("nodeipc_coordinator_try_send", || {
        // SAFETY: the caller's contract above.
        let (c, data, sent) = unsafe {
            (
                handle(coordinator)?,
                bytes(data, len, "data")?,
                out(out_sent, "out_sent")?,
            )
        };
        let index = c.coordinator.try_send(data)?;
        *sent = index.is_some();
        // SAFETY: NULL or writable, per the contract above.
        if let (Some(index), Some(slot)) = (index, unsafe { out_index.as_mut() }) {
            *slot = index;
        }
        Ok(())
    })
}
