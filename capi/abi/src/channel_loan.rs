//! A request built where it travels, for C: `nodeipc_coordinator_loan`
//! lends the next request frame (every worker's frame freed first), the
//! caller writes the request there, `nodeipc_coordinator_commit` broadcasts
//! it, `nodeipc_coordinator_abort` gives the frame back unsent. No copy of
//! the payload. The C++ `nodeipc::RequestLoan` is RAII over these.

use std::sync::{Mutex, MutexGuard};

use nodeipc_channel::RequestLoan;

use super::args::{handle, millis, out};
use super::channel::nodeipc_coordinator;
use super::status::{Failure, Outcome, guard, nodeipc_status};

/// The loan a coordinator handle holds between `nodeipc_coordinator_loan`
/// and its commit or abort.
///
/// The loan borrows the handle's own coordinator: the handle lives in its
/// box, never moved, until `nodeipc_coordinator_free`, which drops this
/// field before the coordinator (declared before it), so the borrow never
/// outlives what it borrows. A mutex, because the handle is shared by a
/// sending and a gathering thread (only the sending one lends).
#[derive(Default)]
pub struct Lent(Mutex<Option<RequestLoan<'static>>>);

impl Lent {
    fn lock(&self) -> MutexGuard<'_, Option<RequestLoan<'static>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Lends the next request frame's `len` bytes once every worker has freed
/// it (waiting up to `timeout_ms`, negative: forever; a timeout takes
/// nothing): `*out_data` points at them, writable until
/// `nodeipc_coordinator_commit` (which broadcasts them) or
/// `nodeipc_coordinator_abort` (which sends nothing), and not after. While
/// a loan is open it is the sending thread's: another send or loan is
/// refused (`NODEIPC_ERR_INVALID_ARGUMENT`, naming the rule). A second
/// loan before the commit is refused the same way. `len` past the
/// channel's request capacity is `NODEIPC_ERR_TOO_LARGE`.
///
/// # Safety
/// `coordinator` is a live coordinator handle; `out_data` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_coordinator_loan(
    coordinator: *const nodeipc_coordinator,
    len: usize,
    timeout_ms: i64,
    out_data: *mut *mut u8,
) -> nodeipc_status {
    guard("nodeipc_coordinator_loan", || {
        // SAFETY: the caller's contract above.
        let (c, data) = unsafe { (handle(coordinator)?, out(out_data, "out_data")?) };
        let mut lent = c.loan.lock();
        if lent.is_some() {
            return Err(Failure::invalid(
                "a loan is open: commit or abort it before the next one",
            ));
        }
        let owner: *const nodeipc_channel::Coordinator<nodeipc_channel::Raw, nodeipc_channel::Raw> =
            &c.coordinator;
        // SAFETY: the coordinator lives in the handle's box until the handle
        // is freed, which drops `c.loan` (and the loan in it) first (see
        // `Lent`): extending the loan's borrow to the handle's lifetime is
        // sound.
        let mut loan = unsafe { &*owner }.loan_timeout(len, millis(timeout_ms))?;
        *data = loan.bytes_mut().as_mut_ptr();
        *lent = Some(loan);
        Ok(())
    })
}

/// Broadcasts the request written in the open loan to every worker;
/// `*out_index` (if not NULL) gets its index. The loan's bytes may not be
/// touched after. No loan open: `NODEIPC_ERR_INVALID_ARGUMENT`.
///
/// # Safety
/// `coordinator` is a live coordinator handle; `out_index` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_coordinator_commit(
    coordinator: *const nodeipc_coordinator,
    out_index: *mut u64,
) -> nodeipc_status {
    guard("nodeipc_coordinator_commit", || {
        // SAFETY: the caller's contract above.
        let c = unsafe { handle(coordinator)? };
        let loan = c.loan.lock().take();
        let Some(loan) = loan else {
            return Err(Failure::invalid(
                "no loan is open (nodeipc_coordinator_loan first; a loan is committed once)",
            ));
        };
        let index = loan.commit()?;
        // SAFETY: NULL or writable, per the contract above.
        if let Some(slot) = unsafe { out_index.as_mut() } {
            *slot = index;
        }
        Ok(())
    })
}

/// Gives the open loan's frame back, unsent (the request's index is not
/// used). No loan open: a no-op.
///
/// # Safety
/// `coordinator` is a live coordinator handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_coordinator_abort(
    coordinator: *const nodeipc_coordinator,
) -> nodeipc_status {
    guard("nodeipc_coordinator_abort", || -> Outcome<()> {
        // SAFETY: the caller's contract above.
        let c = unsafe { handle(coordinator)? };
        let loan = c.loan.lock().take();
        drop(loan);
        Ok(())
    })
}
