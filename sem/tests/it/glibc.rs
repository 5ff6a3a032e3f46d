//! Our named semaphores against glibc's own `sem_open`, `sem_post` and
//! `sem_timedwait` on the same name, in one process: the same bytes, and
//! tokens and wake-ups crossing both ways (other processes, C and Python, in
//! `integration-tests/tests/it/shm_sem_processes.rs`).

use std::ffi::CString;
use std::os::unix::fs::PermissionsExt;
use std::ptr::NonNull;
use std::thread;
use std::time::{Duration, Instant};

use nodeipc_sem::{NamedSemaphore, Semaphore};
use nodeipc_testkit::{Watchdog, shm_leftovers, unique_name};

fn sem_file(name: &str) -> String {
    format!("/dev/shm/sem.{}", &name[1..])
}

/// A semaphore opened through glibc, closed (and, if we made it, unlinked) on drop.
struct Glibc {
    sem: NonNull<libc::sem_t>,
    unlink: Option<CString>,
}

// SAFETY: glibc's semaphore calls are thread-safe; the mapping lives until sem_close.
unsafe impl Send for Glibc {}
// SAFETY: as for Send.
unsafe impl Sync for Glibc {}

impl Glibc {
    fn open(name: &str) -> Glibc {
        let c_name = CString::new(name).unwrap();
        // SAFETY: a valid C string; without O_CREAT no variadic argument is read.
        let sem = unsafe { libc::sem_open(c_name.as_ptr(), 0) };
        Glibc {
            sem: NonNull::new(sem).expect("glibc sem_open"),
            unlink: None,
        }
    }

    fn create(name: &str, value: u32) -> Glibc {
        let c_name = CString::new(name).unwrap();
        // SAFETY: a valid C string; with O_CREAT sem_open reads the mode and
        // the value, both given.
        let sem = unsafe {
            libc::sem_open(
                c_name.as_ptr(),
                libc::O_CREAT | libc::O_EXCL,
                0o600 as libc::mode_t,
                value as libc::c_uint,
            )
        };
        Glibc {
            sem: NonNull::new(sem).expect("glibc sem_open(O_CREAT)"),
            unlink: Some(c_name),
        }
    }

    fn post(&self) {
        // SAFETY: open until drop.
        assert_eq!(unsafe { libc::sem_post(self.sem.as_ptr()) }, 0);
    }

    fn value(&self) -> i32 {
        let mut value = -1;
        // SAFETY: open until drop; `value` is a valid out-pointer.
        let rc = unsafe { libc::sem_getvalue(self.sem.as_ptr(), &mut value) };
        assert_eq!(rc, 0);
        value
    }

    /// `sem_timedwait` for up to `seconds` on the realtime clock, as C peers wait.
    fn timed_wait(&self, seconds: i64) -> bool {
        let mut deadline = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid out-pointer.
        unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut deadline) };
        deadline.tv_sec += seconds;
        loop {
            // SAFETY: open until drop; `deadline` is a valid timespec.
            if unsafe { libc::sem_timedwait(self.sem.as_ptr(), &deadline) } == 0 {
                return true;
            }
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return false;
            }
        }
    }
}

impl Drop for Glibc {
    fn drop(&mut self) {
        // SAFETY: opened by sem_open, closed once.
        unsafe { libc::sem_close(self.sem.as_ptr()) };
        if let Some(name) = &self.unlink {
            // SAFETY: a valid C string.
            unsafe { libc::sem_unlink(name.as_ptr()) };
        }
    }
}

#[test]
fn our_semaphore_file_is_byte_for_byte_what_glibc_sem_open_writes() {
    for value in [0, 5, nodeipc_sem::SEM_VALUE_MAX] {
        let (ours, theirs) = (
            unique_name("sem-bytes-ours"),
            unique_name("sem-bytes-glibc"),
        );
        let sem = NamedSemaphore::create(&ours, value).unwrap();
        let glibc = Glibc::create(&theirs, value);
        let ours_bytes = std::fs::read(sem_file(&ours)).unwrap();
        assert_eq!(ours_bytes.len(), 32);
        assert_eq!(ours_bytes, std::fs::read(sem_file(&theirs)).unwrap());
        let mode = std::fs::metadata(sem_file(&ours))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o600);
        // Each side reads the other's.
        assert_eq!(
            NamedSemaphore::open(&theirs).unwrap().value().unwrap(),
            value
        );
        assert_eq!(Glibc::open(&ours).value(), value as i32);
        drop((sem, glibc));
        assert!(shm_leftovers(&ours).is_empty() && shm_leftovers(&theirs).is_empty());
    }
}

#[test]
fn glibc_and_our_code_hand_tokens_and_wake_ups_both_ways() {
    let _dog = Watchdog::new("glibc interop", Duration::from_secs(30));
    let name = unique_name("sem-glibc");
    let ours = NamedSemaphore::create(&name, 0).unwrap();
    let glibc = Glibc::open(&name);

    glibc.post();
    assert_eq!(ours.value().unwrap(), 1);
    assert!(ours.try_wait().unwrap());
    ours.post().unwrap();
    assert_eq!(glibc.value(), 1);
    assert!(glibc.timed_wait(1));

    for round in 0..50 {
        // A glibc waiter parked on the futex, woken by our post.
        thread::scope(|s| {
            let waiter = s.spawn(|| glibc.timed_wait(10));
            thread::sleep(Duration::from_millis(if round == 0 { 50 } else { 1 }));
            ours.post().unwrap();
            assert!(
                waiter.join().unwrap(),
                "round {round}: glibc waiter not woken"
            );
        });
        // Our waiter parked on the futex, woken by glibc's post.
        thread::scope(|s| {
            let start = Instant::now();
            let waiter = s.spawn(|| ours.wait_timeout(Duration::from_secs(10)));
            thread::sleep(Duration::from_millis(if round == 0 { 50 } else { 1 }));
            glibc.post();
            waiter.join().unwrap().unwrap();
            assert!(start.elapsed() < Duration::from_secs(5));
        });
    }
    assert_eq!((ours.value().unwrap(), glibc.value()), (0, 0));
    drop(glibc);
    drop(ours);
    assert!(shm_leftovers(&name).is_empty());
}
