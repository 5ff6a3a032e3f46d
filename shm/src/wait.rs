//! Waiting on words in shared memory: the one place futexes are called.
//!
//! Every waiter in nodeipc — the futex semaphore, glibc-layout named
//! semaphores, the barrier — waits the same way, cheapest first:
//!
//! 1. **Poll** the word with plain loads at a constant interval
//!    ([`Spin::polls`]): a peer on another core usually changes it within a
//!    few cache-line transfers, and an exponential back-off would leave gaps
//!    of microseconds between looks.
//! 2. **Yield** (crossbeam's `Backoff`, then `sched_yield`; or `sched_yield`
//!    alone where waiters outnumber cores, see [`Spin::snooze`]) for
//!    [`Spin::yield_for`], about what one futex wake-up costs: it gives the
//!    core away at once when another process wants it, so more processes
//!    than cores lose little, and it catches a change a few microseconds of
//!    work away without paying a wake-up.
//! 3. **Park** on the word as a shared futex (never `FUTEX_PRIVATE_FLAG`:
//!    waiters in different processes map it at different addresses and must
//!    meet on the same kernel futex), in slices of at most [`SLICE`], and
//!    between slices ask the caller whether to go on — is the peer alive,
//!    was the wait cancelled — so no wait outlives its peer by more than a
//!    slice.
//!
//! The clock is read only once polling has failed, and then once every
//! eight turns of yielding: on a virtual machine a clock read costs as much
//! as a cache-line round trip, and a third of a yield. (A wait so starts
//! counting its time a few turns late: microseconds, against limits of
//! milliseconds; a limit under 100 µs is looked at every turn.)
//!
//! A waker calls [`wake_if_parked`]: when nobody is parked that is a fence
//! and a load, no system call.

use std::cell::Cell;
use std::convert::Infallible;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_utils::Backoff;
use rustix::io::Errno;
use rustix::thread::futex;
use rustix::time::{ClockId, Timespec};

/// The longest a waiter stays parked before it asks its caller whether to
/// go on: how late a dead peer or a cancellation is noticed, at worst.
pub const SLICE: Duration = Duration::from_millis(50);

/// How many turns of a wait's yield phase go by between two looks at the
/// clock: a yield costs about 360 ns on the virtual machines we measure, a
/// clock read 120 ns. The yield phase may so outlast its bound by seven
/// turns (a few microseconds).
const CLOCK_TURNS: u32 = 8;

/// A wait limit under this is looked at on every turn of the yield phase
/// (a wait that may hardly wait at all should not yield eight times).
const SHORT_LIMIT: Duration = Duration::from_micros(100);

thread_local! {
    /// This thread's cancellation hook (see [`with_cancel_hook`]).
    static CANCEL_HOOK: Cell<Option<fn() -> bool>> = const { Cell::new(None) };
}

/// Runs `f` with `hook` as this thread's cancellation hook: every wait of
/// this module that `f` enters ([`wait_while`] between park slices,
/// [`Pacer::pause_interruptible`] between pauses of a millisecond or more)
/// asks it whether to stop, at least every [`SLICE`], and ends with
/// [`WaitError::Interrupted`] when it says yes. The previous hook is back
/// when `f` returns or unwinds.
///
/// A language binding's way to let its user interrupt a wait (Python runs
/// its signal handlers in the hook, so Ctrl-C ends a barrier) without
/// slicing the wait's timeout, which would change what a timeout means (a
/// barrier that times out poisons its group).
///
/// # Examples
/// ```
/// use std::sync::atomic::AtomicU32;
/// use std::time::Duration;
/// use nodeipc_shm::wait::{Deadline, Spin, WaitError, wait_while, with_cancel_hook};
///
/// let (word, parked) = (AtomicU32::new(0), AtomicU32::new(0));
/// let mut deadline = Deadline::after(Some(Duration::from_secs(60)));
/// let waited = with_cancel_hook(|| true, || {
///     wait_while(&word, &parked, 0, &mut deadline, Spin::DEFAULT, || Ok::<(), ()>(()))
/// });
/// assert!(matches!(waited, Err(WaitError::Interrupted(_))));
/// ```
pub fn with_cancel_hook<R>(hook: fn() -> bool, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<fn() -> bool>);
    impl Drop for Restore {
        fn drop(&mut self) {
            CANCEL_HOOK.with(|h| h.set(self.0));
        }
    }
    let _restore = Restore(CANCEL_HOOK.with(|h| h.replace(Some(hook))));
    f()
}

