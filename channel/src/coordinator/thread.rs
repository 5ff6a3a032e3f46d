//! The response thread, which gathers every response and hands it to the
//! handler, and the coordinator's drop, which stops that thread before it
//! tells the workers the channel is closed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;

use nodeipc_shm::wait::{Deadline, Spin, wait_while, wake_if_parked};

use super::gather::Slot;
use super::liveness::Waiter;
use super::{Check, Coordinator, ResponseHandler, ResponseThread, Shared};
use crate::aggregate::Aggregate;
use crate::layout;
use crate::mode::Mode;
use crate::payload::Payload;
use crate::sem_kind::{Direction, Role};
use crate::wait::{self, Budget, Wait};
use crate::{Error, Result};

/// What the response thread does after an error that breaks a gather (a
/// dead worker, a timeout). The handler hears of every error either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ThreadPolicy {
    /// End the thread (restart it with `start_response_thread` once the
    /// cause is dealt with).
    #[default]
    StopOnError,
    /// Log the error (the `log` facade, level warn) and go on gathering,
    /// pausing one wait slice (50 ms) first so a lasting cause (a dead
    /// worker) is not retried in a busy loop: MindIE's behaviour.
    LogAndContinue,
}

impl<Req, Resp> Coordinator<Req, Resp>
where
    Req: prost::Message + Default + 'static,
    Resp: prost::Message + Default + 'static,
{
    /// Registers the handler the response thread calls with every aggregated
    /// response (or an error).
    ///
    /// # Errors
    /// [`Error::ResponseThread`] if one is registered already.
    pub fn on_response(
        &mut self,
        handler: impl FnMut(Result<Resp>) + Send + 'static,
    ) -> Result<()> {
        if self.handler_mut().is_some() || self.thread.is_some() {
            return Err(self.thread_error("a response handler is registered already"));
        }
        *self.handler_mut() = Some(Box::new(handler));
        Ok(())
    }

    /// Starts a thread that gathers every response (an
    /// [`Aggregated`](crate::Aggregated) gather for each request sent) and
    /// calls the handler with it. The thread ends
    /// by itself after an error that breaks the channel (a dead worker, a
    /// timeout); after an error of one response it goes on. See
    /// [`start_response_thread_with`](Coordinator::start_response_thread_with)
    /// to go on after every error.
    ///
    /// # Errors
    /// [`Error::ResponseThread`] without a handler or an aggregation rule,
    /// or when already running; [`Error::Io`] if the thread cannot be spawned.
    pub fn start_response_thread(&mut self) -> Result<()> {
        self.start_response_thread_with(ThreadPolicy::StopOnError)
    }

    /// [`start_response_thread`](Coordinator::start_response_thread) with a
    /// policy for errors that break a gather.
    ///
    /// # Errors
    /// As [`start_response_thread`](Coordinator::start_response_thread).
    pub fn start_response_thread_with(&mut self, policy: ThreadPolicy) -> Result<()> {
        if self.thread.is_some() {
            return Err(self.thread_error("the response thread is running already"));
        }
        if self.handler_mut().is_none() {
            return Err(
                self.thread_error("no response handler is registered (call on_response first)")
            );
        }
        let Some(aggregate) = self.rule_mut().take() else {
            return Err(self.thread_error(
                "no aggregation rule for these messages (call set_aggregate first)",
            ));
        };
        let handler = self.handler_mut().take().expect("checked above");
        self.shared.thread_starts();
        let shared = Arc::clone(&self.shared);
        let check = self.check;
        let spawned = thread::Builder::new()
            .name(format!("nodeipc-responses {}", self.shared.config.name))
            .spawn(move || {
                let (handler, aggregate) =
                    response_loop(&shared, handler, aggregate, check, policy);
                (handler, Some(aggregate))
            });
        match spawned {
            Ok(handle) => {
                self.thread = Some(ResponseThread { handle });
                Ok(())
            }
            Err(source) => Err(Error::Io {
                context: format!("channel {}", self.shared.config.name),
                op: "spawn response thread",
                source,
            }),
        }
    }
}

