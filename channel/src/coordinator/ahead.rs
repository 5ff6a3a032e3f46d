//! Gathering ahead: a send waiting for a free request frame takes the
//! answers that are there out of the slots for the response thread, which
//! hands them out first, in send order, as if it had gathered them.

use std::sync::atomic::Ordering;
use std::sync::{MutexGuard, TryLockError};

use super::answers::{Answers, Gathered, Picked};
use super::gather::Slot;
use super::liveness::Waiter;
use super::{Coordinator, Gatherer, Shared};
use crate::layout::Layout;
use crate::mode::Mode;
use crate::payload::Raw;
use crate::sem_kind::{Direction, Role};
use crate::wait::Wait;
use crate::{Error, Result};

/// How many times a send gathering ahead polls for a free frame before it
/// waits as usual (a few microseconds), while workers have cores of their
/// own: polling on a core a worker needs would only delay the frame.
const AHEAD_POLLS: u32 = 128;

/// A request whose answers the sending thread gathered ahead.
pub(super) struct Ahead {
    pub(super) index: u64,
    /// The mode it was recorded in at its send.
    pub(super) mode: Mode,
    /// Every worker's frame, or the error one of them was.
    frames: Result<Vec<Vec<u8>>>,
}

/// How many bytes of answers the sending thread may hold gathered ahead
/// (counting every slot full), and how many requests at most: enough for
/// the response thread to be switched to once for dozens of small
/// requests, little memory for large ones.
const AHEAD_BYTES: usize = 1 << 20;
const AHEAD_MAX: usize = 64;

/// How many requests may be queued ahead for a channel of this shape.
pub(super) fn cap(layout: &Layout, workers: u32) -> usize {
    let answers_bytes = layout
        .response_slot_size
        .max(layout.init_slot_size)
        .saturating_mul(workers as usize)
        .max(1);
    (AHEAD_BYTES / answers_bytes).clamp(1, AHEAD_MAX)
}

/// When a send waiting for a free request frame takes answers out of the
/// slots itself, for the response thread to hand to the handler (see
/// [`Coordinator::set_gather_ahead`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(u8)]
pub enum GatherAhead {
    /// While the response thread shares a core with the sending thread:
    /// the sender, the thread and the workers outnumber the cores.
    #[default]
    WhenCrowded = 0,
    /// Whenever the response thread runs.
    Always = 1,
    /// Never: only the response thread takes answers out.
    Never = 2,
}

impl Coordinator<Raw, Raw> {
    /// When sends gather answers ahead for the response thread; takes
    /// effect at the thread's next start.
    ///
    /// A send that finds no free request frame waits for a worker to free
    /// one, which a worker whose answer slots are full does only once the
    /// response thread has taken an answer. With the thread on the
    /// sender's core, each such wait costs two thread switches, more than
    /// the requests it lets through. Gathering ahead, the send takes each
    /// answer that is there (never waiting for one) and queues it, up to
    /// 64 requests or 1 MiB of answer slots, so the worker goes on at once;
    /// while every worker has a core of its own, it also polls a few
    /// microseconds for the frame before it waits. The thread hands the
    /// queued requests to the handler first, in send order, exactly as it
    /// would have (id, mode, answers, errors); it is switched to once the
    /// queue is full or the sender waits, once for many requests. Only
    /// requests sent in a mode that takes every answer are gathered ahead
    /// ([`Mode::First`] ones wait for the thread). Requests still queued
    /// when the thread ends are the coordinator's next gathers.
    ///
    /// Measured with one worker at depth 4 on two cores (64-byte requests),
    /// [`GatherAhead::WhenCrowded`] gives the thread about 1.6 times
    /// lock-step's requests a second, against about 1.4 without.
    pub fn set_gather_ahead(&self, when: GatherAhead) {
        self.shared.gather_ahead.store(when as u8, Ordering::SeqCst);
    }
}

impl Shared {
    /// As the response thread starts, with `cores` for this process:
    /// whether sends gather ahead for it (see [`GatherAhead`]), and whether
    /// they poll while they do.
    pub(super) fn gathers_ahead_from_now(&self, cores: usize) {
        let helping = match self.gather_ahead.load(Ordering::SeqCst) {
            x if x == GatherAhead::WhenCrowded as u8 => self.crowded.load(Ordering::SeqCst),
            x if x == GatherAhead::Always as u8 => true,
            _ => false,
        };
        // The sender's core aside, one for each worker.
        let workers_have_cores = (self.config.workers as usize) < cores;
        let polls = if workers_have_cores { AHEAD_POLLS } else { 0 };
        self.ahead_polls.store(polls, Ordering::SeqCst);
        self.helping.store(helping, Ordering::SeqCst);
    }