/// Whether this thread's cancellation hook, if any, asks the current wait
/// to stop. For waits outside this module (a `poll` in slices, say) that
/// should end as this module's do.
pub fn cancelled() -> bool {
    CANCEL_HOOK.with(Cell::get).is_some_and(|hook| hook())
}

/// How long a waiter polls and yields before it parks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spin {
    /// Looks at the word before yielding.
    pub polls: u32,
    /// Time spent yielding before parking.
    pub yield_for: Duration,
    /// Whether the first yields are short spins (crossbeam's `Backoff`:
    /// 1, 2, 4 … 64 `PAUSE`s, then `sched_yield`), which catch a change a
    /// few hundred nanoseconds away without a system call; or every yield is
    /// `sched_yield` at once, which hands the core over sooner to the peers
    /// that need it (more waiters than cores).
    pub snooze: bool,
}

impl Spin {
    /// A peer on another core: a few microseconds of polling, then 50 µs of
    /// yields, about one futex wake-up on a virtual machine. Semaphores use it.
    pub const DEFAULT: Spin = Spin {
        polls: 128,
        yield_for: Duration::from_micros(50),
        snooze: true,
    };

    /// Ranks of a barrier: they arrive at once, and the last arriver's
    /// change is worth waiting a little longer for than a wake-up per rank.
    pub const BARRIER: Spin = Spin {
        polls: 128,
        yield_for: Duration::from_micros(100),
        snooze: false,
    };

    /// More waiters than cores: the others need our core to make progress,
    /// so poll briefly and start yielding it soon.
    pub const OVERSUBSCRIBED: Spin = Spin {
        polls: 16,
        yield_for: Duration::from_micros(100),
        snooze: false,
    };
}

/// A limit on a wait, started lazily: the clock is read the first time the
/// wait looks at it (some turns into its yielding), not before.
#[derive(Clone, Copy, Debug)]
pub struct Deadline {
    limit: Option<Duration>,
    start: Option<Instant>,
}

impl Deadline {
    /// A wait of at most `limit` (`None`: no limit; a limit too large for
    /// the clock is no limit either).
    #[inline]
    pub const fn after(limit: Option<Duration>) -> Deadline {
        Deadline { limit, start: None }
    }

    /// When the wait started (now, if it had not yet).
    #[inline]
    pub fn start(&mut self) -> Instant {
        *self.start.get_or_insert_with(Instant::now)
    }

    /// How long the wait has lasted.
    #[inline]
    pub fn waited(&mut self) -> Duration {
        self.start().elapsed()
    }

    /// The time left (`None`: no limit), or `Err(waited)` once it has passed.
    #[inline]
    pub fn left(&mut self) -> Result<Option<Duration>, Duration> {
        let waited = self.waited();
        match self.limit {
            Some(limit) if waited >= limit => Err(waited),
            Some(limit) => Ok(Some(limit - waited)),
            None => Ok(None),
        }
    }
}

/// Why [`wait_while`] returned without seeing the word change.
#[derive(Debug)]
pub enum WaitError<E> {
    /// The deadline passed after this long.
    TimedOut(Duration),
    /// The caller's check between slices said to stop.
    Stopped(E),
    /// This thread's cancellation hook ([`with_cancel_hook`]) said to stop,
    /// after this long.
    Interrupted(Duration),
    /// `futex` failed with an errno a waiter does not expect (never an abort).
    Futex(Errno),
}

