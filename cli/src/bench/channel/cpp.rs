//! The C++ rows' coordinator (`cpp/channel_thread_bench.cpp`): a
//! `nodeipc::Coordinator` over the C ABI, driven from Rust.

use std::ffi::{CString, c_char, c_void};
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

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
    fn nodeipc_bench_thread_free(bench: *mut c_void);
}

/// The C++ coordinator, freed on drop.
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

impl Drop for Bench {
    fn drop(&mut self) {
        #[cfg(not(nodeipc_no_cxx))]
        // SAFETY: a live bench of ours, freed once.
        unsafe {
            nodeipc_bench_thread_free(self.0)
        };
    }
}