    /// Takes a free request frame of worker `rank` without handing the core
    /// to the response thread: each answer that is there is gathered ahead
    /// for it ([`gather_ahead`](Shared::gather_ahead)), which lets the
    /// worker answer and take its next request, and so free a frame; in
    /// between, a few polls while workers have cores of their own. Whether
    /// a frame was taken: `false` (wait as usual, which lets the thread
    /// run) once the polls are spent, or when the worker waits for room to
    /// answer and nothing could be gathered ahead (the thread holds the
    /// gatherer, or its queue is full).
    pub(super) fn take_frame_gathering_ahead(&self, rank: u32) -> Result<bool> {
        let produce = self.sem(Direction::Request, Role::Produce, rank);
        let sem = |source| Error::Sem {
            channel: self.config.name.clone(),
            source,
        };
        let polls = self.ahead_polls.load(Ordering::Relaxed);
        let mut polled = 0;
        loop {
            if produce.try_wait().map_err(sem)? {
                return Ok(true);
            }
            if self.answer_ready(rank) {
                if self.gather_ahead() {
                    polled = 0;
                    continue;
                }
                if self.answer_slots_full() {
                    return Ok(false);
                }
            }
            if polled >= polls {
                return Ok(false);
            }
            polled += 1;
            std::hint::spin_loop();
        }
    }

    /// A request the sending thread gathered ahead, handed out as a gather
    /// in `mode` takes it: its frames become the gatherer's (swapped, not
    /// copied). Every answer was there, so a [`Mode::First`] gather takes
    /// rank 0's.
    pub(super) fn hand_out_ahead<'a>(
        &'a self,
        mut gatherer: MutexGuard<'a, Gatherer>,
        ahead: Ahead,
        mode: Mode,
    ) -> Result<Option<Answers<'a>>> {
        let mut frames = ahead.frames?;
        if Slot::of(ahead.mode) != Slot::of(mode) {
            gatherer.spare.push(frames);
            return Err(Error::ResponseThread {
                channel: self.config.name.clone(),
                reason: "a request the sending thread gathered ahead for the response thread \
                         was asked for from the other kind of slot (init or response) than \
                         the mode it was sent in",
            });
        }
        std::mem::swap(&mut gatherer.frames, &mut frames);
        gatherer.spare.push(frames);
        Ok(Some(match mode {
            Mode::First => Answers::One(Picked {
                gatherer,
                rank: 0,
                turn: None,
            }),
            _ => Answers::All(Gathered {
                gatherer,
                turn: None,
            }),
        }))
    }

    /// For the response thread, from a send waiting for a free frame: takes
    /// the next request's answers out of the slots (never waiting) and
    /// queues them; the thread hands them to the handler in send order as
    /// if it had gathered them. The worker, given room, answers its next
    /// request and frees a frame without the thread having to run: sharing
    /// a core with the sender, the thread is then switched to once for
    /// many requests rather than once or twice for each. Whether a request
    /// was gathered so.
    ///
    /// Only a request recorded in a mode that takes every answer, with
    /// every answer there; not while the thread itself gathers (it holds
    /// the gatherer), nor beyond `ahead_cap` queued requests.
    pub(super) fn gather_ahead(&self) -> bool {
        let mut gatherer = match self.gatherer.try_lock() {
            Ok(gatherer) => gatherer,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return false,
        };
        if gatherer.ahead.len() >= self.ahead_cap {
            return false;
        }
        let index = gatherer.next;
        let Some(mode) = self.modes.mode_of(index) else {
            return false;
        };
        if mode == Mode::First || index >= self.sent.load(Ordering::Acquire) {
            return false;
        }
        // A look at each count first: a try that finds one missing would
        // also look at that worker's process, which costs a system call.
        if (0..self.config.workers)
            .any(|rank| gatherer.taken[rank as usize].is_none() && !self.answer_ready(rank))
        {
            return false;
        }
        let frames = match self.every_in(
            &mut gatherer,
            Waiter::Caller,
            Slot::of(mode),
            &mut Wait::Try,
        ) {
            // The gathered frames go with the request; the gatherer keeps
            // a spare set (every worker's buffer) for the next gather.
            Ok(true) => {
                let workers = self.config.workers as usize;
                let mut frames = gatherer
                    .spare
                    .pop()
                    .unwrap_or_else(|| (0..workers).map(|_| Vec::new()).collect());
                std::mem::swap(&mut gatherer.frames, &mut frames);
                Ok(frames)
            }
            // Not every answer is there yet: what was taken stays taken.
            Ok(false) => return false,
            // One answer unusable, every slot consumed: the request's own
            // error, handed out in its turn.
            Err(e) if gatherer.next != index => Err(e),
            // A dead worker or a broken semaphore: nothing consumed, the
            // thread's own gather meets it (and the send's wait too).
            Err(_) => return false,
        };
        gatherer.ahead.push_back(Ahead {
            index,
            mode,
            frames,
        });
        self.ahead_len
            .store(gatherer.ahead.len(), Ordering::Release);
        drop(gatherer);
        // A thread idle since it saw nothing to gather looks again.
        self.idle.changed();
        true
    }
}

