//! The response thread of a [`Raw`] coordinator: each request's answers
//! gathered in the mode recorded when it was sent, handed to the handler
//! as a [`Reply`] in send order — what the C ABI's and the C++ classes'
//! response threads are.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread;

use super::answers::{Answers, Gathered, Picked};
use super::gather::{ModeOf, Next};
use super::liveness::Waiter;
use super::thread::{ThreadPolicy, as_handler, breaks_gather};
use super::{Coordinator, ResponseHandler, ResponseThread, Shared};
use crate::mode::Mode;
use crate::payload::Raw;
use crate::wait::{Budget, Wait};
use crate::{Error, Result};

/// One request's answers as a [`Raw`] coordinator's response thread hands
/// them to its handler: valid during the call only.
pub struct Reply<'c> {
    /// The request's index, as its send returned it.
    pub id: u64,
    /// The mode it was gathered in (recorded at its send).
    pub mode: Mode,
    /// Its answers: every worker's ([`Answers::All`] for [`Mode::All`] and
    /// [`Mode::Init`]) or one ([`Answers::One`]: the first, rank 0's, or
    /// the one the channel's [`Pick`](crate::Pick) rule chose); or why the
    /// gather failed (a dead worker, a timeout, a corrupt frame, the rule's
    /// error).
    pub answers: Result<Answers<'c>>,
}

impl Coordinator<Raw, Raw> {
    /// Registers the handler the response thread calls with every request's
    /// [`Reply`], in send order, one call at a time. Returning
    /// `ControlFlow::Break(())` ends the thread after the call.
    ///
    /// Inside the handler a send may not wait ([`try_send`](Coordinator::try_send)
    /// only: the ring frees as this very thread gathers), and no gather or
    /// [`stop_response_thread`](Coordinator::stop_response_thread) is
    /// allowed: each is refused with [`Error::ResponseThread`].
    ///
    /// # Errors
    /// [`Error::ResponseThread`] if one is registered already.
    pub fn on_response(
        &mut self,
        handler: impl for<'c> FnMut(Reply<'c>) -> ControlFlow<()> + Send + 'static,
    ) -> Result<()> {
        if self.handler_mut().is_some() || self.thread.is_some() {
            return Err(self.thread_error("a response handler is registered already"));
        }
        *self.handler_mut() = Some(Box::new(handler));
        Ok(())
    }

    /// The mode requests sent from now on are gathered in by the response
    /// thread ([`Mode::Aggregated`] until set: the channel's
    /// [`Pick`](crate::Pick) rule). Called by the sending thread before a
    /// send, it sets that send's mode: each request keeps the mode it was
    /// sent with.
    pub fn set_response_mode(&self, mode: Mode) {
        self.shared
            .response_mode
            .store(mode as u8, Ordering::SeqCst);
    }

    /// The mode requests are recorded for when sent.
    pub fn response_mode(&self) -> Mode {
        self.shared.response_mode()
    }

    /// Starts the response thread: for each request sent, in send order, it
    /// gathers the answers in the request's mode (see
    /// [`set_response_mode`](Coordinator::set_response_mode); requests
    /// sent before the start take the mode set now), calls the handler with
    /// them, and for [`Mode::First`] then drains the slower workers'
    /// answers itself. After an error that breaks a gather (a dead worker, a
    /// timeout) it ends; see
    /// [`start_response_thread_with`](Coordinator::start_response_thread_with).
    /// While it runs, every gather and drain of the coordinator is refused
    /// ([`Error::ResponseThread`]); sends go on from one other thread, and
    /// may take answers out for the thread while they wait for a frame (see
    /// [`set_gather_ahead`](Coordinator::set_gather_ahead)).
    ///
    /// # Errors
    /// [`Error::ResponseThread`] without a handler or when running already;
    /// [`Error::Io`] if the thread cannot be spawned.
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
        let Some(handler) = self.handler_mut().take() else {
            return Err(
                self.thread_error("no response handler is registered (call on_response first)")
            );
        };
        let rule = self.rule_mut().take();
        self.shared.modes.clear();
        self.shared.recording.store(true, Ordering::SeqCst);
        let cores = self.shared.thread_starts();
        self.shared.gathers_ahead_from_now(cores);
        let shared = Arc::clone(&self.shared);
        let fallback = self.response_mode();
        let spawned = thread::Builder::new()
            .name(format!("nodeipc-responses {}", self.shared.config.name))
            .spawn(move || raw_loop(&shared, handler, rule, fallback, policy));
        match spawned {
            Ok(handle) => {
                self.thread = Some(ResponseThread { handle });
                Ok(())
            }
            Err(source) => {
                self.shared.recording.store(false, Ordering::SeqCst);
                self.shared.helping.store(false, Ordering::SeqCst);
                Err(Error::Io {
                    context: format!("channel {}", self.shared.config.name),
                    op: "spawn response thread",
                    source,
                })
            }
        }
    }
}