impl<Req: Payload, Resp: Payload> Coordinator<Req, Resp> {
    /// Stops the response thread and waits for it (within one wait slice);
    /// the handler stays registered for a later start.
    ///
    /// # Errors
    /// [`Error::ResponseThread`] if it is not running, or when called from
    /// inside the handler (the thread cannot wait for itself: a raw
    /// handler returns `ControlFlow::Break` instead).
    pub fn stop_response_thread(&mut self) -> Result<()> {
        if in_handler() {
            return Err(self
                .thread_error("stop_response_thread was called from inside the response handler"));
        }
        let Some(thread) = self.thread.take() else {
            return Err(self.thread_error("the response thread is not running"));
        };
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.wake_idle();
        let joined = thread.handle.join();
        self.shared.crowded.store(false, Ordering::SeqCst);
        self.shared.recording.store(false, Ordering::SeqCst);
        self.shared.helping.store(false, Ordering::SeqCst);
        self.shared.modes.clear();
        match joined {
            Ok((handler, rule)) => {
                *self.handler_mut() = Some(handler);
                if rule.is_some() {
                    *self.rule_mut() = rule;
                }
                Ok(())
            }
            Err(_) => Err(self.thread_error("the response handler panicked")),
        }
    }

    /// Takes the registered response handler out, so that another can be
    /// registered (a binding's new callback); `None` if there was none.
    ///
    /// # Errors
    /// [`Error::ResponseThread`] while the thread runs (it holds the
    /// handler; stop it first).
    pub fn remove_response_handler(&mut self) -> Result<Option<ResponseHandler<Resp>>> {
        if self.thread.is_some() {
            return Err(self.thread_error(
                "the response thread is running: stop it before removing its handler",
            ));
        }
        Ok(self.handler_mut().take())
    }

    /// Whether the response thread is running (it ends by itself after an
    /// error that breaks the channel, under [`ThreadPolicy::StopOnError`]).
    pub fn response_thread_running(&self) -> bool {
        self.thread
            .as_ref()
            .is_some_and(|t| !t.handle.is_finished())
    }
}

thread_local! {
    /// Set while this thread runs a response handler.
    static IN_HANDLER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread is inside a response handler: there a send
/// may not wait (the ring frees only as this very thread gathers) and the
/// thread may not be stopped (it would wait for itself).
pub(super) fn in_handler() -> bool {
    IN_HANDLER.with(std::cell::Cell::get)
}

/// Runs `handler` marked as a response handler's call (see [`in_handler`]).
pub(super) fn as_handler<T>(handler: impl FnOnce() -> T) -> T {
    struct Unmark;
    impl Drop for Unmark {
        fn drop(&mut self) {
            IN_HANDLER.with(|flag| flag.set(false));
        }
    }
    IN_HANDLER.with(|flag| flag.set(true));
    let _unmark = Unmark;
    handler()
}

impl<Req, Resp: Payload> Drop for Coordinator<Req, Resp> {
    fn drop(&mut self) {
        if self.shared.born.is_forked() {
            // A child's copy of its parent's channel: the response thread
            // is the parent's (none runs here, so none is stopped or
            // joined, and what it holds is leaked), and so is the channel,
            // which stays open for the workers. Unmap and close only.
            std::mem::forget(self.thread.take());
            return;
        }
        if let Some(thread) = self.thread.take() {
            self.shared.stop.store(true, Ordering::SeqCst);
            self.shared.wake_idle();
            // Dropped by its own handler (a C callback freeing the handle):
            // the thread cannot wait for itself; it ends once the handler
            // returns (it holds its own reference to what it uses).
            if !in_handler() {
                let _ = thread.handle.join();
            }
        }
        self.shared.recording.store(false, Ordering::SeqCst);
        // Wake every worker waiting for a request: they see the channel closed.
        layout::request_header(&self.shared.request)
            .closed
            .store(1, Ordering::SeqCst);
        for rank in 0..self.shared.config.workers {
            let _ = self
                .shared
                .sem(Direction::Request, Role::Consume, rank)
                .post();
        }
    }
}

#[allow(clippy::type_complexity)]
fn response_loop<Resp: prost::Message + Default + 'static>(
    shared: &Shared,
    mut handler: ResponseHandler<Resp>,
    mut aggregate: Box<dyn Aggregate<Resp> + Send>,
    check: Check<Resp>,
    policy: ThreadPolicy,
) -> (ResponseHandler<Resp>, Box<dyn Aggregate<Resp> + Send>) {
    let channel = &shared.config.name;
    while !shared.stop.load(Ordering::SeqCst) {
        if !shared.has_work() {
            continue;
        }
        let mut wait = Wait::Within(Budget::new(shared.config.timeout));
        let gathered = shared.gather_frames(Waiter::ResponseThread, Mode::Aggregated, &mut wait);
        match gathered {
            Ok(answers) => {
                let gathered = answers
                    .expect("a gather that may wait gathers or fails")
                    .every();
                let all = super::gather::decode_all(channel, &gathered, Slot::Response, check);
                drop(gathered);
                as_handler(|| handler(all.and_then(|all| aggregate.aggregate(all))));
            }
            // One response unusable (corrupt, a failure status): every slot
            // was consumed, the channel is in step; the handler hears it.
            Err(e) if !breaks_gather(&e) => as_handler(|| handler(Err(e))),
            // Asked to stop mid-gather: what was gathered stays for the
            // next gather, and the handler hears nothing.
            Err(_) if shared.stop.load(Ordering::SeqCst) => break,
            Err(e) => {
                let shown = e.to_string();
                as_handler(|| handler(Err(e)));
                match policy {
                    ThreadPolicy::StopOnError => break,
                    ThreadPolicy::LogAndContinue => {
                        log::warn!("channel {channel}: response thread goes on after: {shown}");
                        shared.pause_after_error();
                    }
                }
            }
        }
    }
    (handler, aggregate)
}

