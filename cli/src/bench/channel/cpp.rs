//! The C++ rows' coordinator (`cpp/channel_thread_bench.cpp`): a
//! `nodeipc::Coordinator` over the C ABI, driven from Rust.

use std::ffi::c_void;
#[cfg(not(nodeipc_no_cxx))]
use std::ffi::{CString, c_char};
use std::io;
#[cfg(not(nodeipc_no_cxx))]
use std::os::fd::FromRawFd;
use std::os::fd::OwnedFd;

#[cfg(not(nodeipc_no_cxx))]
use capi as _;

#[cfg(not(nodeipc_no_cxx))]
unsafe extern "C" {
    fn nodeipc_bench_thread_create(
        tag: *const c_char,
        workers: u32,
        capacity: usize,
        depth: u32,
        request_fd: *mut i32,
        response_fd: *mut i32,
    ) -> *mut c_void;
    fn nodeipc_bench_thread_start(bench: *mut c_void, expected: *const u8, len: usize) -> i32;
    fn nodeipc_bench_thread_run(
        bench: *mut c_void,
        data: *const u8,
        len: usize,
        rounds: u64,
    ) -> i32;
    fn nodeipc_bench_thread_record(bench: *mut c_void, first: u64, n: u64) -> i32;
    fn nodeipc_bench_thread_send(
        bench: *mut c_void,
        data: *const u8,
        len: usize,
        id: *mut u64,
    ) -> i32;
    fn nodeipc_bench_thread_collect(bench: *mut c_void, total: u64, out: *mut u64, n: u64) -> i32;
    fn nodeipc_bench_lockstep_start(bench: *mut c_void, expected: *const u8, len: usize) -> i32;
    fn nodeipc_bench_lockstep_round(bench: *mut c_void, data: *const u8, len: usize) -> i32;
    fn nodeipc_bench_thread_free(bench: *mut c_void);
}

/// `$call`, a call into the C++ side returning 0 on success, where that
/// side was built (-1, a failure, where it was not: no bench exists then).
macro_rules! cxx {
    ($call:expr) => {{
        #[cfg(not(nodeipc_no_cxx))]
        let status: i32 = $call;
        #[cfg(nodeipc_no_cxx)]
        let status: i32 = -1;
        status
    }};
}

/// `Ok` for a C++ status of 0, else an error saying what failed.
fn checked(status: i32, what: &str) -> io::Result<()> {
    if status == 0 {
        Ok(())
    } else {
        Err(io::Error::other(format!("{what} failed (see stderr)")))
    }
}

/// The C++ coordinator, freed on drop.
#[cfg_attr(nodeipc_no_cxx, allow(dead_code))]
pub(crate) struct Bench(*mut c_void);

impl Bench {
    /// A coordinator of `workers` over anonymous regions, and the
    /// descriptors its workers join with.
    #[cfg(not(nodeipc_no_cxx))]
    pub(crate) fn create(
        tag: &str,
        workers: u32,
        capacity: usize,
        depth: u32,
    ) -> io::Result<(Bench, OwnedFd, OwnedFd)> {
        let tag = CString::new(tag).map_err(io::Error::other)?;
        let (mut request, mut response) = (-1, -1);
        // SAFETY: a NUL-terminated tag and two writable ints; the
        // function returns null or a bench of its own.
        let bench = unsafe {
            nodeipc_bench_thread_create(
                tag.as_ptr(),
                workers,
                capacity,
                depth,
                &mut request,
                &mut response,
            )
        };
        if bench.is_null() {
            return Err(io::Error::other("the C++ coordinator failed (see stderr)"));
        }
        let bench = Bench(bench);
        // SAFETY: nodeipc_coordinator_fds made both descriptors for us.
        let fds = unsafe {
            (
                OwnedFd::from_raw_fd(request),
                OwnedFd::from_raw_fd(response),
            )
        };
        Ok((bench, fds.0, fds.1))
    }

