//! The boundary itself: a panic or a failure inside an entry point becomes
//! a code and the thread's last error; handles are checked by magic.

use std::ffi::CStr;

use super::args::{FREED, Handle, handle};
use super::region::nodeipc_region;
use super::status::*;

fn last_error() -> String {
    // SAFETY: `nodeipc_last_error` returns a NUL-terminated string that
    // lives until this thread's next failing call; it is copied at once.
    unsafe { CStr::from_ptr(nodeipc_last_error()) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn a_panic_inside_an_entry_point_becomes_a_code_and_a_message() {
    let status = guard("nodeipc_test_op", || panic!("boom {}", 42));
    assert_eq!(status, NODEIPC_ERR_PANIC);
    let message = last_error();
    assert!(
        message.contains("nodeipc_test_op") && message.contains("boom 42"),
        "{message}"
    );
    assert_eq!(nodeipc_last_errno(), 0);
}

#[test]
fn a_failure_keeps_its_errno_and_success_leaves_the_last_error() {
    let io = std::io::Error::from_raw_os_error(libc::EMFILE);
    let shm = nodeipc_shm::Error::Io {
        op: "shm_open",
        object: "/x".into(),
        source: io,
    };
    assert_eq!(guard("op", || Err(shm.into())), NODEIPC_ERR_IO);
    assert_eq!(nodeipc_last_errno(), libc::EMFILE);
    assert_eq!(guard("other", || Ok(())), NODEIPC_OK);
    assert!(last_error().starts_with("op: "), "{}", last_error());
}

#[test]
fn a_message_with_a_nul_is_kept_whole() {
    guard("op", || Err(Failure::invalid("before\0after")));
    assert_eq!(last_error(), "op: before\\0after");
}

#[test]
fn every_status_has_its_name() {
    for code in -17..=0 {
        // SAFETY: a static NUL-terminated string.
        let name = unsafe { CStr::from_ptr(nodeipc_status_name(code)) };
        assert!(name.to_str().unwrap().starts_with("NODEIPC_"), "{code}");
    }
}

#[test]
fn a_freed_handle_is_named_as_such() {
    let mut region: *mut nodeipc_region = std::ptr::null_mut();
    // SAFETY: `region` is a writable pointer of ours.
    let made = unsafe { super::region::nodeipc_region_anonymous(4096, &mut region) };
    assert_eq!(made, NODEIPC_OK);
    // What `nodeipc_region_free` leaves in the magic, without freeing.
    // SAFETY: a live handle this test owns, used by this thread only.
    unsafe { &mut *region }.set_magic(FREED);
    // SAFETY: as above.
    let err = unsafe { handle(region) }.map(|_| ()).unwrap_err();
    assert_eq!(err.status, NODEIPC_ERR_BAD_HANDLE);
    assert!(err.message.contains("freed"), "{}", err.message);
    // SAFETY: as above: refused, so nothing is freed.
    let refused = unsafe { super::region::nodeipc_region_free(region) };
    assert_eq!(refused, NODEIPC_ERR_BAD_HANDLE);
    // SAFETY: as above; then freed for real.
    unsafe { &mut *region }.set_magic(nodeipc_region::MAGIC);
    // SAFETY: a live handle, not used afterwards.
    let freed = unsafe { super::region::nodeipc_region_free(region) };
    assert_eq!(freed, NODEIPC_OK);
}

/// Handles documented as usable from several threads at once must be.
#[test]
fn thread_safe_handles_are_send_and_sync() {
    fn both<T: Send + Sync>() {}
    both::<nodeipc_region>();
    both::<super::sem::nodeipc_sem>();
    both::<super::fdpass::nodeipc_pidfd>();
}

/// A second thread's call on a group is the caller's mistake, said so.
#[test]
fn a_busy_group_is_an_invalid_argument_naming_the_rule() {
    let busy = nodeipc_barrier::Error::Busy {
        group: "/g".into(),
        rank: 0,
        op: "barrier",
    };
    let failure = Failure::from(busy);
    assert_eq!(failure.status, NODEIPC_ERR_INVALID_ARGUMENT);
    assert!(
        failure.message.contains("one thread at a time"),
        "{}",
        failure.message
    );
}