/// Waits while `word` holds `expected`: polls, yields, then parks on it in
/// slices of at most [`SLICE`], calling `between_slices` before each slice
/// (and so at least every [`SLICE`]); an error from it ends the wait.
/// `parked` counts the waiters asleep on `word`, for [`wake_if_parked`].
///
/// Returns once `word` was seen to differ from `expected`; what it holds
/// then is the caller's to look at (another waiter may have taken it).
///
/// # Errors
/// [`WaitError::TimedOut`], [`WaitError::Stopped`],
/// [`WaitError::Interrupted`], [`WaitError::Futex`].
///
/// # References
/// - [Linux `futex(2)`](https://man7.org/linux/man-pages/man2/futex.2.html), `FUTEX_WAIT`
pub fn wait_while<E>(
    word: &AtomicU32,
    parked: &AtomicU32,
    expected: u32,
    deadline: &mut Deadline,
    spin: Spin,
    mut between_slices: impl FnMut() -> Result<(), E>,
) -> Result<(), WaitError<E>> {
    let changed = || word.load(Ordering::Acquire) != expected;
    for _ in 0..spin.polls {
        std::hint::spin_loop();
        if changed() {
            return Ok(());
        }
    }
    let backoff = Backoff::new();
    let short = deadline.limit.is_some_and(|limit| limit < SHORT_LIMIT);
    let mut turn: u32 = 0;
    loop {
        if changed() {
            return Ok(());
        }
        // The clock once every `CLOCK_TURNS` turns, for both limits (every
        // turn under a short limit): on a virtual machine a clock read
        // costs a third of a yield, and a waiter handing its core to a
        // peer thread on every turn would pay it on every hand-off.
        if short || turn % CLOCK_TURNS == CLOCK_TURNS - 1 {
            let waited = deadline.waited();
            // A short limit ends the wait here, before anything parks.
            if deadline.limit.is_some_and(|limit| waited >= limit) {
                return Err(WaitError::TimedOut(waited));
            }
            if (!spin.snooze || backoff.is_completed()) && waited >= spin.yield_for {
                break;
            }
        }
        turn = turn.wrapping_add(1);
        if spin.snooze {
            backoff.snooze();
        } else {
            thread::yield_now();
        }
    }
    loop {
        if changed() {
            return Ok(());
        }
        if cancelled() {
            return Err(WaitError::Interrupted(deadline.waited()));
        }
        between_slices().map_err(WaitError::Stopped)?;
        let left = deadline.left().map_err(WaitError::TimedOut)?;
        let slice = left.map_or(SLICE, |left| left.min(SLICE));
        // Announce the sleeper before looking again: either the waker's
        // change comes first and we see it, or our announcement does and the
        // waker sees it (both SeqCst), and FUTEX_WAIT rechecks the word. The
        // fence pairs with a waker's own (store; SeqCst fence; load of
        // `parked`), the form the queue's loom models check (loom treats
        // SeqCst accesses as AcqRel, fences as SeqCst); on x86 the locked
        // add is a full barrier already, so it costs next to nothing, and
        // only here, on the way to sleep.
        parked.fetch_add(1, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        let slept = if word.load(Ordering::SeqCst) == expected {
            park_for(word, expected, Some(slice))
        } else {
            Ok(Parked::Woken)
        };
        parked.fetch_sub(1, Ordering::SeqCst);
        slept.map_err(WaitError::Futex)?;
    }
}

/// Wakes up to `count` waiters parked on `word` by [`wait_while`], after the
/// caller changed it; when `parked` says nobody sleeps, a fence and a load
/// and no system call. Returns how many were woken.
///
/// # Errors
/// The errno of `FUTEX_WAKE` (`EFAULT`, `EINVAL`: never expected).
#[inline]
pub fn wake_if_parked(word: &AtomicU32, parked: &AtomicU32, count: u32) -> Result<usize, Errno> {
    if parked.load(Ordering::SeqCst) == 0 {
        return Ok(0);
    }
    unpark(word, count)
}

/// How a futex wait ended without an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parked {
    /// Woken, or the word no longer held the expected value (`EAGAIN`), or a
    /// signal arrived (`EINTR`): the caller looks at the word again.
    Woken,
    /// The timeout or deadline passed (`ETIMEDOUT`).
    TimedOut,
}

/// What a futex wait returned: the three outcomes every waiter handles the
/// same way, or any other errno as an error (never an abort, as glibc's own
/// futex wrappers do on an errno they do not expect, `EINVAL` included).
fn parked(result: rustix::io::Result<()>) -> Result<Parked, Errno> {
    match result {
        Ok(()) | Err(Errno::AGAIN | Errno::INTR) => Ok(Parked::Woken),
        Err(Errno::TIMEDOUT) => Ok(Parked::TimedOut),
        Err(e) => Err(e),
    }
}

/// Sleeps while `word` holds `expected`, for at most `timeout` (`None`: no
/// limit): `FUTEX_WAIT` on a shared futex.
///
/// # Errors
/// An errno other than `EAGAIN`, `EINTR` and `ETIMEDOUT`.
#[doc(alias = "FUTEX_WAIT")]
pub fn park_for(
    word: &AtomicU32,
    expected: u32,
    timeout: Option<Duration>,
) -> Result<Parked, Errno> {
    let timespec = timeout.map(timespec);
    parked(futex::wait(
        word,
        futex::Flags::empty(),
        expected,
        timespec.as_ref(),
    ))
}

