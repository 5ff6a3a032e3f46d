//! A bounded wait that signals interrupt keeps its deadline: it neither ends
//! early (with a timeout or an `EINTR` error) nor starts its timeout over.
//!
//! The handler is installed without `SA_RESTART` so the kernel really breaks
//! off `sem_clockwait` and `FUTEX_WAIT` with `EINTR`. It is process-wide, so
//! the test runs it in a child: the test binary again, told so by an
//! environment variable.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use nodeipc_sem::{Error, NamedSemaphore, Semaphore, ShmSemaphore};
use nodeipc_shm::Region;
use nodeipc_testkit::{Watchdog, shm_leftovers, spawn_child, unique_name};

/// Set in the child: the name of the named semaphore it creates.
const CHILD: &str = "NODEIPC_SEM_TEST_INTERRUPTED_CHILD";

/// How long each wait is given.
const WAIT: Duration = Duration::from_millis(300);
/// How much later than [`WAIT`] a wait may end on a loaded 2-core machine.
const MARGIN: Duration = Duration::from_secs(3);
/// Time between two signals to the waiting thread.
const SIGNAL_EVERY: Duration = Duration::from_millis(40);
/// When the signals stop at the latest: past `WAIT + MARGIN`, so a wait that
/// started its timeout over at every signal ends too late and is caught.
const SIGNAL_FOR: Duration = Duration::from_secs(5);

/// Signals handled so far.
static HANDLED: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_signal(_: libc::c_int) {
    // An atomic add is async-signal-safe.
    HANDLED.fetch_add(1, Ordering::Relaxed);
}

/// Installs [`on_signal`] for `SIGUSR1`, without `SA_RESTART`.
fn install_handler() {
    // SAFETY: `sigaction` is plain old data; all zeroes is an empty mask and no flags.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // No SA_RESTART: interrupted calls fail with EINTR.
    action.sa_flags = 0;
    // SAFETY: `action.sa_mask` is a valid, writable sigset_t.
    let rc = unsafe { libc::sigemptyset(&mut action.sa_mask) };
    assert_eq!(rc, 0, "sigemptyset failed");
    // SAFETY: `action` is initialised and its handler only touches an atomic;
    // a null old-action pointer is allowed.
    let rc = unsafe { libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut()) };
    assert_eq!(
        rc,
        0,
        "sigaction(SIGUSR1) failed: {}",
        std::io::Error::last_os_error()
    );
}

/// Runs `wait` on this thread while another thread sends it `SIGUSR1` every
/// [`SIGNAL_EVERY`], and checks it timed out after [`WAIT`], not early and not
/// much later, having been interrupted several times.
fn check_interrupted_wait(what: &str, wait: impl FnOnce(Duration) -> nodeipc_sem::Result<()>) {
    // SAFETY: pthread_self has no preconditions.
    let waiter = unsafe { libc::pthread_self() };
    let done = AtomicBool::new(false);
    HANDLED.store(0, Ordering::Relaxed);
    let (result, elapsed, sent) = std::thread::scope(|s| {
        let signaller = s.spawn(|| {
            let start = Instant::now();
            let mut sent = 0usize;
            while !done.load(Ordering::Acquire) && start.elapsed() < SIGNAL_FOR {
                std::thread::sleep(SIGNAL_EVERY);
                if done.load(Ordering::Acquire) {
                    break;
                }
                // SAFETY: `waiter` is this scope's calling thread, alive until
                // the scope ends, and so after this thread is joined.
                let rc = unsafe { libc::pthread_kill(waiter, libc::SIGUSR1) };
                assert_eq!(rc, 0, "pthread_kill failed: {rc}");
                sent += 1;
            }
            sent
        });
        let start = Instant::now();
        let result = wait(WAIT);
        let elapsed = start.elapsed();
        done.store(true, Ordering::Release);
        (result, elapsed, signaller.join().unwrap())
    });
    let handled = HANDLED.load(Ordering::Relaxed);
    println!("{what}: {result:?} after {elapsed:?}; {sent} signals sent, {handled} handled");
    match result {
        Err(Error::Timeout { waited, .. }) => {
            assert!(
                waited >= WAIT,
                "{what}: reports {waited:?}, less than {WAIT:?}"
            )
        }
        other => panic!("{what}: expected a timeout, got {other:?}"),
    }
    assert!(
        elapsed >= WAIT,
        "{what}: timed out early, after {elapsed:?} of {WAIT:?}"
    );
    assert!(
        elapsed < WAIT + MARGIN,
        "{what}: timed out after {elapsed:?}, far past {WAIT:?}: a signal restarted the timeout"
    );
    assert!(
        handled >= 3,
        "{what}: only {handled} signals arrived during the wait; the test proved nothing"
    );
}

/// The child's part: both kinds of semaphore, interrupted.
fn child(name: &str) {
    install_handler();
    let named = NamedSemaphore::create(name, 0).unwrap();
    check_interrupted_wait("named", |d| named.wait_timeout(d));
    drop(named);
    let region = Region::anonymous(4096).unwrap();
    let futex: &ShmSemaphore = region.view(0).unwrap();
    futex.init(0);
    check_interrupted_wait("futex", |d| futex.wait_timeout(d));
}

/// Removes the named semaphore's file when dropped, whatever became of the child.
struct RemoveOnDrop(String);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(format!("/dev/shm/sem.{}", &self.0[1..]));
    }
}

#[test]
fn an_interrupted_wait_keeps_its_deadline() {
    if let Ok(name) = std::env::var(CHILD) {
        println!(); // our lines start after the harness's "test … ..."
        child(&name);
        return;
    }
    let _dog = Watchdog::new("interrupted wait", Duration::from_secs(90));
    let name = unique_name("sem-intr");
    let _guard = RemoveOnDrop(name.clone());
    let out = spawn_child(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                &nodeipc_testkit::test_path(
                    module_path!(),
                    "an_interrupted_wait_keeps_its_deadline",
                ),
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, &name)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .output_timeout(Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let context = format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the child failed: {context}");
    // The child really ran both checks (a filter that matched nothing would pass too).
    for what in ["named: Err(Timeout", "futex: Err(Timeout"] {
        assert!(
            stdout.lines().any(|l| l.starts_with(what)),
            "no `{what}` line: {context}"
        );
    }
    assert!(shm_leftovers(&name).is_empty(), "the child left {name}");
}
