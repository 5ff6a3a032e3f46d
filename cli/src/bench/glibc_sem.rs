//! glibc's own named semaphores, as the baselines use them: `sem_open`,
//! `sem_post`, `sem_timedwait`. nodeipc's `NamedSemaphore` keeps glibc's
//! layout but runs its own code, so it cannot stand in for "glibc" in a
//! comparison; this does, and is for the benchmarks only (it trusts the
//! semaphore's words, as every glibc program does).

use std::ffi::CString;
use std::io;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

/// A glibc named semaphore; the creator removes the name on drop.
pub(crate) struct GlibcSemaphore {
    sem: NonNull<libc::sem_t>,
    name: CString,
    owner: bool,
}

// SAFETY: glibc's semaphore calls are thread-safe, and the mapping behind
// `sem` lives until `sem_close` in drop.
unsafe impl Send for GlibcSemaphore {}
// SAFETY: as for `Send`; `&GlibcSemaphore` only reaches thread-safe calls.
unsafe impl Sync for GlibcSemaphore {}

impl GlibcSemaphore {
    /// `sem_open(name, O_CREAT|O_EXCL, 0600, value)`.
    pub(crate) fn create(name: &str, value: u32) -> io::Result<GlibcSemaphore> {
        let name = c_name(name)?;
        // SAFETY: `name` is a valid C string; with O_CREAT, sem_open reads
        // exactly the two variadic arguments given (mode_t, unsigned int).
        let raw = unsafe {
            libc::sem_open(
                name.as_ptr(),
                libc::O_CREAT | libc::O_EXCL,
                0o600 as libc::mode_t,
                value as libc::c_uint,
            )
        };
        let sem = NonNull::new(raw).ok_or_else(io::Error::last_os_error)?;
        Ok(GlibcSemaphore {
            sem,
            name,
            owner: true,
        })
    }

    /// `sem_open(name, 0)`, retried until the creator has made it or
    /// `wait` has passed.
    pub(crate) fn open_wait(name: &str, wait: Duration) -> io::Result<GlibcSemaphore> {
        let name = c_name(name)?;
        let start = Instant::now();
        loop {
            // SAFETY: `name` is a valid C string; without O_CREAT no
            // variadic argument is read.
            let raw = unsafe { libc::sem_open(name.as_ptr(), 0) };
            if let Some(sem) = NonNull::new(raw) {
                return Ok(GlibcSemaphore {
                    sem,
                    name,
                    owner: false,
                });
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::NotFound || start.elapsed() >= wait {
                return Err(error);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// `sem_unlink` now, once the peers have it open: the name is gone and
    /// nothing is left even if the run is killed.
    pub(crate) fn unlink_now(&self) -> io::Result<()> {
        // SAFETY: `self.name` is a valid C string.
        if unsafe { libc::sem_unlink(self.name.as_ptr()) } == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// `sem_post`.
    pub(crate) fn post(&self) -> io::Result<()> {
        // SAFETY: `self.sem` is open until drop.
        if unsafe { libc::sem_post(self.sem.as_ptr()) } == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// `sem_wait`, resumed after a signal.
    pub(crate) fn wait(&self) -> io::Result<()> {
        loop {
            // SAFETY: `self.sem` is open until drop.
            if unsafe { libc::sem_wait(self.sem.as_ptr()) } == 0 {
                return Ok(());
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }

    /// `sem_timedwait` until `timeout` from now (on the real-time clock, as
    /// `sem_timedwait` measures it), resumed after a signal.
    pub(crate) fn wait_timeout(&self, timeout: Duration) -> io::Result<()> {
        let now = rustix::time::clock_gettime(rustix::time::ClockId::Realtime);
        let nanos = now.tv_nsec as u64 + u64::from(timeout.subsec_nanos());
        let deadline = libc::timespec {
            tv_sec: (now.tv_sec as libc::time_t)
                .saturating_add(timeout.as_secs().min(i32::MAX as u64) as libc::time_t)
                .saturating_add((nanos / 1_000_000_000) as libc::time_t),
            tv_nsec: (nanos % 1_000_000_000) as libc::c_long,
        };
        loop {
            // SAFETY: `self.sem` is open until drop; `deadline` is valid.
            if unsafe { libc::sem_timedwait(self.sem.as_ptr(), &deadline) } == 0 {
                return Ok(());
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }
}

impl Drop for GlibcSemaphore {
    fn drop(&mut self) {
        // SAFETY: `self.sem` came from a successful sem_open and is closed
        // once; `self.name` is a valid C string.
        unsafe {
            libc::sem_close(self.sem.as_ptr());
            if self.owner {
                // Already gone after `unlink_now`: ENOENT is fine.
                libc::sem_unlink(self.name.as_ptr());
            }
        }
    }
}

fn c_name(name: &str) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::other(format!("semaphore name {name:?} holds a NUL")))
}