/// As [`park_for`], until an absolute `deadline` on the monotonic clock
/// (`FUTEX_WAIT_BITSET` matching any waker, as glibc's semaphores wait): a
/// wait interrupted and resumed keeps its deadline.
///
/// # Errors
/// As [`park_for`].
#[doc(alias = "FUTEX_WAIT_BITSET")]
pub fn park_until(
    word: &AtomicU32,
    expected: u32,
    deadline: Option<&Timespec>,
) -> Result<Parked, Errno> {
    const MATCH_ANY: NonZeroU32 = NonZeroU32::MAX;
    parked(futex::wait_bitset(
        word,
        futex::Flags::empty(),
        expected,
        deadline,
        MATCH_ANY,
    ))
}

/// The most words one [`park_any`] waits on (the kernel's `FUTEX_WAITV_MAX`).
pub const PARK_ANY_MAX: usize = 128;

/// Sleeps while every `word` holds its `expected` value, for at most
/// `timeout` (`None`: no limit): `futex_waitv` on shared 32-bit futexes, so a
/// consumer of several queues in several regions waits on all at once. The
/// caller announces itself on each word's parked count first, as
/// [`wait_while`] does for one word.
///
/// # Errors
/// `EINVAL` for more than [`PARK_ANY_MAX`] words or none; `ENOSYS` before
/// Linux 5.16; any errno other than `EAGAIN`, `EINTR` and `ETIMEDOUT`.
///
/// # References
/// - [Linux `futex_waitv(2)`](https://docs.kernel.org/userspace-api/futex2.html)
#[doc(alias = "futex_waitv")]
pub fn park_any(words: &[(&AtomicU32, u32)], timeout: Option<Duration>) -> Result<Parked, Errno> {
    if words.is_empty() || words.len() > PARK_ANY_MAX {
        return Err(Errno::INVAL);
    }
    let mut waiters = [futex::Wait::new(); PARK_ANY_MAX];
    for (waiter, (word, expected)) in waiters.iter_mut().zip(words) {
        waiter.val = u64::from(*expected);
        waiter.uaddr = futex::WaitPtr::new(word.as_ptr().cast());
        // Shared (no FUTEX2_PRIVATE): the words live in mappings of other processes.
        waiter.flags = futex::WaitFlags::SIZE_U32;
    }
    // futex_waitv takes an absolute deadline on the given clock.
    let deadline = timeout.map(deadline_after);
    match futex::waitv(
        &waiters[..words.len()],
        futex::WaitvFlags::empty(),
        deadline.as_ref(),
        ClockId::Monotonic,
    ) {
        Ok(_) => Ok(Parked::Woken),
        Err(e) => parked(Err(e)),
    }
}

/// Wakes up to `count` waiters parked on `word` (shared futex), whether or
/// not anyone is; see [`wake_if_parked`] for the cheap form. `u32::MAX`
/// (or any count past `i32::MAX`) wakes all.
///
/// # Errors
/// The errno of `FUTEX_WAKE`.
#[doc(alias = "FUTEX_WAKE")]
#[inline]
pub fn unpark(word: &AtomicU32, count: u32) -> Result<usize, Errno> {
    // The kernel reads the count as an `int`: past `i32::MAX` it would be
    // negative, and FUTEX_WAKE stops after the first waiter it wakes.
    futex::wake(word, futex::Flags::empty(), count.min(i32::MAX as u32))
}