type RawRule = Option<Box<dyn crate::Pick + Send>>;

fn raw_loop(
    shared: &Shared,
    mut handler: ResponseHandler<Raw>,
    mut rule: RawRule,
    fallback: Mode,
    policy: ThreadPolicy,
) -> (ResponseHandler<Raw>, RawRule) {
    raw_replies(shared, &mut handler, &mut rule, fallback, policy);
    // No send gathers ahead for a thread that has ended: what is queued
    // stays for the coordinator's next gather.
    shared.helping.store(false, Ordering::SeqCst);
    (handler, rule)
}

fn raw_replies(
    shared: &Shared,
    handler: &mut ResponseHandler<Raw>,
    rule: &mut RawRule,
    fallback: Mode,
    policy: ThreadPolicy,
) {
    let channel = &shared.config.name;
    while !shared.stop.load(Ordering::SeqCst) {
        if !shared.has_work() {
            continue;
        }
        let mut wait = Wait::Within(Budget::new(shared.config.timeout));
        let Next {
            index: next,
            mode,
            answers,
        } = shared.gather_next(
            Waiter::ResponseThread,
            ModeOf::Recorded(fallback),
            &mut wait,
        );
        let gathered =
            answers.map(|answers| answers.expect("a gather that may wait gathers or fails"));
        let failed = match gathered {
            Ok(answers) => {
                // Every answer is taken: an error of the rule's (or of its
                // absence) is this request's alone, the channel is in step.
                let reply = Reply {
                    id: next,
                    mode,
                    answers: finish(shared, mode, answers, rule),
                };
                let flow = as_handler(|| handler(reply));
                // The slower workers' answers to a First request: taken
                // here, so no send has to (and none waits on this thread).
                let drained = match mode {
                    Mode::First => shared.drain(Waiter::ResponseThread, &mut wait).map(drop),
                    _ => Ok(()),
                };
                if flow.is_break() {
                    break;
                }
                match drained {
                    Ok(()) => continue,
                    Err(_) if shared.stop.load(Ordering::SeqCst) => break,
                    // The slower workers of this same request.
                    Err(e) => (e, next),
                }
            }
            Err(_) if shared.stop.load(Ordering::SeqCst) => break,
            Err(e) => (e, next),
        };
        let (error, id) = failed;
        let breaks = breaks_gather(&error);
        let shown = error.to_string();
        let reply = Reply {
            id,
            mode,
            answers: Err(error),
        };
        if as_handler(|| handler(reply)).is_break() {
            break;
        }
        if breaks {
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

/// The answers of a gather in `mode` as the handler gets them: the rule's
/// pick for [`Mode::Aggregated`], rank 0's for [`Mode::Rank0AfterAll`].
fn finish<'c>(
    shared: &'c Shared,
    mode: Mode,
    answers: Answers<'c>,
    rule: &mut RawRule,
) -> Result<Answers<'c>> {
    let channel = &shared.config.name;
    Ok(match mode {
        Mode::All | Mode::Init | Mode::First => answers,
        Mode::Rank0AfterAll => Answers::One(answers.every().into_picked(channel, 0)?),
        Mode::Aggregated => {
            let gathered: Gathered<'c> = answers.every();
            let Some(rule) = rule.as_mut() else {
                return Err(Error::ResponseThread {
                    channel: channel.clone(),
                    reason: "no aggregation rule for a request sent in mode aggregated \
                             (call set_aggregate first)",
                });
            };
            let rank = rule.pick(&gathered)?;
            let picked: Picked<'c> = gathered.into_picked(channel, rank)?;
            Answers::One(picked)
        }
    })
}

impl Shared {
    pub(super) fn response_mode(&self) -> Mode {
        Mode::from_number(u32::from(self.response_mode.load(Ordering::SeqCst)))
            .unwrap_or(Mode::Aggregated)
    }
}