    #[cfg(nodeipc_no_cxx)]
    pub(crate) fn create(
        _: &str,
        _: u32,
        _: usize,
        _: u32,
    ) -> io::Result<(Bench, OwnedFd, OwnedFd)> {
        Err(io::Error::other(concat!(
            "no C++ compiler at build time: ",
            env!("NODEIPC_NO_CXX_REASON")
        )))
    }

    /// Waits for the workers and starts the response thread.
    pub(crate) fn start(&self, expected: &[u8]) -> io::Result<()> {
        #[cfg(not(nodeipc_no_cxx))]
        // SAFETY: a live bench of ours; `expected` is read during the
        // call (copied).
        if unsafe { nodeipc_bench_thread_start(self.0, expected.as_ptr(), expected.len()) } == 0 {
            return Ok(());
        }
        let _ = expected;
        Err(io::Error::other(
            "the C++ response thread failed (see stderr)",
        ))
    }

    /// Sends `rounds` requests of `bytes` and waits for every answer.
    pub(crate) fn run(&self, bytes: &[u8], rounds: u64) -> io::Result<()> {
        #[cfg(not(nodeipc_no_cxx))]
        // SAFETY: a live bench of ours; `bytes` is read during the call.
        if unsafe { nodeipc_bench_thread_run(self.0, bytes.as_ptr(), bytes.len(), rounds) } == 0 {
            return Ok(());
        }
        let _ = (bytes, rounds);
        Err(io::Error::other("the C++ row failed (see stderr)"))
    }
}

impl Bench {
    /// Waits for the workers, starting no response thread (the lock-step
    /// rows).
    pub(crate) fn start_lockstep(&self, expected: &[u8]) -> io::Result<()> {
        let _ = expected;
        // SAFETY: a live bench of ours; `expected` is read during the call
        // (copied).
        let status = cxx!(unsafe {
            nodeipc_bench_lockstep_start(self.0, expected.as_ptr(), expected.len())
        });
        checked(status, "the C++ lock-step coordinator")
    }

    /// One lock-step round trip: `bytes` sent, every answer read in place
    /// and checked.
    pub(crate) fn lockstep_round(&self, bytes: &[u8]) -> io::Result<()> {
        let _ = bytes;
        let status = cxx!({
            // SAFETY: a live bench of ours; `bytes` is read during the call.
            unsafe { nodeipc_bench_lockstep_round(self.0, bytes.as_ptr(), bytes.len()) }
        });
        checked(status, "the C++ lock-step round trip")
    }

    /// From now on, the response function stamps when it hears the `n`
    /// requests from id `first` on.
    pub(crate) fn record(&self, first: u64, n: u64) -> io::Result<()> {
        let _ = (first, n);
        // SAFETY: a live bench of ours.
        let status = cxx!(unsafe { nodeipc_bench_thread_record(self.0, first, n) });
        checked(status, "the C++ response thread's recording")
    }

    /// One send of `bytes` from this thread; its id.
    pub(crate) fn send(&self, bytes: &[u8]) -> io::Result<u64> {
        let mut id = 0u64;
        let _ = (bytes, &mut id);
        // SAFETY: a live bench of ours; `bytes` is read during the call and
        // `id` is a writable u64.
        let status = cxx!(unsafe {
            nodeipc_bench_thread_send(self.0, bytes.as_ptr(), bytes.len(), &mut id)
        });
        checked(status, "the C++ send")?;
        Ok(id)
    }

    /// Waits until `total` requests (since the start) were answered, and
    /// returns the `n` recorded times (CLOCK_MONOTONIC nanoseconds).
    pub(crate) fn collect(&self, total: u64, n: usize) -> io::Result<Vec<u64>> {
        let mut out = vec![0u64; n];
        let _ = (total, &mut out);
        // SAFETY: a live bench of ours; `out` holds `n` writable u64s.
        let status = cxx!(unsafe {
            nodeipc_bench_thread_collect(self.0, total, out.as_mut_ptr(), n as u64)
        });
        checked(status, "the C++ response thread")?;
        Ok(out)
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        #[cfg(not(nodeipc_no_cxx))]
        // SAFETY: a live bench of ours, freed once.
        unsafe {
            nodeipc_bench_thread_free(self.0)
        };
    }
}