#[cfg(test)]
mod tests {
    use std::thread::{self, JoinHandle};
    use std::time::{Duration, Instant};

    use nodeipc_testkit::{Watchdog, unique_name};

    use super::*;
    use crate::{Channel, ChannelBuilder};
    use std::sync::Arc;

    const LONG: Duration = Duration::from_secs(20);

    /// Worker threads answering each request with `[request[0], rank]`.
    fn answering(channel: &ChannelBuilder<Raw, Raw>, count: u32) -> Vec<JoinHandle<()>> {
        (0..count)
            .map(|rank| {
                let channel = channel.clone();
                thread::spawn(move || {
                    let mut worker = channel.join(rank).unwrap();
                    while let Ok(request) = worker.recv() {
                        if worker.respond(&[request[0], rank as u8]).is_err() {
                            return;
                        }
                    }
                })
            })
            .collect()
    }

    /// Until every worker has posted an answer not yet taken.
    fn until_answered(shared: &Shared) {
        let start = Instant::now();
        while !(0..shared.config.workers).all(|rank| shared.answer_ready(rank)) {
            assert!(start.elapsed() < LONG, "the workers never answered");
            thread::sleep(Duration::from_micros(100));
        }
    }

    fn bytes(answers: Answers<'_>) -> Vec<(u32, Vec<u8>)> {
        match answers {
            Answers::All(all) => all.iter().map(|(r, b)| (r, b.to_vec())).collect(),
            Answers::One(one) => vec![(one.rank(), one.bytes().to_vec())],
        }
    }

    #[test]
    fn a_send_waiting_for_a_frame_gathers_ahead_and_gathers_hand_the_queue_out_in_order() {
        let _dog = Watchdog::new("gather ahead", Duration::from_secs(60));
        let channel = Channel::builder(unique_name("gather-ahead"))
            .workers(2)
            .depth(2)
            .timeout(LONG)
            .raw();
        let mut coordinator = channel.create().unwrap();
        let workers = answering(&channel, 2);
        coordinator.wait_for_workers(LONG).unwrap();
        coordinator.set_aggregate(|_: &Gathered<'_>| Ok(1));
        // As a running response thread has it, with no thread: sends record
        // their modes and gather ahead; the gathers below are the test's.
        let shared = Arc::clone(&coordinator.shared);
        shared.recording.store(true, Ordering::SeqCst);
        shared.ahead_polls.store(AHEAD_POLLS, Ordering::SeqCst);
        shared.helping.store(true, Ordering::SeqCst);
        // No First request: a send never gathers one ahead, and with no
        // thread to gather it, the ring would stay full.
        let sent_as = |i: usize| [Mode::All, Mode::Aggregated, Mode::Rank0AfterAll][i % 3];
        let requests = 24;
        for i in 0..requests {
            // Two frames, two answer slots and the request a worker holds:
            // from the sixth request on, a send finds no frame free until
            // an answer is taken, and with every answer there, takes it.
            if i >= 5 {
                until_answered(&shared);
            }
            coordinator.set_response_mode(sent_as(i));
            assert_eq!(coordinator.send(&[i as u8]).unwrap(), i as u64);
        }
        let queued = shared.ahead_len.load(Ordering::SeqCst);
        assert!(queued >= 5, "only {queued} requests were gathered ahead");
        // The gathers: queued requests first, then the slots', in send
        // order, each as the gather's mode asks (a First gather of a queued
        // request, every answer there, takes rank 0's).
        for i in 0..requests {
            let asked = match i % 4 {
                0 => Mode::All,
                1 => Mode::First,
                2 => Mode::Rank0AfterAll,
                _ => sent_as(i),
            };
            let got = bytes(coordinator.recv(asked).unwrap());
            let b = i as u8;
            let want = match asked {
                Mode::All => vec![(0, vec![b, 0]), (1, vec![b, 1])],
                Mode::Rank0AfterAll => vec![(0, vec![b, 0])],
                Mode::Aggregated => vec![(1, vec![b, 1])],
                _ => {
                    let [(rank, _)] = got.as_slice() else {
                        panic!("request {i}: {got:?}")
                    };
                    vec![(*rank, vec![b, *rank as u8])]
                }
            };
            assert_eq!(got, want, "request {i}, sent as {:?}", sent_as(i));
        }
        assert_eq!(shared.ahead_len.load(Ordering::SeqCst), 0);
        coordinator.drain().unwrap();
        shared.helping.store(false, Ordering::SeqCst);
        drop(coordinator);
        workers.into_iter().for_each(|w| w.join().unwrap());
    }
}