/// The monotonic clock at its coarsest (`CLOCK_MONOTONIC_COARSE`, through
/// the vDSO: a few nanoseconds, no `rdtsc`; it advances once a kernel tick,
/// 1 to 10 ms), as nanoseconds. For a check that must run at least every so
/// many milliseconds on a path too hot for a full clock read (a queue's
/// push checks its consumer's liveness at least every [`SLICE`]).
///
/// # References
/// - [Linux `clock_gettime(2)`](https://man7.org/linux/man-pages/man2/clock_gettime.2.html), `CLOCK_MONOTONIC_COARSE`
#[doc(alias = "CLOCK_MONOTONIC_COARSE")]
#[inline]
pub fn coarse_now_ns() -> u64 {
    let t = rustix::time::clock_gettime(ClockId::MonotonicCoarse);
    (t.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(t.tv_nsec as u64)
}

/// The largest `struct timespec`: what a timeout too long for one becomes.
/// The kernel takes it (`poll`, `futex`) as a deadline it never reaches.
pub const TIMESPEC_MAX: Timespec = Timespec {
    tv_sec: i64::MAX,
    tv_nsec: 999_999_999,
};

/// A relative `timeout` as the `struct timespec` that `poll(2)`,
/// `futex(2)` and `sem_timedwait(3)` take.
///
/// No system call: rustix's `Timespec::try_from(Duration)`, saturated. A
/// timeout too long for a `timespec` (more than `i64::MAX` seconds)
/// becomes [`TIMESPEC_MAX`], in effect no limit — never a panic, a wrap to
/// a negative value the kernel refuses (`EINVAL`), or a shorter wait.
///
/// The one conversion of the tree: every crate above this one (fdpass,
/// handshake, the barrier's mesh, the monitor, the launcher) uses it for
/// its `poll`, `futex` and `sem_timedwait` timeouts.
///
/// # Errors
/// None: every `Duration` has a `timespec`.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use nodeipc_shm::wait::{TIMESPEC_MAX, timespec};
///
/// let t = timespec(Duration::from_millis(1500));
/// assert_eq!((t.tv_sec, t.tv_nsec), (1, 500_000_000));
/// assert_eq!(timespec(Duration::MAX), TIMESPEC_MAX);
/// ```
///
/// # References
/// - [Linux `timespec(3type)`](https://man7.org/linux/man-pages/man3/timespec.3type.html)
/// - [Linux `poll(2)`](https://man7.org/linux/man-pages/man2/poll.2.html)
/// - [Linux `futex(2)`](https://man7.org/linux/man-pages/man2/futex.2.html)
#[doc(alias = "struct timespec")]
#[doc(alias = "Timespec")]
pub fn timespec(timeout: Duration) -> Timespec {
    Timespec::try_from(timeout).unwrap_or(TIMESPEC_MAX)
}

/// The monotonic clock `timeout` from now, for [`park_until`]; a timeout past
/// what a `timespec` holds becomes the latest time it holds (no overflow, no
/// panic: in effect, no limit).
pub fn deadline_after(timeout: Duration) -> Timespec {
    let now = rustix::time::clock_gettime(ClockId::Monotonic);
    let nanos = now.tv_nsec as u64 + u64::from(timeout.subsec_nanos());
    let secs = i64::try_from(timeout.as_secs())
        .ok()
        .and_then(|s| now.tv_sec.checked_add(s))
        .and_then(|s| s.checked_add((nanos / 1_000_000_000) as i64));
    match secs {
        Some(tv_sec) => Timespec {
            tv_sec,
            tv_nsec: (nanos % 1_000_000_000) as i64,
        },
        None => TIMESPEC_MAX,
    }
}

/// Paces a loop that watches for something no futex announces (a name
/// appearing, peers joining, a slot filling): it yields while the pause is
/// shorter than a sleep's own cost, then sleeps, doubling the pause up to a
/// ceiling, and says when the time is up.
#[derive(Debug)]
pub struct Pacer {
    deadline: Deadline,
    pause: Duration,
    ceiling: Duration,
}

impl Pacer {
    /// Sleeping shorter than this costs more than it saves: yield instead.
    const YIELD_BELOW: Duration = Duration::from_micros(50);
    /// Pauses from which [`pause_interruptible`](Pacer::pause_interruptible)
    /// asks the cancellation hook.
    const CHECK_FROM: Duration = Duration::from_millis(1);

    /// Starts pacing now: pauses from `first` doubling up to `ceiling`, for
    /// at most `limit` (`None`: no limit).
    pub fn new(first: Duration, ceiling: Duration, limit: Option<Duration>) -> Pacer {
        let mut deadline = Deadline::after(limit);
        deadline.start();
        Pacer {
            deadline,
            pause: first,
            ceiling,
        }
    }

    /// Pauses once (never past the limit), or returns `Err(waited)` when the
    /// limit has passed.
    pub fn pause(&mut self) -> Result<(), Duration> {
        let left = self.deadline.left()?;
        let pause = left.map_or(self.pause, |left| left.min(self.pause));
        if pause < Self::YIELD_BELOW {
            thread::yield_now();
        } else {
            thread::sleep(pause);
        }
        self.pause = (self.pause * 2).min(self.ceiling);
        Ok(())
    }

    /// As [`pause`](Pacer::pause), asking this thread's cancellation hook
    /// ([`with_cancel_hook`]) first once the pauses have grown to a
    /// millisecond (a hook may cost microseconds: a Python binding takes
    /// the interpreter's lock in it).
    ///
    /// # Errors
    /// [`WaitError::TimedOut`] when the limit has passed,
    /// [`WaitError::Interrupted`] when the hook said to stop.
    pub fn pause_interruptible(&mut self) -> Result<(), WaitError<Infallible>> {
        if self.pause >= Self::CHECK_FROM && cancelled() {
            return Err(WaitError::Interrupted(self.waited()));
        }
        self.pause().map_err(WaitError::TimedOut)
    }

    /// How long it has been pacing.
    pub fn waited(&mut self) -> Duration {
        self.deadline.waited()
    }
}