/// Whether a gather error is the channel's (the thread's policy decides)
/// rather than one response's (the thread always goes on).
pub(super) fn breaks_gather(error: &Error) -> bool {
    !matches!(
        error,
        Error::Corrupt { .. }
            | Error::Decode { .. }
            | Error::WorkerFailed { .. }
            | Error::UnknownMessageType { .. }
    )
}

impl Shared {
    /// Before the response thread starts: no stop asked, and whether the
    /// busy threads outnumber the cores (as the barrier judges its ranks).
    /// Returns the cores this process may use.
    pub(super) fn thread_starts(&self) -> usize {
        self.stop.store(false, Ordering::SeqCst);
        let cores = thread::available_parallelism().map_or(1, |n| n.get());
        let busy = 2 + self.config.workers as usize;
        self.crowded.store(busy > cores, Ordering::SeqCst);
        cores
    }

    /// How the coordinator's waits poll and yield before they sleep.
    pub(super) fn spin(&self) -> Spin {
        if self.crowded.load(Ordering::Relaxed) {
            Spin::OVERSUBSCRIBED
        } else {
            Spin::DEFAULT
        }
    }

    /// How a wait that only the coordinator's other thread can end spins:
    /// sharing a core with that thread, it yields at once (polling would
    /// only keep the thread it waits for off the core); otherwise as
    /// [`spin`](Shared::spin).
    pub(super) fn spin_for_peer(&self) -> Spin {
        if self.crowded.load(Ordering::Relaxed) {
            Spin {
                polls: 0,
                ..Spin::OVERSUBSCRIBED
            }
        } else {
            Spin::DEFAULT
        }
    }

    /// Whether the response thread has a request to hand out: one sent and
    /// not gathered, or one the sender gathered ahead; `false` after an
    /// idle wait (look again, or stop).
    pub(super) fn has_work(&self) -> bool {
        // Looked at before `sent`: a send after that look changes the word,
        // and the wait below returns at once.
        let seen = self.idle.seen();
        if self.ahead_len.load(Ordering::Acquire) > 0
            || self.next_gather.load(Ordering::Acquire) < self.sent.load(Ordering::SeqCst)
        {
            return true;
        }
        if !self.stop.load(Ordering::SeqCst) {
            self.idle.wait(seen, self.spin_for_peer());
        }
        false
    }

    /// One wait slice, cut short by a stop (or a send).
    pub(super) fn pause_after_error(&self) {
        let seen = self.idle.seen();
        if !self.stop.load(Ordering::SeqCst) {
            self.idle.wait(seen, self.spin_for_peer());
        }
    }

    /// Wakes the response thread to see a stop.
    pub(super) fn wake_idle(&self) {
        self.idle.changed();
    }
}

/// Where an idle response thread waits: a word every send and every stop
/// changes, waited on as a semaphore is (polls, then yields, then the
/// futex). A send pays a locked add and a load while the thread is awake,
/// a wake-up only while it sleeps; the thread, between two sends a few
/// microseconds apart, finds the change without sleeping. (A condition
/// variable had it sleep each time it caught up with the sender, and the
/// sender pay a system call to wake it.)
#[derive(Debug, Default)]
pub(super) struct Idle {
    changes: AtomicU32,
    parked: AtomicU32,
}

impl Idle {
    fn seen(&self) -> u32 {
        self.changes.load(Ordering::SeqCst)
    }

    /// After a send or a stop: the word changes, a sleeper wakes.
    pub(super) fn changed(&self) {
        self.changes.fetch_add(1, Ordering::SeqCst);
        let _ = wake_if_parked(&self.changes, &self.parked, u32::MAX);
    }

    /// Until the word is no longer `seen`, a slice at most.
    fn wait(&self, seen: u32, spin: Spin) {
        let mut deadline = Deadline::after(Some(wait::SLICE));
        let _ = wait_while(
            &self.changes,
            &self.parked,
            seen,
            &mut deadline,
            spin,
            || Ok::<(), std::convert::Infallible>(()),
        );
    }
}
